//! The store a keyed limiter was built with, and the one face its request path calls:
//! the ring of papaya maps by default (`ring/`), or, for a limiter built with
//! [`word_store`](crate::Builder::word_store) whose states are single words, the word
//! store (`words/`), which keeps them beside their keys and forgets them in place.
//! Under loom the same two, on loom's stand-ins. Which one is chosen when the limiter
//! is built; each call then takes one well-predicted branch to it.

use super::insertions::Insertions;
use super::ring::{Missed, Ring, View};
use super::{InPlace, Relocation, StoreKind};
use crate::KeyRef;
use crate::algorithm::{Blocked, Stored};
use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};

/// The maps of the ring in this build: papaya, or loom's stand-in.
#[cfg(not(turnstile_loom))]
type RingMap<K, V, S> = super::papaya::PapayaMap<K, V, S>;
#[cfg(turnstile_loom)]
type RingMap<K, V, S> = super::loom::LoomMap<K, V, S>;

/// The ring of this build's maps.
type RingOf<K, V, S> = Ring<K, V, S, RingMap<K, V, S>>;

/// The word store of this build: ours, holding words, or loom's stand-in.
#[cfg(not(turnstile_loom))]
type Words<K, V, S> = WordsOf<K, V, S>;
#[cfg(turnstile_loom)]
type Words<K, V, S> = super::loom::LoomWords<K, V, S>;

/// The word store holding states of type `V` (which are single words: `V::WORD`), seen
/// as a store of `V`.
#[cfg(not(turnstile_loom))]
pub(crate) struct WordsOf<K, V, S> {
    words: super::words::WordStore<K, S>,
    states: std::marker::PhantomData<fn() -> V>,
}

/// The store a limiter was built with.
// The word store holds its key count's 16 cache-padded cells inline (2 KB): one store
// per limiter, built once, and boxing it would add a load to every lookup.
#[allow(clippy::large_enum_variant)]
pub(crate) enum KeyedStore<K, V: Stored, S: BuildHasher> {
    /// The default, for every `V`.
    Ring(RingOf<K, V, S>),
    /// Chosen per limiter, only for single words: forgotten in place, by sweeps.
    Words {
        store: Words<K, V, S>,
        /// Every insertion registers here, for the watermark's handshake.
        insertions: Insertions,
    },
}

