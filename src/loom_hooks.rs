//! Internals that `loom-tests/` needs, exposed only under `--cfg turnstile_loom`: the
//! pure step functions, so the model tests can build deliberately broken protocols
//! (mutants) from the same semantics, and raw state words, so they can check them.

use crate::Clock;
use crate::token_bucket::TokenBucket;
use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};

pub use crate::keyed::{RETIRED, WordAlgorithm, acquire_word};
pub use crate::token_bucket::state::{Layout, acquire, available, refund};

/// The raw state word of `key` in `limiter` (None if the key has no state), with the
/// limiter's layout to decode it.
pub fn token_bucket_word<K, C, S, Q>(
    limiter: &TokenBucket<K, C, S>,
    key: &Q,
) -> (Option<u64>, Layout)
where
    K: Hash + Eq + Borrow<Q>,
    C: Clock,
    S: BuildHasher,
    Q: ?Sized + Hash + Eq,
{
    limiter.word(key)
}

/// Mutant of `TokenBucket::evict_idle`: removes forgettable keys from the map without
/// first retiring their words, so a thread holding a word can still update it.
pub fn sweep_without_retiring<K, C, S>(limiter: &TokenBucket<K, C, S>)
where
    K: Hash + Eq,
    C: Clock,
    S: BuildHasher,
{
    limiter.sweep_without_retiring()
}
