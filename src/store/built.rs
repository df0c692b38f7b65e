//! The store of normal builds: papaya (`papaya.rs`) by default, or, for a limiter built
//! with [`word_store`](crate::Builder::word_store) whose states are single words, the
//! word store (`words/`), which keeps them beside their keys. Which one is chosen when
//! the limiter is built; each call then takes one well-predicted branch to it.

use super::papaya::PapayaStore;
use super::words::WordStore;
use super::{Store, StoreKind};
use crate::KeyRef;
use crate::algorithm::Stored;
use crate::sync::AtomicU64;
use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};

/// The store a limiter was built with: keys and their states of type `V`.
// The word store holds its key count's 16 cache-padded cells inline (2 KB): one store
// per limiter, built once, and boxing it would add a load to every lookup.
#[allow(clippy::large_enum_variant)]
pub(crate) enum BuiltStore<K, V: Stored, S: BuildHasher> {
    /// The default, for every `V`.
    Papaya(PapayaStore<K, V, S>),
    /// Chosen per limiter, only for `V::WORD`.
    Words(WordStore<K, S>),
}

impl<K, V, S> BuiltStore<K, V, S>
where
    K: Hash + Eq + Clone + 'static,
    V: Stored,
    S: BuildHasher + Clone + 'static,
{
    /// An empty store of the `kind` asked for. A state that is not a single word lives
    /// in papaya whatever the kind (the word store holds words only), as
    /// [`word_store`](crate::Builder::word_store) documents.
    pub(crate) fn build(kind: StoreKind, hasher: S, expected_keys: usize) -> Self {
        match kind {
            StoreKind::Words if V::WORD => {
                BuiltStore::Words(WordStore::with_hasher(hasher, expected_keys))
            }
            _ => BuiltStore::Papaya(PapayaStore::with_hasher(hasher, expected_keys)),
        }
    }
}

/// The store `V` lives in, as the first or the second of two expressions. For a `V`
/// that is not a word the second arm is dead (a store of such states is never the word
/// store, `build`), and the compiler drops it.
macro_rules! pick {
    ($store:expr, $papaya:ident => $on_papaya:expr, $words:ident => $on_words:expr) => {
        match $store {
            BuiltStore::Papaya($papaya) => $on_papaya,
            BuiltStore::Words($words) if V::WORD => $on_words,
            BuiltStore::Words(_) => unreachable!("turnstile: the word store holds only words"),
        }
    };
}

impl<K, V, S> Store<K, V, S> for BuiltStore<K, V, S>
where
    K: Hash + Eq + Clone + 'static,
    V: Stored,
    S: BuildHasher + Clone + 'static,
{
    fn with_hasher(hasher: S, expected_keys: usize) -> Self {
        Self::build(StoreKind::Papaya, hasher, expected_keys)
    }

    #[inline(always)]
    fn get<Q, R>(&self, key: &Q, f: impl FnOnce(&V) -> R) -> Option<R>
    where
        K: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
    {
        pick!(self, papaya => papaya.get(key, f), words => words.get(key, |word| f(V::of_word(word))))
    }

    #[inline(always)]
    fn get_or_else<Q, R>(&self, key: &Q, f: impl FnOnce(&V) -> R, missed: impl FnOnce() -> R) -> R
    where
        K: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
    {
        pick!(self,
            papaya => papaya.get_or_else(key, f, missed),
            words => words.get_or_else(key, |word| f(V::of_word(word)), missed))
    }

    fn get_locked<Q, R>(&self, key: &Q, f: impl FnOnce(&V) -> R) -> Option<R>
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        pick!(self,
            papaya => papaya.get_locked(key, f),
            words => words.get_locked(key, |word| f(V::of_word(word))))
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
        papaya => papaya.get_or_insert(key, value, first, f),
        words => words.get_or_insert(
            key,
            |key| value(key).into_word(),
            |word: &mut AtomicU64| first(V::of_word_mut(word)),
            |word| f(V::of_word(word)),
        ))
    }

    fn remove_if<Q>(&self, key: &Q, mut pred: impl FnMut(&V) -> bool) -> bool
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        pick!(self,
            papaya => papaya.remove_if(key, pred),
            words => words.remove_if(key, |word| pred(V::of_word(word))))
    }

    fn retain(&self, mut keep: impl FnMut(&V) -> bool, pause: impl FnMut()) {
        pick!(self,
            papaya => papaya.retain(keep, pause),
            words => words.retain(|word| keep(V::of_word(word)), pause))
    }

    fn swap(&self, key: K, current: &V, new: V) -> bool {
        pick!(self,
        papaya => papaya.swap(key, current, new),
        words => {
            // `current` is a word of this store (`V::WORD`): compared by address.
            let current = std::ptr::from_ref(current).cast::<AtomicU64>();
            words.swap_at(key, current, new.into_word().into_inner())
        })
    }

    fn len(&self) -> usize {
        pick!(self, papaya => papaya.len(), words => words.len())
    }

    fn wants_preparation(&self) -> bool {
        pick!(self, papaya => papaya.wants_preparation(), words => words.wants_preparation())
    }

    fn prepare(&self, stop: impl Fn() -> bool) {
        pick!(self, papaya => papaya.prepare(stop), words => words.prepare(stop))
    }
}