impl<K, V, S> KeyedStore<K, V, S>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Stored + Send + Sync + 'static,
    S: BuildHasher + Clone + Send + Sync + 'static,
{
    /// An empty store of the `kind` asked for. A state that is not a single word lives
    /// in the ring whatever the kind (the word store holds words only), as
    /// [`word_store`](crate::Builder::word_store) documents.
    pub(crate) fn build(kind: StoreKind, hasher: S, expected_keys: usize) -> Self {
        match kind {
            StoreKind::Words if V::WORD => KeyedStore::Words {
                store: Words::with_hasher(hasher, expected_keys),
                insertions: Insertions::new(),
            },
            _ => KeyedStore::Ring(Ring::with_hasher(hasher, expected_keys)),
        }
    }

    /// The insertion handshake (the watermark's, and the ring's).
    pub(crate) fn insertions(&self) -> &Insertions {
        match self {
            KeyedStore::Ring(ring) => ring.insertions(),
            KeyedStore::Words { insertions, .. } => insertions,
        }
    }

    /// The ring, if the limiter keeps its keys in one.
    pub(crate) fn ring(&self) -> Option<&RingOf<K, V, S>> {
        match self {
            KeyedStore::Ring(ring) => Some(ring),
            KeyedStore::Words { .. } => None,
        }
    }

    /// The word store, if the limiter keeps its keys in one.
    pub(crate) fn words(&self) -> Option<&Words<K, V, S>> {
        match self {
            KeyedStore::Ring(_) => None,
            KeyedStore::Words { store, .. } => Some(store),
        }
    }

    /// `f` on `key`'s state where a request finds it (in the ring, relocated into the
    /// young map if the old one held it); `Absent` if the key has none. The hot path.
    #[inline(always)]
    pub(crate) fn look<Q, R>(
        &self,
        key: &Q,
        f: impl Fn(&V) -> Result<R, Blocked> + Copy,
        relocation: &impl Relocation<V>,
    ) -> Result<R, Missed>
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        match self {
            KeyedStore::Ring(ring) => ring.look(key, f, relocation),
            KeyedStore::Words { store, .. } => match store.get(key, f) {
                Some(answer) => answer.map_err(Missed::Blocked),
                None => Err(Missed::Absent(View::FIRST)),
            },
        }
    }

    /// A new key's first request (see [`Ring::insert_new`]): `create` runs before the
    /// insertion registers, `first` after, on the state no other thread sees yet; `f`
    /// on the state another thread stored first. `Relocated` (or, on the word store, a
    /// state gone before it could be used): look again.
    pub(crate) fn insert_new<Q, R>(
        &self,
        view: View,
        key: &Q,
        create: impl FnOnce(&K) -> V,
        first: impl FnOnce(&mut V) -> Result<R, Blocked>,
        f: impl Fn(&V) -> Result<R, Blocked>,
        relocation: &impl Relocation<V>,
    ) -> Result<R, Blocked>
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        match self {
            KeyedStore::Ring(ring) => ring.insert_new(view, key, create, first, f, relocation),
            KeyedStore::Words { store, insertions } => {
                // Registered after `create` (user code, for per-key rules), before
                // `first` reads the watermark; held until the store answers.
                let mut registration = None;
                let first = |state: &mut V| {
                    registration = Some(insertions.register());
                    first(state)
                };
                let found = store.get_or_insert(key, create, first, f);
                drop(registration);
                // Gone before it could be used (forgotten at once), or hidden for a
                // moment by a move: the next look finds the key absent, fresh or moved.
                found.unwrap_or(Err(Blocked::Retired))
            }
        }
    }

    /// `f` on `key`'s state for a caller that takes no state to mean something (a
    /// peek's fresh answer, a refund's no-op): `None` only if the key has no state. In
    /// the ring, a state in the old map is relocated first, and a miss looked at again
    /// (a drain can relocate the key between the two maps' lookups); on the word store
    /// a miss, or a state frozen while its segment grows, is looked at again under the
    /// segment's lock, since a lock-free lookup can miss a key being swapped or moved.
    pub(crate) fn settled<Q, T>(
        &self,
        key: &Q,
        f: impl Fn(&V) -> Result<T, Blocked>,
        relocation: &impl Relocation<V>,
        trust_first_miss: bool,
    ) -> Option<Result<T, Blocked>>
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        match self {
            KeyedStore::Ring(ring) => match ring.look(key, &f, relocation) {
                Ok(answer) => Some(Ok(answer)),
                Err(Missed::Blocked(blocked)) => Some(Err(blocked)),
                // A look can miss a state the drain relocates between its look in the
                // young map and its look in the old one (a request that would insert
                // finds it as it inserts; these callers insert nothing): a second
                // look, which does not miss it (`Ring::get`).
                Err(Missed::Absent(_)) if trust_first_miss => None,
                Err(Missed::Absent(_)) => ring.get(key, f),
            },
            KeyedStore::Words { store, .. } => {
                match store.get(key, &f) {
                    None | Some(Err(Blocked::Retired | Blocked::Relocated)) => {}
                    found => return found,
                }
                if trust_first_miss {
                    return None;
                }
                store.get_locked(key, f)
            }
        }
    }

    /// `f` on `key`'s state where it is, by a lock-free lookup (in the ring, the young
    /// map's or else the old map's, not relocated).
    pub(crate) fn get<Q, R>(&self, key: &Q, f: impl Fn(&V) -> R) -> Option<R>
    where
        K: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
    {
        match self {
            KeyedStore::Ring(ring) => ring.get(key, f),
            KeyedStore::Words { store, .. } => store.get(key, f),
        }
    }

    /// `f` on `key`'s state as a locked lookup sees it (the word store's, which never
    /// misses a present key); in the ring, any lookup.
    pub(crate) fn get_locked<Q, R>(&self, key: &Q, f: impl Fn(&V) -> R) -> Option<R>
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        match self {
            KeyedStore::Ring(ring) => ring.get(key, f),
            KeyedStore::Words { store, .. } => store.get_locked(key, f),
        }
    }

    /// A request met a retired state of `key`: on the word store, help remove it so
    /// the next look finds the key absent or fresh. The ring's drain removes its
    /// retired states itself (and the next look goes past them).
    pub(crate) fn remove_retired<Q>(&self, key: &Q, is_retired: impl FnMut(&V) -> bool)
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        if let KeyedStore::Words { store, .. } = self {
            store.remove_if(key, is_retired);
        }
    }

    /// Stores `new` as `key`'s state if its state is `current` itself; whether it did.
    pub(crate) fn swap(&self, key: K, current: &V, new: V) -> bool {
        match self {
            KeyedStore::Ring(ring) => ring.swap(key, current, new),
            KeyedStore::Words { store, .. } => store.swap(key, current, new),
        }
    }

    /// Number of keys stored.
    pub(crate) fn len(&self) -> usize {
        match self {
            KeyedStore::Ring(ring) => ring.len(),
            KeyedStore::Words { store, .. } => store.len(),
        }
    }

    /// `f` on `key`'s state, wherever it is, without relocating it: for loom models.
    #[cfg(turnstile_loom)]
    pub(crate) fn peek_state<Q, R>(&self, key: &Q, f: impl Fn(&V) -> R) -> Option<R>
    where
        K: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
    {
        match self {
            KeyedStore::Ring(ring) => ring.get(key, f),
            KeyedStore::Words { store, .. } => store.get(key, f),
        }
    }
}

