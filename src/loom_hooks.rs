//! Internals that `loom-tests/` needs, exposed only under `--cfg turnstile_loom`: the
//! pure step functions, so the model tests can build deliberately broken protocols
//! (mutants) from the same semantics; raw state words, so they can check them; and the
//! switches for the mutants that live inside turnstile's own protocols.
// Handles for the model tests, hidden and absent from every other build: not API.
#![allow(missing_debug_implementations)]

use crate::algorithm::{Algorithm, Reconfigurable, Rules};
use crate::keyed::KeyedLimiter;
use crate::per_key::PerKey;
use crate::sync::{AtomicU64, Ordering};
use crate::{Clock, Quota, RateLimiter};
use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};

pub use crate::algorithm::Blocked;
pub use crate::sync::mutants::{Mutant, with as with_mutant};

pub use crate::token_bucket::TokenBucketRules;

/// The leased Redis limiter's per-key hold (`redis/lease/hold.rs`), for its model.
pub mod lease {
    pub use crate::redis::lease::hold::{
        Added, MAX_HELD, TICK_SHIFT, add, drop_expired, give_back, held, load, pack, take, tick,
    };
}
pub use crate::word::{MOVED, RETIRED, WordAlgorithm, acquire_word, admit_word};

/// The raw state word of `key` in `limiter` (None if the key has no state), with the
/// limiter's word algorithm to decode it.
pub fn word<W, K, C, S, Q>(limiter: &KeyedLimiter<W, K, C, S>, key: &Q) -> (Option<u64>, W)
where
    W: WordAlgorithm + Algorithm<K, State = AtomicU64> + Copy,
    K: Hash + Eq + Clone + Send + Sync + Borrow<Q> + 'static,
    C: Clock,
    S: BuildHasher + Clone + Send + Sync + 'static,
    Q: ?Sized + Hash + Eq,
{
    // Relaxed: read after the model's threads are joined, which orders everything.
    let word = limiter.with_state(key, |word| word.load(Ordering::Relaxed));
    (word, *limiter.algorithm())
}

/// The token bucket's raw word of `key`, with its rules.
pub fn token_bucket_word<K, C, S, Q>(
    limiter: &crate::TokenBucket<K, C, S>,
    key: &Q,
) -> (Option<u64>, TokenBucketRules)
where
    K: Hash + Eq + Clone + Send + Sync + Borrow<Q> + 'static,
    C: Clock,
    S: BuildHasher + Clone + Send + Sync + 'static,
    Q: ?Sized + Hash + Eq,
{
    word(limiter, key)
}

/// Requests of `limiter` under a configuration that gives every key `quota`,
/// published now: what a reloaded file's checks carry (`KeyedLimiter::pin_quota`).
pub fn pin_quota<A, K, C, S>(
    limiter: &std::sync::Arc<KeyedLimiter<PerKey<A, K>, K, C, S>>,
    quota: Quota,
) -> impl RateLimiter<K> + Send + Sync + 'static
where
    A: Reconfigurable,
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock + 'static,
    S: BuildHasher + Clone + Send + Sync + 'static,
{
    limiter.pin_quota(quota)
}

/// The configuration `key`'s entry in `limiter` is at (None if the key has no state).
pub fn configuration<A, K, C, S, Q>(
    limiter: &KeyedLimiter<PerKey<A, K>, K, C, S>,
    key: &Q,
) -> Option<u64>
where
    A: Reconfigurable,
    K: Hash + Eq + Clone + Send + Sync + Borrow<Q> + 'static,
    C: Clock,
    S: BuildHasher + Clone + Send + Sync + 'static,
    Q: ?Sized + Hash + Eq,
{
    limiter.with_state(key, |entry| entry.configuration())
}

/// Mutant of `evict_idle`: removes forgettable keys from the map without first
/// retiring their words, so a thread holding a word can still update it.
pub fn sweep_without_retiring<W, K, C, S>(limiter: &KeyedLimiter<W, K, C, S>)
where
    W: WordAlgorithm + Algorithm<K, State = AtomicU64>,
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock,
    S: BuildHasher + Clone + Send + Sync + 'static,
{
    with_mutant(Mutant::RemoveWithoutRetiring, || {
        limiter.evict_idle();
    });
}

/// The eviction cycle's rotation alone: the ring's young map made old, new keys'
/// claims in it closed once the insertions begun before are done; nothing aged or
/// drained. For models of a new key meeting a rotation; `limiter` must run no other
/// cycle (manual eviction, no `evict_idle` at the same time).
pub fn rotate<A, K, C, S>(limiter: &KeyedLimiter<A, K, C, S>)
where
    A: Algorithm<K>,
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock,
    S: BuildHasher + Clone + Send + Sync + 'static,
{
    limiter.rotate_ring();
}

/// The fixed window's step and rules.
pub mod fixed_window {
    pub use super::word;
    pub use crate::fixed_window::FixedWindowRules;
}

/// The sliding window counter's step and rules.
pub mod sliding_window {
    pub use super::word;
    pub use crate::sliding_window::{At, SlidingWindowRules};
}

/// GCRA's step and rules.
pub mod gcra {
    pub use super::word;
    pub use crate::gcra::GcraRules;
}

/// The watermark alone, so that a model can run the retire protocol on a bare word,
/// without the store's own synchronization.
pub struct Watermark(crate::evict::Watermark);

impl Watermark {
    /// A watermark at 0.
    pub fn new() -> Self {
        Self(crate::evict::Watermark::new())
    }

    /// Starts a forgetting at `now`, with no margin: raises the watermark to `now`;
    /// returns the instant keys must be forgettable at.
    pub fn begin(&self, now: u64) -> u64 {
        self.0.raise(now);
        now
    }

    /// A request's reading `now`, raised to the watermark.
    pub fn reading(&self, now: u64) -> u64 {
        self.0.reading(now)
    }
}

impl Default for Watermark {
    fn default() -> Self {
        Self::new()
    }
}

/// The sweep's step on one word: retire it if it is forgettable as of `at`; whether
/// it did.
pub fn retire_if_forgettable<W: WordAlgorithm>(rules: &W, word: &AtomicU64, at: u64) -> bool {
    <W as Rules<()>>::retire_if_forgettable(rules, word, at)
        == crate::algorithm::Retirement::Retired
}

/// The sweeper thread's handshake alone: what a request and the thread share.
pub struct SweepSignal(crate::evict::sweeper::Signal);

impl SweepSignal {
    /// No request yet.
    pub fn new() -> Self {
        Self(crate::evict::sweeper::Signal::default())
    }

    /// The thread that waits on the signal, set before the first request.
    pub fn set_waiter(&self, waiter: loom::thread::Thread) {
        self.0.set_waiter(waiter);
    }

    /// A request asks for a sweep.
    pub fn request(&self) {
        self.0.request();
    }

    /// The thread waits for a request and takes it; `false` once told to stop.
    pub fn wait(&self) -> bool {
        self.0.wait().is_some()
    }

    /// The limiter is being dropped.
    pub fn stop(&self) {
        self.0.stop();
    }
}

impl Default for SweepSignal {
    fn default() -> Self {
        Self::new()
    }
}

/// A direct limiter's raw state word, with its word algorithm to decode it.
pub fn direct_word<W, C>(limiter: &crate::DirectLimiter<W, C>) -> (u64, W)
where
    W: WordAlgorithm + Algorithm<(), State = AtomicU64> + Copy,
    C: Clock,
{
    // Relaxed: read after the model's threads are joined, which orders everything.
    (
        limiter.state().load(Ordering::Relaxed),
        *limiter.algorithm(),
    )
}
