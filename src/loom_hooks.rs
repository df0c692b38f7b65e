//! Internals that `loom-tests/` needs, exposed only under `--cfg turnstile_loom`: the
//! pure step functions, so the model tests can build deliberately broken protocols
//! (mutants) from the same semantics, and raw state words, so they can check them.
//! The token bucket's are at the top level; each later algorithm has a module.

use crate::Clock;
use crate::token_bucket::TokenBucket;
use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};

pub use crate::keyed::{WordAlgorithm, acquire_word};
pub use crate::token_bucket::state::{Layout, acquire, available};

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

/// The fixed window's step, layout and raw words.
pub mod fixed_window {
    use crate::{Clock, FixedWindow};
    use std::borrow::Borrow;
    use std::hash::{BuildHasher, Hash};

    pub use crate::fixed_window::state::{Layout, acquire, available};

    /// The raw state word of `key` in `limiter` (None if the key has no state), with
    /// the limiter's layout to decode it.
    pub fn word<K, C, S, Q>(limiter: &FixedWindow<K, C, S>, key: &Q) -> (Option<u64>, Layout)
    where
        K: Hash + Eq + Borrow<Q>,
        C: Clock,
        S: BuildHasher,
        Q: ?Sized + Hash + Eq,
    {
        limiter.word(key)
    }
}

/// The sliding window counter's step, layout and raw words.
pub mod sliding_window {
    use crate::{Clock, SlidingWindowCounter};
    use std::borrow::Borrow;
    use std::hash::{BuildHasher, Hash};

    pub use crate::sliding_window::state::{At, Layout, acquire, available};

    /// The raw state word of `key` in `limiter` (None if the key has no state), with
    /// the limiter's layout to decode it.
    pub fn word<K, C, S, Q>(
        limiter: &SlidingWindowCounter<K, C, S>,
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
}

/// GCRA's step, parameters and raw words.
pub mod gcra {
    use crate::{Clock, Gcra};
    use std::borrow::Borrow;
    use std::hash::{BuildHasher, Hash};

    pub use crate::gcra::state::{Layout, acquire, available};

    /// The raw state word (TAT) of `key` in `limiter` (None if the key has no state),
    /// with the limiter's parameters.
    pub fn word<K, C, S, Q>(limiter: &Gcra<K, C, S>, key: &Q) -> (Option<u64>, Layout)
    where
        K: Hash + Eq + Borrow<Q>,
        C: Clock,
        S: BuildHasher,
        Q: ?Sized + Hash + Eq,
    {
        limiter.word(key)
    }
}