#[cfg(not(turnstile_loom))]
mod words_of {
    //! The word store, holding `AtomicU64` words, seen as a store of the states the
    //! words are (`Stored::of_word`): a conversion of references, free at run time.

    use super::WordsOf;
    use crate::KeyRef;
    use crate::algorithm::Stored;
    use crate::store::InPlace;
    use crate::store::{Judged, Pass};
    use crate::sync::AtomicU64;
    use std::borrow::Borrow;
    use std::hash::{BuildHasher, Hash};

    impl<K, V, S> InPlace<K, V, S> for WordsOf<K, V, S>
    where
        K: Hash + Eq + Clone + 'static,
        V: Stored,
        S: BuildHasher + Clone + 'static,
    {
        fn with_hasher(hasher: S, expected_keys: usize) -> Self {
            Self {
                words: crate::store::words::WordStore::with_hasher(hasher, expected_keys),
                states: std::marker::PhantomData,
            }
        }

        #[inline(always)]
        fn get<Q, R>(&self, key: &Q, f: impl FnOnce(&V) -> R) -> Option<R>
        where
            K: Borrow<Q>,
            Q: ?Sized + Hash + Eq,
        {
            self.words.get(key, |word| f(V::of_word(word)))
        }

        fn get_locked<Q, R>(&self, key: &Q, f: impl FnOnce(&V) -> R) -> Option<R>
        where
            K: Borrow<Q>,
            Q: ?Sized + KeyRef<K>,
        {
            self.words.get_locked(key, |word| f(V::of_word(word)))
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
            self.words.get_or_insert(
                key,
                |key| value(key).into_word(),
                |word: &mut AtomicU64| first(V::of_word_mut(word)),
                |word| f(V::of_word(word)),
            )
        }

        fn remove_if<Q>(&self, key: &Q, mut pred: impl FnMut(&V) -> bool) -> bool
        where
            K: Borrow<Q>,
            Q: ?Sized + KeyRef<K>,
        {
            self.words.remove_if(key, |word| pred(V::of_word(word)))
        }

        fn swap(&self, key: K, current: &V, new: V) -> bool {
            // `current` is a word of this store (`V::WORD`): compared by address.
            let current = std::ptr::from_ref(current).cast::<AtomicU64>();
            self.words
                .swap_at(key, current, new.into_word().into_inner())
        }

        fn len(&self) -> usize {
            self.words.len()
        }

        fn wants_preparation(&self) -> bool {
            self.words.wants_preparation()
        }

        fn prepare(&self, stop: impl Fn() -> bool) {
            self.words.prepare(stop)
        }

        fn sweep_parts(&self) -> usize {
            self.words.sweep_parts()
        }

        fn sweep_share(&self, pass: &Pass, mut judge: impl FnMut(&V, u64) -> Judged) {
            self.words
                .sweep_share(pass, |word, at| judge(V::of_word(word), at))
        }

        fn sweep_walk(
            &self,
            pass: &Pass,
            mut judge: impl FnMut(&V, u64) -> Judged,
            breathe: impl FnMut() -> bool,
        ) -> bool {
            self.words
                .sweep_walk(pass, |word, at| judge(V::of_word(word), at), breathe)
        }
    }
}
