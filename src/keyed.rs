//! The keyed limiter shared by every algorithm whose per-key state fits one `u64`:
//! a store of `AtomicU64` words, the compare-and-set loop that applies the algorithm's
//! pure step to them, and the forgetting of idle keys (see `evict.rs`). Algorithms
//! know nothing of atomics or maps; this module knows nothing of tokens or windows.

use crate::clock::{Clock, Epoch};
use crate::evict::{Overflow, Settings, Sweeper};
use crate::store::{KeyMap, Store};
use crate::sync::{AtomicU64, Ordering, fence};
use crate::{Decision, KeyRef, Quota};
use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};

/// The one word no algorithm's state ever is: it marks a key being forgotten.
pub const RETIRED: u64 = u64::MAX;

/// A rate-limiting algorithm whose per-key state is one `u64` word, written as pure
/// functions of that word and the time (nanoseconds since the limiter's epoch).
///
/// No state is ever [`RETIRED`].
pub trait WordAlgorithm: Send + Sync + Sized {
    /// The algorithm under `quota`.
    fn new(quota: &Quota) -> Self;

    /// The state of a key seen for the first time, or seen again after it was
    /// forgotten.
    fn fresh(&self) -> u64;

    /// One request for `cost` at `now`: the word to store, and the decision. Returns
    /// `word` itself exactly when the state did not change, so nothing is written.
    fn acquire(&self, word: u64, now: u64, cost: u32) -> (u64, Decision);

    /// What a key with state `word` has left at `now`, without taking anything.
    fn available(&self, word: u64, now: u64) -> u32;

    /// `cost` given back at `now` (a refund of an earlier take, capped at what a key
    /// can hold): the word to store; `word` itself when nothing changes.
    fn refund(&self, word: u64, now: u64, cost: u32) -> u64;

    /// Whether `word` carries no information as of `at`: for every reading at or
    /// after `at`, requests on it answer exactly as on [`fresh`](Self::fresh) and
    /// leave the same word. Only such keys are forgotten.
    fn forgettable(&self, word: u64, at: u64) -> bool;
}

/// Keys, their state words, the algorithm that steps them, the clock, and the
/// bookkeeping that forgets idle keys.
pub(crate) struct WordLimiter<A, K, C, S> {
    words: KeyMap<K, AtomicU64, S>,
    pub(crate) algorithm: A,
    epoch: Epoch<C>,
    sweeper: Sweeper,
    /// The allowance shared by new keys that find the map full, if the overflow policy
    /// is `Overflow::Shared`.
    overflow: Option<(A, AtomicU64)>,
}

/// The word was retired: its key is being forgotten; look it up again.
pub struct Retired;

