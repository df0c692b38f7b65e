//! Rate limiting for latency-sensitive hot paths: lock-free and allocation-free per
//! check, exact in its semantics, model-checked with loom.
//!
//! ```
//! use turnstile::{Quota, TokenBucket};
//!
//! // At most 100 requests per minute per user, in bursts of up to 100.
//! let limiter = TokenBucket::<String>::new(Quota::per_minute(100)?);
//!
//! let decision = limiter.acquire("alice", 1);
//! if decision.is_allowed() {
//!     // serve the request
//! } else if let Some(wait) = decision.retry_after() {
//!     // answer 429 and tell the client to come back after `wait`
//! }
//! # Ok::<(), turnstile::QuotaError>(())
//! ```
//!
//! # Algorithms
//! Every limiter implements [`RateLimiter`], keyed, on the same lock-free map and an
//! injected [`Clock`]; pick by what the limit should mean:
//!
//! | type | the limit means | state per key |
//! |---|---|---|
//! | [`TokenBucket`] | bursts of `capacity`, one more every `refill_every` (grid refill) | one `AtomicU64` |
//! | [`Gcra`] | the same with continuous refill: tokens spaced exactly `refill_every` apart | one `AtomicU64` |
//! | [`FixedWindow`] | at most `capacity` per calendar window; up to 2× across a boundary | one `AtomicU64` |
//! | [`SlidingWindowCounter`] | about `capacity` in any window (bounded error, stated) | one `AtomicU64` |
//! | [`SlidingLog`] | at most `capacity` in any window, exactly | a lock and up to `capacity` timestamps |
//!
//! The window algorithms' window is `capacity × refill_every`, so
//! `Quota::per_minute(100)` is 100 per minute for each of them.
//!
//! # What it guarantees
//! - **Exact integer semantics**, the same in every implementation of an algorithm:
//!   see each type. Decisions never depend on thread timing beyond the order in
//!   which requests take effect on a key.
//! - **Lock-free, allocation-free** once a key exists, for every algorithm but
//!   [`SlidingLog`]: one clock reading, one lookup in a lock-free map, one
//!   compare-and-set on the key's `AtomicU64`. A key's first request allocates its
//!   entry.
//! - **Consistency**: a stored key's state changes only by atomic read-modify-write
//!   (for [`SlidingLog`], under the key's own lock); a new key's first request is
//!   applied to its state just before the state is stored, under the lock that makes
//!   the insertion one step. So the decisions on one key are those of some sequential
//!   order of its requests (linearizable per key). Keys are independent; there is no
//!   cross-key ordering.
//! - **Bad input fails at construction**: every [`Quota`] accepted is one the token
//!   bucket, fixed window and sliding log hold exactly; [`SlidingWindowCounter`] and
//!   [`Gcra`] refuse at construction the few they cannot. Nothing panics or
//!   truncates later.
//!
//! # Memory, per-key quotas, reconfiguration
//! Keys whose state carries no information are forgotten on their own, exactly
//! ([`evict`]): memory follows the active keys, with an optional hard cap for hostile
//! key churn. Built with `build_per_key`, each key gets its own quota from a resolver
//! asked once; built with `build_reconfigurable`, quotas change while the limiter runs
//! ([`per_key`]). A request whose first check passed but whose later check refused
//! gives its tokens back with [`RateLimiter::refund`].
//!
//! # Distributed limits
//! With the cargo feature `redis`, the module `turnstile::redis` keeps the state in Redis
//! instead, so limits hold across many servers: the same token bucket semantics, one
//! atomic Lua script per check, with a failure policy for when Redis is unreachable.
//!
//! # Policies and HTTP
//! [`policy`] combines several limits on one request — per-endpoint per user, per IP —
//! all or nothing, giving back what earlier checks took when a later one refuses.
//! With the cargo feature `wait`, `turnstile::wait` sleeps until a request can pass
//! instead of refusing it; with `tower`, `turnstile::http` is a tower layer that
//! answers 429 with `Retry-After` and the IETF `RateLimit-Policy` / `RateLimit`
//! header fields.
//!
//! # Verification
//! turnstile's atomic protocols are model-checked with loom in `loom-tests/`, on the
//! real limiter code, each model with a deliberately broken variant that the checker
//! must reject. Keys live in papaya (by default) or the word store, neither of them
//! loom-aware; the limiters use them only through a small internal store contract
//! (get; a get that never misses a key being swapped; get-or-insert, exactly once,
//! the first request applied before the state is published, an insertion that can
//! lose a race; remove-if; swap by identity; retain; values stable while in use;
//! closures possibly run more than once). Under `--cfg turnstile_loom` a loom-aware
//! store implements that contract exactly as weakly as it is written, so loom checks
//! turnstile's own protocols against it, and papaya's documented guarantees cover the
//! map itself (the word store: a restatement of its growth, its tests and miri).
//! `shuttle-tests/` then runs the whole limiter under `--cfg turnstile_shuttle`:
//! the real stores (papaya and the word store, whose locks and words are shuttle's
//! there) and the real sweeper thread, under randomized schedules, with admission
//! counts checked exactly and mutants that the schedules must catch.

