//! Internals that `loom-tests/` needs, exposed only under `--cfg turnstile_loom`: the
//! pure step functions, so the model tests can build deliberately broken protocols
//! (mutants) from the same semantics, and raw state words, so they can check them.

use crate::Clock;
use crate::keyed::KeyedLimiter;
use crate::sync::Ordering;
use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};

pub use crate::keyed::{Algorithm, Retired};
pub use crate::token_bucket::state::{Layout, acquire, available, refund};
pub use crate::word::{RETIRED, WordAlgorithm, acquire_word};

/// The raw state word of `key` in `limiter` (None if the key has no state), with the
/// limiter's word algorithm to decode it.
pub fn word<W, K, C, S, Q>(limiter: &KeyedLimiter<W, K, C, S>, key: &Q) -> (Option<u64>, W)
where
    W: WordAlgorithm + Copy,
    K: Hash + Eq + Borrow<Q>,
    C: Clock,
    S: BuildHasher,
    Q: ?Sized + Hash + Eq,
{
    // Relaxed: read after the model's threads are joined, which orders everything.
    let word = limiter.with_state(key, |word| word.load(Ordering::Relaxed));
    (word, *limiter.algorithm())
}

/// The token bucket's raw word of `key`, with its layout.
pub fn token_bucket_word<K, C, S, Q>(
    limiter: &crate::TokenBucket<K, C, S>,
    key: &Q,
) -> (Option<u64>, Layout)
where
    K: Hash + Eq + Borrow<Q>,
    C: Clock,
    S: BuildHasher,
    Q: ?Sized + Hash + Eq,
{
    word(limiter, key)
}

/// Mutant of `evict_idle`: removes forgettable keys from the map without first
/// retiring their words, so a thread holding a word can still update it.
pub fn sweep_without_retiring<W, K, C, S>(limiter: &KeyedLimiter<W, K, C, S>)
where
    W: WordAlgorithm,
    K: Hash + Eq,
    C: Clock,
    S: BuildHasher,
{
    // Relaxed: this is the mutant; the model shows why it is wrong.
    limiter.sweep_without_retiring(|algorithm, word, at| {
        algorithm.forgettable(word.load(Ordering::Relaxed), at)
    });
}

/// The fixed window's step and layout.
pub mod fixed_window {
    pub use super::word;
    pub use crate::fixed_window::state::{Layout, acquire, available};
}

/// The sliding window counter's step and layout.
pub mod sliding_window {
    pub use super::word;
    pub use crate::sliding_window::state::{At, Layout, acquire, available};
}

/// GCRA's step and parameters.
pub mod gcra {
    pub use super::word;
    pub use crate::gcra::state::{Layout, acquire, available};
}

/// Mutant of carrying keys over to a new configuration: the entry is replaced without
/// freezing its state first, so a take on the old state can be lost.
pub fn carry_over_without_freezing<A, K, C, S, M>(limiter: &mut KeyedLimiter<A, K, C, S, M>)
where
    A: Algorithm,
    M: crate::per_key::Mode<A, K>,
{
    limiter.carry_without_freezing = true;
}
