//! The product faces: one keyed limiter type per algorithm, each [`KeyedLimiter`] with
//! that algorithm's rules, and one way to build any of them (`new`, `with_clock`,
//! [`Builder::build`], each returning `Result<_, QuotaError>`) for every rule made from
//! a quota ([`FromQuota`]).

use super::KeyedLimiter;
use crate::algorithm::{Algorithm, FromQuota};
use crate::builder::{Builder, DefaultHasher};
use crate::clock::{Clock, QuantaClock};
use crate::fixed_window::FixedWindowRules;
use crate::gcra::GcraRules;
use crate::per_key::PerKey;
use crate::sliding_log::SlidingLogRules;
use crate::sliding_window::SlidingWindowRules;
use crate::token_bucket::TokenBucketRules;
use crate::{Quota, QuotaError};
use std::hash::{BuildHasher, Hash};

/// A keyed token bucket: each key may burst up to the quota's capacity and gains one
/// token per refill interval, on a refill grid shared by all keys.
///
/// Each key's whole state — the grid index at which its bucket is full again — is one
/// `AtomicU64` (see [the guide](crate::guide::state_word#the-state-word)), updated by a
/// compare-and-set loop, found through a lock-free map lookup. Once a key exists, a
/// request takes one clock reading, one store lookup and usually one CAS: no lock, no
/// allocation. A denial that changes nothing writes nothing, so under attack the key's
/// cache line stays shared between cores.
///
/// Semantics (exact, identical in every turnstile implementation): tokens arrive on a
/// grid shared by all keys, a new key starts full, refill is lazy and capped at the
/// capacity, a denial changes nothing and its `retry_after` is the exact wait, and a
/// lagging clock reading admits less, never more. Every capacity from 1 to
/// `u32::MAX` fits beside every interval from 1 ns. Stated in full, with the reasons,
/// in [`guide::state_word`](crate::guide::state_word).
///
/// Memory: one 8-byte word of state per key, in the limiter's store with the key (the
/// store's own cost per key: [the guide](crate::guide::algorithms)). A key is
/// forgotten once its bucket has been full for the eviction margin (a full bucket
/// carries no information on the shared grid), so memory follows the active keys.
///
/// ```
/// use turnstile::{Quota, TokenBucket};
///
/// let limiter = TokenBucket::<String>::new(Quota::per_second(2)?)?;
/// assert!(limiter.try_acquire("alice"));
/// assert!(limiter.try_acquire("alice"));
/// assert!(!limiter.try_acquire("alice")); // burst of 2 spent
/// assert!(limiter.try_acquire("bob"));    // keys are independent
/// # Ok::<(), turnstile::QuotaError>(())
/// ```
pub type TokenBucket<K, C = QuantaClock, S = DefaultHasher> =
    KeyedLimiter<TokenBucketRules, K, C, S>;

/// A [`TokenBucket`] in which each key has its own quota, from a resolver asked once when
/// the key's state is created, and whose quotas can be changed while it runs: built by
/// [`Builder::build_per_key`] or [`Builder::build_reconfigurable`]; see
/// [`crate::per_key`].
pub type PerKeyTokenBucket<K, C = QuantaClock, S = DefaultHasher> =
    KeyedLimiter<PerKey<TokenBucketRules, K>, K, C, S>;

