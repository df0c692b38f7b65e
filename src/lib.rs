//! Rate limiting for latency-sensitive hot paths: lock-free and allocation-free per
//! check, exact in its semantics, model-checked with loom.
//!
//! ```
//! use turnstile::{Quota, RateLimiter, TokenBucket};
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
//! # What it guarantees
//! - **Exact integer semantics**, the same in every implementation: see
//!   [`TokenBucket`]. Decisions never depend on thread timing beyond the order in
//!   which requests take effect on a key.
//! - **Lock-free, allocation-free** once a key exists: one clock reading, one lookup
//!   in a lock-free map, one compare-and-set on the key's `AtomicU64`. A key's first
//!   request allocates its entry.
//! - **Consistency**: each key's state changes only by atomic read-modify-write, so
//!   the decisions on one key are those of some sequential order of its requests
//!   (linearizable per key). Keys are independent; there is no cross-key ordering.
//! - **Bad input fails at construction**: every [`Quota`] accepted is one the state
//!   word holds exactly; nothing panics or truncates later.
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
//! Every atomic protocol is model-checked with loom in `loom-tests/`, each model with
//! a deliberately broken variant that the checker must reject. Keys live in a
//! `papaya::HashMap`, which is not loom-aware; the limiters use it only through a
//! small internal store contract (get; get-or-insert, exactly once; values stable
//! while in use). Under `--cfg turnstile_loom` a loom-aware store implements that
//! contract, so loom checks turnstile's own protocols against the contract, and
//! papaya's guarantees cover the map itself.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod baseline;
mod builder;
mod clock;
mod decision;
pub mod evict;
#[cfg(all(feature = "tower", not(turnstile_loom)))]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub mod http;
mod keyed;
mod limiter;
#[cfg(turnstile_loom)]
#[doc(hidden)]
pub mod loom_hooks;
pub mod policy;
mod quota;
#[cfg(all(feature = "redis", not(turnstile_loom)))]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub mod redis;
mod store;
mod sync;
mod token_bucket;
#[cfg(all(feature = "wait", not(turnstile_loom)))]
#[cfg_attr(docsrs, doc(cfg(feature = "wait")))]
pub mod wait;

/// The README's code blocks, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

pub use builder::{Builder, DefaultHasher};
pub use clock::{Clock, ManualClock, QuantaClock, RecentClock, StdClock};
pub use decision::Decision;
pub use evict::{KeyStats, Overflow};
pub use limiter::{KeyRef, RateLimiter};
pub use quota::{Quota, QuotaError};
pub use token_bucket::TokenBucket;
