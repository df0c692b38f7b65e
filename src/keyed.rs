//! The keyed limiter shared by every algorithm whose per-key state fits one `u64`:
//! a store of `AtomicU64` words and the compare-and-set loop that applies the
//! algorithm's pure step to them. Algorithms know nothing of atomics or maps; this
//! module knows nothing of tokens or windows.

use crate::clock::{Clock, Epoch};
use crate::store::{KeyMap, Store};
use crate::sync::{AtomicU64, Ordering};
use crate::{Decision, KeyRef};
use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};

/// A rate-limiting algorithm whose per-key state is one `u64` word, written as pure
/// functions of that word and the time (nanoseconds since the limiter's epoch).
pub trait WordAlgorithm: Send + Sync {
    /// The state of a key seen for the first time.
    fn fresh(&self) -> u64;

    /// One request for `cost` at `now`: the word to store, and the decision. Returns
    /// `word` itself exactly when the state did not change, so nothing is written.
    fn acquire(&self, word: u64, now: u64, cost: u32) -> (u64, Decision);

    /// What a key with state `word` has left at `now`, without taking anything.
    fn available(&self, word: u64, now: u64) -> u32;
}

/// Keys, their state words, the algorithm that steps them, and the clock.
pub(crate) struct WordLimiter<A, K, C, S> {
    words: KeyMap<K, AtomicU64, S>,
    pub(crate) algorithm: A,
    epoch: Epoch<C>,
}

impl<A, K, C, S> WordLimiter<A, K, C, S>
where
    A: WordAlgorithm,
    K: Hash + Eq,
    C: Clock,
    S: BuildHasher,
{
    /// An empty limiter whose epoch starts now.
    pub(crate) fn new(algorithm: A, clock: C, hasher: S, expected_keys: usize) -> Self {
        Self {
            words: KeyMap::with_hasher(hasher, expected_keys),
            algorithm,
            epoch: Epoch::start(clock),
        }
    }

    #[inline]
    pub(crate) fn acquire<Q>(&self, key: &Q, cost: u32) -> Decision
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        let now = self.epoch.elapsed();
        let fresh = || AtomicU64::new(self.algorithm.fresh());
        self.words.get_or_insert(key, fresh, |word| {
            acquire_word(&self.algorithm, word, now, cost)
        })
    }

    #[inline]
    pub(crate) fn peek<Q>(&self, key: &Q) -> u32
    where
        K: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
    {
        let now = self.epoch.elapsed();
        // Relaxed: a snapshot of the word itself; it guards no other memory.
        let word = self.words.get(key, |word| word.load(Ordering::Relaxed));
        let word = word.unwrap_or_else(|| self.algorithm.fresh());
        self.algorithm.available(word, now)
    }

    pub(crate) fn len(&self) -> usize {
        self.words.len()
    }

    /// The raw state word of `key`, for loom models.
    #[cfg(turnstile_loom)]
    pub(crate) fn word<Q>(&self, key: &Q) -> Option<u64>
    where
        K: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
    {
        // Relaxed: read after the model's threads are joined, which orders everything.
        self.words.get(key, |word| word.load(Ordering::Relaxed))
    }
}

/// One request applied to a key's word: the thin CAS loop around the algorithm's step.
///
/// Relaxed throughout: the word guards no other memory — it *is* the state — and exact
/// counting needs only what every atomic read-modify-write gives at any ordering: all
/// writes to one word form a single modification order, and a successful CAS replaces
/// exactly the value it compared against. So no two requests can both take the same
/// token, and a refill is applied once. loom checks this in `loom-tests/`.
#[inline]
pub fn acquire_word<A: WordAlgorithm>(
    algorithm: &A,
    word: &AtomicU64,
    now: u64,
    cost: u32,
) -> Decision {
    // Relaxed: see above; a stale value only makes the CAS fail and retry.
    let mut current = word.load(Ordering::Relaxed);
    loop {
        let (new, decision) = algorithm.acquire(current, now, cost);
        if new == current {
            // Nothing changed (a denial without refill, a cost over capacity): no write,
            // so under attack the key's cache line stays shared between cores.
            return decision;
        }
        // Relaxed on success and failure: see above.
        match word.compare_exchange_weak(current, new, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return decision,
            Err(actual) => current = actual,
        }
    }
}