/// A keyed fixed window: at most `limit` requests per calendar window, windows
/// aligned to the limiter's epoch.
///
/// From a [`Quota`]: `limit = capacity` and `window = capacity × refill_every`, so
/// `Quota::per_minute(100)` allows 100 requests in each minute `[0, 60 s)`,
/// `[60 s, 120 s)`, ... counted from the limiter's creation.
///
/// Semantics (exact):
/// - A request is admitted iff the requests admitted in the current window plus its
///   cost are at most `limit`; a new window starts at zero. A denial changes nothing;
///   its `retry_after` is the exact wait until the next window starts.
/// - A clock reading older than the key's window counts as no time elapsed: it sees
///   the key's window.
/// - A [settle](crate::RateLimiter::settle) above the estimate counts past the
///   limit (a debt, carried into the next window; a key counting past the limit is
///   denied even a cost of zero); **a settle below the estimate gives nothing
///   back**: the count cannot tell which window counted the estimate (see
///   [`Settlement`](crate::Settlement)).
///
/// **The edge — up to 2 × `limit` in a moment.** The count resets at each boundary,
/// whatever happened just before it: with 100 per minute, 100 requests in the last
/// second of one window and 100 in the first second of the next are all admitted,
/// 200 within two seconds. Where that matters, use
/// [`SlidingWindowCounter`](crate::SlidingWindowCounter) (at most `limit` plus a
/// share that grows with the span), [`SlidingLog`](crate::SlidingLog) (exact) or
/// [`TokenBucket`](crate::TokenBucket).
///
/// Memory: one 8-byte word per key (window index and count, layout in
/// [the guide](crate::guide::algorithms#fixed-window)), in the limiter's store with the
/// key. Every [`Quota`] fits; it is lock-free and allocation-free per check like
/// `TokenBucket`, sharing its compare-and-set loop.
///
/// ```
/// use turnstile::{FixedWindow, ManualClock, Quota};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let limiter = FixedWindow::<u64, _>::with_clock(Quota::per_minute(100)?, clock.clone())?;
/// clock.set(Duration::from_secs(59));
/// assert!(limiter.acquire(&1, 100).is_allowed()); // the last second of window 0
/// clock.set(Duration::from_secs(60));
/// assert!(limiter.acquire(&1, 100).is_allowed()); // the first second of window 1
/// # Ok::<(), turnstile::QuotaError>(())
/// ```
pub type FixedWindow<K, C = QuantaClock, S = DefaultHasher> =
    KeyedLimiter<FixedWindowRules, K, C, S>;

/// A [`FixedWindow`] in which each key has its own quota, from a resolver asked once when
/// the key's state is created, and whose quotas can be changed while it runs: built by
/// [`Builder::build_per_key`] or [`Builder::build_reconfigurable`]; see
/// [`crate::per_key`].
pub type PerKeyFixedWindow<K, C = QuantaClock, S = DefaultHasher> =
    KeyedLimiter<PerKey<FixedWindowRules, K>, K, C, S>;