// No `unsafe` but in one module: the word store's write-once key cells and the table
// that reads them (`store/words/`), where safe Rust's cells cost 8 bytes per key. miri
// runs that module's tests in CI (.ci/test).
#![deny(unsafe_code)]
#![deny(missing_docs)]
// docs.rs builds with `--cfg docsrs` on nightly: the feature labels on the optional
// modules (`doc(cfg(...))`) need the `doc_cfg` gate there. CI builds the docs the
// same way (.ci/run).
#![cfg_attr(docsrs, feature(doc_cfg))]

mod algorithm;
pub mod baseline;
mod builder;
mod clock;
mod decision;
mod direct;
pub mod evict;
mod fixed_window;
mod gcra;
#[cfg(all(feature = "tower", not(turnstile_loom)))]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub mod http;
mod keyed;
#[cfg(any(feature = "redis", turnstile_loom))]
mod lease_word;
mod limiter;
#[cfg(turnstile_loom)]
#[doc(hidden)]
pub mod loom_hooks;
#[cfg(any(feature = "metrics", feature = "tracing"))]
#[cfg_attr(docsrs, doc(cfg(any(feature = "metrics", feature = "tracing"))))]
pub mod observe;
pub mod per_key;
pub mod policy;
mod quota;
#[cfg(all(feature = "redis", not(turnstile_loom)))]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub mod redis;
#[cfg(turnstile_shuttle)]
#[doc(hidden)]
pub mod shuttle_hooks;
mod sliding_log;
mod sliding_window;
mod store;
mod sync;
mod token_bucket;
#[cfg(all(feature = "wait", not(turnstile_loom)))]
#[cfg_attr(docsrs, doc(cfg(feature = "wait")))]
pub mod wait;
mod window;
mod word;

/// The README's code blocks, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

pub use builder::{Builder, DefaultHasher};
pub use clock::{Clock, ManualClock, QuantaClock, RecentClock, StdClock};
pub use decision::Decision;
pub use direct::{
    DirectFixedWindow, DirectGcra, DirectLimiter, DirectSlidingWindowCounter, DirectTokenBucket,
};
#[cfg(not(any(turnstile_loom, turnstile_shuttle)))]
pub use evict::BackgroundSweeper;
pub use evict::{KeyStats, Overflow};
pub use fixed_window::{FixedWindow, PerKeyFixedWindow};
pub use gcra::Gcra;
pub use keyed::KeyedLimiter;
pub use limiter::{KeyRef, RateLimiter};
pub use quota::{Quota, QuotaError};
pub use sliding_log::{PerKeySlidingLog, SlidingLog};
pub use sliding_window::SlidingWindowCounter;
pub use token_bucket::{PerKeyTokenBucket, TokenBucket};
