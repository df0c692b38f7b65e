//! Settings shared by every keyed limiter: clock, hasher, expected number of keys,
//! forgetting and the store.

use crate::clock::QuantaClock;
use crate::evict::{EvictionSettings, Overflow};
use crate::quota::Quota;
use crate::store::StoreKind;
use std::marker::PhantomData;
use std::time::Duration;

/// The default hasher for keys: foldhash's fast, randomly seeded hasher — about twice
/// as fast as std's SipHash on small keys, and seeded per limiter against collision
/// attacks.
pub type DefaultHasher = foldhash::fast::RandomState;

/// A builder for a limiter of type `L`, made by that limiter's `builder` function.
///
/// ```
/// use turnstile::{ManualClock, Quota, TokenBucket};
///
/// let clock = ManualClock::new();
/// let limiter: TokenBucket<u64, ManualClock> = TokenBucket::builder(Quota::per_second(5)?)
///     .clock(clock.clone())
///     .expected_keys(10_000)
///     .build()?;
/// # Ok::<(), turnstile::QuotaError>(())
/// ```
#[derive(Debug)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct Builder<L, C = QuantaClock, S = DefaultHasher> {
    pub(crate) quota: Quota,
    pub(crate) clock: C,
    pub(crate) hasher: S,
    pub(crate) expected_keys: usize,
    pub(crate) eviction: EvictionSettings,
    /// Where the limiter keeps its keys' states.
    pub(crate) store: StoreKind,
    /// The name metrics and events report the limiter under; none, none reported.
    pub(crate) name: Option<std::sync::Arc<str>>,
    limiter: PhantomData<fn() -> L>,
}

impl<L> Builder<L> {
    pub(crate) fn new(quota: Quota) -> Self {
        Builder::with_clock(quota, QuantaClock::new())
    }
}

impl<L, C> Builder<L, C> {
    pub(crate) fn with_clock(quota: Quota, clock: C) -> Self {
        Self {
            quota,
            clock,
            hasher: DefaultHasher::default(),
            expected_keys: 0,
            eviction: EvictionSettings::default(),
            store: StoreKind::default(),
            name: None,
            limiter: PhantomData,
        }
    }
}

impl<L, C, S> Builder<L, C, S> {
    /// Uses `clock` instead of the default [`QuantaClock`].
    pub fn clock<C2>(self, clock: C2) -> Builder<L, C2, S> {
        Builder {
            quota: self.quota,
            clock,
            hasher: self.hasher,
            expected_keys: self.expected_keys,
            eviction: self.eviction,
            store: self.store,
            name: self.name,
            limiter: PhantomData,
        }
    }

    /// Hashes keys with `hasher` instead of [`DefaultHasher`]. The keyed limiters
    /// need it to be `Clone`. The stores place a key by the hash's low bits and
    /// check it by its top ones (the word store also picks a segment by the top
    /// bits), so the hasher must mix every bit: an identity hash of small integers
    /// puts them all in one probe chain. The default is seeded per limiter, so
    /// clients cannot aim their keys at one chain.
    pub fn hasher<S2>(self, hasher: S2) -> Builder<L, C, S2> {
        Builder {
            quota: self.quota,
            clock: self.clock,
            hasher,
            expected_keys: self.expected_keys,
            eviction: self.eviction,
            store: self.store,
            name: self.name,
            limiter: PhantomData,
        }
    }

    /// Sizes the store for about `n` keys up front (the ring's first young map, or the
    /// word store), so it does not grow while they first arrive; the ring's other two
    /// maps start empty. On the word store the first sweep also waits for 2·`n` keys.
    pub fn expected_keys(mut self, n: usize) -> Self {
        self.expected_keys = n;
        self
    }

    /// Forgets a key only once its state has carried no information for `margin`
    /// (default 1 s). A request whose clock reading is older than the latest
    /// forgetting's `now - margin` uses that instant as its reading, so the margin is
    /// also how much clock lag (between cores, or from a preemption between reading
    /// the clock and updating the key) stays exact.
    pub fn eviction_margin(mut self, margin: Duration) -> Self {
        self.eviction.margin = margin;
        self
    }

    /// Never forgets on its own and never starts the sweeper thread; only
    /// `evict_idle()` begins forgetting (call it from a thread of yours, or use
    /// `sweep_in_background`), though new keys' insertions still take their small
    /// shares of a drain it has begun. By default the limiter's own sweeper thread
    /// forgets keys, new keys' insertions taking such shares (see [`crate::evict`]).
    pub fn manual_eviction(mut self) -> Self {
        self.eviction.automatic = false;
        self
    }

    /// Names the limiter in metrics and events (features `metrics`, `tracing`): its
    /// decisions, keys and sweeps are reported under this name (see
    /// [`crate::observe`]). An unnamed limiter reports nothing.
    #[cfg(any(feature = "metrics", feature = "tracing"))]
    #[cfg_attr(docsrs, doc(cfg(any(feature = "metrics", feature = "tracing"))))]
    pub fn name(mut self, name: impl Into<std::sync::Arc<str>>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Holds at most about `max_keys` keys (see [`Overflow`] and [`crate::evict`] for
    /// how far concurrency can exceed it). At the cap, a new key is answered at once
    /// by `overflow`; with automatic forgetting it first asks the sweeper thread for
    /// room (at most once per margin), and new keys are stored again once it has made
    /// some. The default store holds the keys of about the last two to three margins
    /// in normal operation (the young map, the old one, and keys moving between
    /// them), so a cap below three margins' worth of active keys can be reached
    /// without an attack (`results/memory-stream.md`).
    pub fn max_keys(mut self, max_keys: usize, overflow: Overflow) -> Self {
        self.eviction.max_keys = Some((max_keys, overflow));
        self
    }
}