/// A keyed GCRA (generic cell rate algorithm, a leaky bucket as a meter — what
/// nginx's `limit_req`, governor and redis-cell implement): one theoretical arrival
/// time per key.
///
/// From a [`Quota`]: burst = `capacity`, emission interval = `refill_every`.
///
/// Semantics (exact): GCRA makes the same decisions as a token bucket with the same
/// capacity refilled **continuously**, one token per `refill_every`, fractions
/// included: a key holds `capacity − (TAT − now) / refill_every` tokens, a request is
/// admitted iff it holds at least its cost, and a new key starts full. A denial
/// changes nothing; its `retry_after` is the exact wait until the key holds the cost.
///
/// **Against [`TokenBucket`](crate::TokenBucket)**, which adds whole tokens on a grid
/// shared by all keys (epoch + multiples of the interval), for one key and the same
/// quota, with a non-decreasing clock:
/// - *From the same history*, the token bucket holds GCRA's whole tokens, or one
///   more: between a grid point and the instant the continuous refill completes the
///   same token. So every request GCRA admits, `TokenBucket` admits too, and
///   `TokenBucket` admits at most one token more.
/// - *In any span* `[a, b]`, GCRA admits at most `capacity + ⌊(b − a) /
///   refill_every⌋`; `TokenBucket` at most the grid points in `(a, b]` more than
///   `capacity`, up to one more: `capacity + 1` at two readings one nanosecond
///   apart across a grid point, where GCRA spaces the next token a whole interval
///   after the last.
/// - *Over a long schedule* their admissions are not within a constant of each
///   other: both keep the long-run rate, but once a decision differs the histories
///   differ. A client that retries every `refill_every − 1` ns against capacity 1 has
///   every retry that lands in a new interval admitted by `TokenBucket`, and every
///   second one by GCRA.
///
/// **Clock readings.** GCRA keeps no time of the key's last request, only TAT, so a
/// reading older than it cannot be recognised: its debt counts from the reading, as
/// if the refill ran backwards. It therefore admits less than the later reading
/// would, never more, and its `retry_after` is longer by exactly the skew, as in
/// `TokenBucket` — where the window algorithms count such a reading as no time
/// elapsed.
///
/// **Range.** TAT lies up to one full refill (`capacity × refill_every`) past the
/// reading, plus the refill of a settle's debt cap (up to another full refill, less
/// where the two would pass 2^62 ns: [`Settlement`](crate::Settlement)), and the state
/// word keeps its top bit clear ([`crate::guide::state_word`]), so the limiter's time
/// ends that long (and 3 ns) before 2^63 ns (292 years): later
/// readings count as that instant, where time stands still — no key gains anything
/// more, and a `retry_after` is measured from that instant. The constructors refuse,
/// with [`QuotaError::Unsupported`](crate::QuotaError::Unsupported), a full refill
/// longer than 2^62 ns (146 years), so every accepted limiter is exact for at least
/// 146 years.
///
/// Memory: one 8-byte word of state per key, in the limiter's store with the key. Lock-free
/// and allocation-free per check, sharing `TokenBucket`'s compare-and-set loop.
///
/// ```
/// use turnstile::{Gcra, ManualClock, Quota};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let limiter = Gcra::<u64, _>::with_clock(Quota::per_second(10)?, clock.clone())?;
/// assert!(limiter.acquire(&1, 10).is_allowed()); // the burst
/// clock.set(Duration::from_millis(150));
/// assert_eq!(limiter.peek(&1), 1); // one token per 100 ms, from the drain on
/// # Ok::<(), turnstile::QuotaError>(())
/// ```
pub type Gcra<K, C = QuantaClock, S = DefaultHasher> = KeyedLimiter<GcraRules, K, C, S>;

/// A keyed sliding window counter: about `limit` requests in any window, estimated
/// from two fixed windows' counts in one word.
///
/// From a [`Quota`]: `limit = capacity` and `window = capacity × refill_every`, so
/// `Quota::per_minute(100)` means about 100 in any minute. Fixed windows are aligned
/// to the limiter's epoch, as in [`FixedWindow`](crate::FixedWindow).
///
/// Semantics (exact integers, no floats):
/// - The key counts `previous × (limit − q) / limit + current`, where `current` and
///   `previous` are the requests admitted in this fixed window and the one before,
///   and `q` is the whole refill intervals elapsed in this window: the previous
///   window weighs by how much of it the sliding window still overlaps, measured in
///   whole intervals and **rounded up** (so the estimate moves on the same grid as
///   [`TokenBucket`](crate::TokenBucket)'s refills). A request is admitted iff that
///   count plus its cost is at most `limit` — an exact rational comparison; the
///   `remaining` reported is that count rounded up to a whole request, subtracted
///   from `limit`.
/// - A denial changes nothing; its `retry_after` is the exact wait until the count
///   has fallen far enough, always a grid point.
/// - A clock reading older than the key's window counts as no time elapsed: it sees
///   the start of the key's window, where the previous window weighs fully.
/// - A [settle](crate::RateLimiter::settle) above the estimate counts past the
///   limit (a key whose count is past it is denied even a cost of zero); **a settle
///   below the estimate gives nothing back**: the counts cannot tell which window
///   counted the estimate (see [`Settlement`](crate::Settlement)).
///
/// **Against the exact sliding log** (a request counts for exactly one window after
/// it), with a non-decreasing clock:
/// - *Over-admission*: in any span of `d <= window` nanoseconds it admits at most
///   `limit + ⌊(d − 1) / refill_every⌋` — `limit` within one interval, and never the
///   fixed window's `2 × limit` in a moment (with 100 per minute: at most 103 in any
///   two seconds). Over a whole window that is up to `2 × limit − 1` when the
///   previous window's requests all came at its very end. The log: `limit`, always.
/// - *Under-admission*: it assumes the previous window's requests were spread
///   evenly, so from the same history it may count up to
///   `⌈previous × (limit − q) / limit⌉` more than are really in the sliding window
///   (at worst `limit`, right after a boundary, when the previous window's requests
///   all came at its start), and deny what the log would admit.
///
/// Memory: one 8-byte word per key (window index and two counts, layout in
/// [the guide](crate::guide::algorithms#sliding-window-counter)), in the limiter's store
/// with the key. Lock-free and allocation-free per check, sharing `TokenBucket`'s
/// compare-and-set loop.
///
/// Two counts beside the window index do not fit every quota: the constructors
/// refuse, with [`QuotaError::Unsupported`](crate::QuotaError::Unsupported), a capacity
/// above about the square root of the window in nanoseconds — `Quota::per_second(n)` up
/// to n = 16,383,
/// `per_minute` up to 131,071, `per_hour` up to 1,048,575.
///
/// ```
/// use turnstile::{ManualClock, Quota, SlidingWindowCounter};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let limiter =
///     SlidingWindowCounter::<u64, _>::with_clock(Quota::per_minute(100)?, clock.clone())?;
/// clock.set(Duration::from_secs(59));
/// assert!(limiter.acquire(&1, 100).is_allowed()); // the last second of window 0
/// clock.set(Duration::from_secs(60));
/// assert!(!limiter.acquire(&1, 1).is_allowed()); // the previous minute still counts
/// # Ok::<(), turnstile::QuotaError>(())
/// ```
pub type SlidingWindowCounter<K, C = QuantaClock, S = DefaultHasher> =
    KeyedLimiter<SlidingWindowRules, K, C, S>;

