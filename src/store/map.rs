//! The store of normal builds: the word store (`words/`) for states that are a single
//! word, which it keeps beside their keys, and the scc store (`scc.rs`) for anything
//! else. Which one is fixed by the state type ([`Stored::WORD`], a constant), so every
//! call goes straight to its store; the other is never built.

use super::Store;
use super::scc::SccStore;
use super::stored::Stored;
use super::words::WordStore;
use crate::KeyRef;
use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};
use std::sync::atomic::AtomicU64;

/// A map from keys to states of type `V`.
pub(crate) enum Map<K, V: Stored, S: BuildHasher> {
    /// For `V::WORD`.
    Words(WordStore<K, S>),
    /// For every other `V`.
    Scc(SccStore<K, V, S>),
}

/// The store `V` lives in, as the first or the second of two expressions. The other
/// arm cannot happen: a map is built for its state type (`with_hasher`), and the
/// compiler drops the arm whose constant is false.
macro_rules! pick {
    ($map:expr, $words:ident => $on_words:expr, $scc:ident => $on_scc:expr) => {
        match $map {
            Map::Words($words) if V::WORD => $on_words,
            Map::Scc($scc) if !V::WORD => $on_scc,
            _ => unreachable!("turnstile: a map holds the store its state type names"),
        }
    };
}

impl<K, V, S> Store<K, V, S> for Map<K, V, S>
where
    K: Hash + Eq + Clone + 'static,
    V: Stored,
    S: BuildHasher + Clone + 'static,
{
    fn with_hasher(hasher: S, expected_keys: usize) -> Self {
        if V::WORD {
            Map::Words(WordStore::with_hasher(hasher, expected_keys))
        } else {
            Map::Scc(SccStore::with_hasher(hasher, expected_keys))
        }
    }

    #[inline(always)]
    fn get<Q, R>(&self, key: &Q, f: impl FnOnce(&V) -> R) -> Option<R>
    where
        K: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
    {
        pick!(self, words => words.get(key, |word| f(V::of_word(word))), scc => scc.get(key, f))
    }

    #[inline(always)]
    fn get_or_else<Q, R>(&self, key: &Q, f: impl FnOnce(&V) -> R, missed: impl FnOnce() -> R) -> R
    where
        K: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
    {
        pick!(self,
            words => words.get_or_else(key, |word| f(V::of_word(word)), missed),
            scc => scc.get_or_else(key, f, missed))
    }

    fn get_locked<Q, R>(&self, key: &Q, f: impl FnOnce(&V) -> R) -> Option<R>
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        pick!(self,
            words => words.get_locked(key, |word| f(V::of_word(word))),
            scc => scc.get_locked(key, f))
    }

    #[inline]
    fn get_or_insert<Q, R>(
        &self,
        key: &Q,
        value: impl FnOnce(&K) -> V,
        first: impl FnOnce(&mut V) -> R,
        f: impl FnOnce(&V) -> R,
    ) -> Option<R>
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        pick!(self,
            words => words.get_or_insert(
                key,
                |key| value(key).into_word(),
                |word: &mut AtomicU64| first(V::of_word_mut(word)),
                |word| f(V::of_word(word)),
            ),
            scc => scc.get_or_insert(key, value, first, f))
    }

    fn remove_if<Q>(&self, key: &Q, mut pred: impl FnMut(&V) -> bool) -> bool
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        pick!(self,
            words => words.remove_if(key, |word| pred(V::of_word(word))),
            scc => scc.remove_if(key, pred))
    }

    fn retain(&self, mut keep: impl FnMut(&V) -> bool, pause: impl FnMut()) {
        pick!(self,
            words => words.retain(|word| keep(V::of_word(word)), pause),
            scc => scc.retain(keep, pause))
    }

    fn swap(&self, key: K, current: &V, new: V) -> bool {
        pick!(self,
            words => {
                // `current` is a word of this store (`V::WORD`): compared by address.
                let current = std::ptr::from_ref(current).cast::<AtomicU64>();
                words.swap_at(key, current, new.into_word().into_inner())
            },
            scc => scc.swap(key, current, new))
    }

    fn len(&self) -> usize {
        pick!(self, words => words.len(), scc => scc.len())
    }

    fn wants_preparation(&self) -> bool {
        pick!(self, words => words.wants_preparation(), scc => scc.wants_preparation())
    }

    fn prepare(&self, stop: impl Fn() -> bool) {
        pick!(self, words => words.prepare(stop), scc => scc.prepare(stop))
    }
}