impl<A, K, C, S> WordLimiter<A, K, C, S>
where
    A: WordAlgorithm,
    K: Hash + Eq,
    C: Clock,
    S: BuildHasher,
{
    /// An empty limiter whose epoch starts now.
    pub(crate) fn new(
        algorithm: A,
        clock: C,
        hasher: S,
        expected_keys: usize,
        forgetting: &Settings,
    ) -> Self {
        let overflow = match forgetting.max_keys {
            Some((_, Overflow::Shared(quota))) => {
                let algorithm = A::new(&quota);
                let word = AtomicU64::new(algorithm.fresh());
                Some((algorithm, word))
            }
            _ => None,
        };
        Self {
            words: KeyMap::with_hasher(hasher, expected_keys),
            algorithm,
            epoch: Epoch::start(clock),
            sweeper: Sweeper::new(forgetting, expected_keys),
            overflow,
        }
    }

    /// One request applied to the word found for a key.
    #[inline]
    fn apply(&self, word: &AtomicU64, now: u64, cost: u32) -> Result<Decision, Retired> {
        acquire_word(&self.algorithm, word, self.sweeper.reading(now), cost)
    }

    #[inline]
    pub(crate) fn acquire<Q>(&self, key: &Q, cost: u32) -> Decision
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        let now = self.epoch.elapsed();
        loop {
            let found = match self.words.get(key, |word| self.apply(word, now, cost)) {
                Some(found) => found,
                None => match self.admit_new_key(now, cost) {
                    Some(decision) => return decision,
                    None => {
                        let fresh = || AtomicU64::new(self.algorithm.fresh());
                        let found = self
                            .words
                            .get_or_insert(key, fresh, |word| self.apply(word, now, cost));
                        self.sweep_if_due();
                        found
                    }
                },
            };
            match found {
                Ok(decision) => return decision,
                // Help the sweeper remove the retired entry, then look again.
                Err(Retired) => {
                    // Relaxed: reading the word that the predicate is asked about.
                    self.words
                        .remove_if(key, |word| word.load(Ordering::Relaxed) == RETIRED);
                }
            }
        }
    }

    /// For a key with no state: `None` if it may be stored, or the answer if the map is
    /// at its cap and nothing could be forgotten.
    #[cold]
    fn admit_new_key(&self, now: u64, cost: u32) -> Option<Decision> {
        if self.words.len() < self.sweeper.max_keys {
            return None;
        }
        if self.sweeper.cap_sweep_allowed(now) {
            self.evict_idle();
            if self.words.len() < self.sweeper.max_keys {
                return None;
            }
        }
        self.sweeper.count_overflow();
        Some(match &self.overflow {
            // The shared word is never retired.
            Some((algorithm, word)) => {
                acquire_word(algorithm, word, now, cost).unwrap_or(Decision::Overflow {
                    retry_after: self.sweeper.next_cap_sweep_in(now),
                })
            }
            None => Decision::Overflow {
                retry_after: self.sweeper.next_cap_sweep_in(now),
            },
        })
    }

    /// After an insertion: sweeps if the map has doubled since the last sweep and no
    /// other sweep is running.
    fn sweep_if_due(&self) {
        if self.sweeper.due(self.words.len())
            && let Some(_sweeping) = self.sweeper.try_lock()
        {
            self.sweep();
        }
    }

    /// Forgets every key that is forgettable as of `now - margin`; returns how many.
    pub(crate) fn evict_idle(&self) -> usize {
        let _sweeping = self.sweeper.lock();
        self.sweep()
    }

    /// One pass over the map; the caller holds the sweep lock.
    fn sweep(&self) -> usize {
        let at = self.sweeper.begin(self.epoch.elapsed());
        let mut forgotten = 0;
        self.words.retain(|word| {
            // Relaxed: the value is only compared; the CAS below decides.
            let current = word.load(Ordering::Relaxed);
            if current == RETIRED {
                return false; // retired by an acquirer's race or an earlier pass
            }
            if !self.algorithm.forgettable(current, at) {
                return true;
            }
            // Release: publishes this sweep's watermark to whoever sees RETIRED.
            // Relaxed on failure: the word changed, so it is in use; keep it.
            let retired =
                word.compare_exchange(current, RETIRED, Ordering::Release, Ordering::Relaxed);
            forgotten += usize::from(retired.is_ok());
            retired.is_err()
        });
        self.sweeper.end(forgotten, self.words.len());
        forgotten
    }

    /// Gives `cost` back to `key`. An unknown or retired key is one that carries no
    /// information — nothing was taken from it that it still misses — so there is
    /// nothing to give back.
    pub(crate) fn refund<Q>(&self, key: &Q, cost: u32)
    where
        K: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
    {
        let now = self.epoch.elapsed();
        self.words.get(key, |word| {
            let now = self.sweeper.reading(now);
            // Relaxed: as in `acquire_word`; the word guards no other memory.
            let mut current = word.load(Ordering::Relaxed);
            while current != RETIRED {
                let new = self.algorithm.refund(current, now, cost);
                if new == current {
                    return;
                }
                // Relaxed on success and failure: as in `acquire_word`.
                match word.compare_exchange_weak(current, new, Ordering::Relaxed, Ordering::Relaxed)
                {
                    Ok(_) => return,
                    Err(actual) => current = actual,
                }
            }
        });
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
        let word = word
            .filter(|&w| w != RETIRED)
            .unwrap_or_else(|| self.algorithm.fresh());
        self.algorithm.available(word, self.sweeper.reading(now))
    }

    pub(crate) fn len(&self) -> usize {
        self.words.len()
    }

    /// Keys forgotten so far, and requests turned to the overflow policy.
    pub(crate) fn stats(&self) -> (u64, u64) {
        self.sweeper.stats()
    }

    /// A broken sweep for a loom mutant: removes forgettable entries without retiring
    /// their words first.
    #[cfg(turnstile_loom)]
    pub(crate) fn sweep_without_retiring(&self) {
        let at = self.sweeper.begin(self.epoch.elapsed());
        // Relaxed: this is the mutant; the model shows why it is wrong.
        self.words
            .retain(|word| !self.algorithm.forgettable(word.load(Ordering::Relaxed), at));
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
/// token, and a refill is applied once. The one exception is a word found `RETIRED`,
/// after which an Acquire fence pairs with the sweeper's Release (see `evict.rs`).
/// loom checks all of it in `loom-tests/`.
#[inline]
pub fn acquire_word<A: WordAlgorithm>(
    algorithm: &A,
    word: &AtomicU64,
    now: u64,
    cost: u32,
) -> Result<Decision, Retired> {
    // Relaxed: see above; a stale value only makes the CAS fail and retry.
    let mut current = word.load(Ordering::Relaxed);
    loop {
        if current == RETIRED {
            // Acquire: the sweeper's watermark, raised before it retired this word, is
            // visible to the caller's next look at the key.
            fence(Ordering::Acquire);
            return Err(Retired);
        }
        let (new, decision) = algorithm.acquire(current, now, cost);
        if new == current {
            // Nothing changed (a denial without refill, a cost over capacity): no write,
            // so under attack the key's cache line stays shared between cores.
            return Ok(decision);
        }
        // Relaxed on success and failure: see above.
        match word.compare_exchange_weak(current, new, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return Ok(decision),
            Err(actual) => current = actual,
        }
    }
}