/// A keyed sliding log: at most `limit` requests in **any** window — exact.
///
/// From a [`Quota`]: `limit = capacity` and `window = capacity × refill_every`, so
/// `Quota::per_minute(100)` means at most 100 in any 60 seconds, wherever they start.
///
/// Semantics (exact):
/// - The key keeps the time of each admitted request; a request at `s` counts while
///   `now − window < s`, so it leaves exactly one window later. A request is
///   admitted iff the requests counted plus its cost are at most `limit`; a cost `k`
///   is recorded as `k` requests at the same time.
/// - Only admitted requests are recorded: a denial changes nothing, so a client that
///   keeps retrying while denied is not locked out. Its `retry_after` is the exact
///   wait until enough recorded requests have left the window.
/// - A clock reading older than the key's newest recorded request counts as no time
///   elapsed.
///
/// The edge: none. No window of length `window` ever holds more than `limit`
/// admitted requests, at any boundary, for any schedule (with a non-decreasing clock;
/// a lagging reading is recorded as the key's newest time, so the limit holds for
/// the times recorded).
///
/// A refund drops the oldest timestamps still in the window rather than the
/// refunded request's own (which it cannot tell apart): right after the take, the
/// log then frees room no earlier than the exact one would, so it never admits more.
/// A [settle](crate::RateLimiter::settle), later, could find the estimate's
/// timestamps gone and drop a later request's instead, so **a settle below the
/// estimate gives nothing back**; one above it records the difference at the
/// settle's reading (a key with more than `limit` in the window is denied even a
/// cost of zero; see [`Settlement`](crate::Settlement)). A key whose timestamps have
/// all left the window is forgotten like any idle key.
///
/// Memory and cost: each key keeps up to `limit` timestamps, so this is the one
/// algorithm whose state grows with the limit. Per key: a 32-byte `Mutex` and ring
/// header in the store, plus 8 bytes per timestamp slot; the ring starts empty, grows
/// by doubling from 4 slots while the requests in the window need room, never
/// beyond `limit` slots, and keeps its largest size. A check takes the key's own
/// lock (never a global one) and allocates only while the key's ring grows; an
/// admitted cost `k` writes `k` timestamps. Every quota is accepted, but a large
/// limit is as large in memory: a key that uses a limit of a billion holds 8 GB, and
/// an allocation that fails aborts the process, as anywhere in Rust. For limits in
/// the millions and beyond (bandwidth in bytes, say), use
/// [`TokenBucket`](crate::TokenBucket). Prefer
/// [`SlidingWindowCounter`](crate::SlidingWindowCounter) (one word, lock-free,
/// approximate) unless the limit must hold exactly in every window.
///
/// ```
/// use turnstile::{ManualClock, Quota, SlidingLog};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let limiter = SlidingLog::<u64, _>::with_clock(Quota::per_minute(100)?, clock.clone())?;
/// clock.set(Duration::from_secs(59));
/// assert!(limiter.acquire(&1, 100).is_allowed());
/// clock.set(Duration::from_secs(118));
/// assert!(!limiter.acquire(&1, 1).is_allowed()); // all 100 are within the last minute
/// clock.set(Duration::from_secs(119));
/// assert!(limiter.acquire(&1, 100).is_allowed()); // exactly one minute later
/// # Ok::<(), turnstile::QuotaError>(())
/// ```
pub type SlidingLog<K, C = QuantaClock, S = DefaultHasher> = KeyedLimiter<SlidingLogRules, K, C, S>;

/// A [`SlidingLog`] in which each key has its own quota, from a resolver asked once when
/// the key's state is created, and whose quotas can be changed while it runs: built by
/// [`Builder::build_per_key`] or [`Builder::build_reconfigurable`]; see
/// [`crate::per_key`].
pub type PerKeySlidingLog<K, C = QuantaClock, S = DefaultHasher> =
    KeyedLimiter<PerKey<SlidingLogRules, K>, K, C, S>;

impl<A, K> KeyedLimiter<A, K>
where
    A: Algorithm<K> + FromQuota + 'static,
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    /// A limiter applying `quota` to every key, on the default clock and hasher.
    ///
    /// Every algorithm's constructor returns a `Result`, so that code written for one
    /// algorithm reads the same for another; [`TokenBucket`], [`FixedWindow`] and
    /// [`SlidingLog`] hold every quota and never refuse one.
    ///
    /// # Errors
    /// [`QuotaError::Unsupported`](crate::QuotaError::Unsupported) from [`Gcra`] when
    /// `capacity × refill_every` exceeds 2^62 ns, and from [`SlidingWindowCounter`]
    /// when the quota's counts do not fit its state word (see each type).
    pub fn new(quota: Quota) -> Result<Self, QuotaError> {
        Self::builder(quota).build()
    }
}

impl<A, K, C> KeyedLimiter<A, K, C>
where
    A: Algorithm<K> + FromQuota + 'static,
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock + 'static,
{
    /// A limiter on `clock` — a [`ManualClock`](crate::ManualClock) in tests, say.
    ///
    /// # Errors
    /// As [`new`](KeyedLimiter::new).
    pub fn with_clock(quota: Quota, clock: C) -> Result<Self, QuotaError> {
        Builder::<KeyedLimiter<A, K>, C>::with_clock(quota, clock).build()
    }
}

impl<A, K, C, S> Builder<KeyedLimiter<A, K>, C, S>
where
    A: Algorithm<K> + FromQuota + 'static,
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock + 'static,
    S: BuildHasher + Clone + Send + Sync + 'static,
{
    /// Builds the limiter; its epoch (the token bucket's refill grid's origin, the
    /// windows' first start) is now.
    ///
    /// # Errors
    /// As [`KeyedLimiter::new`], for the limiter's quota and for an
    /// [`Overflow::Shared`](crate::Overflow::Shared) quota.
    pub fn build(self) -> Result<KeyedLimiter<A, K, C, S>, QuotaError> {
        let rules = A::from_quota(&self.quota)?;
        self.build_running(rules, A::from_quota)
    }
}
