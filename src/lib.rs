//! Rate limiting for latency-sensitive hot paths: lock-free and allocation-free per
//! check, exact in its semantics, model-checked with loom.
//!
//! ```
//! use turnstile::{Quota, TokenBucket};
//!
//! // At most 100 requests per minute per user, in bursts of up to 100.
//! let limiter = TokenBucket::<String>::new(Quota::per_minute(100)?)?;
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
//! Keys are created on their first request and forgotten once their state carries no
//! information; the long forms are in the [`guide`]:
//!
//! | to read about | go to |
//! |---|---|
//! | which algorithm: what each limit means, its edges, its memory | [`guide::algorithms`] |
//! | the token bucket's exact semantics and its one-word state | [`guide::state_word`] |
//! | bounded memory: forgetting idle keys, the stores, the key cap | [`guide::bounded_memory`], [`evict`] |
//! | a quota per key, quotas changed while running | [`guide::per_key_quotas`], [`per_key`] |
//! | several limits on one request, dry run, waiting | [`guide::policies`], [`policy`] |
//! | HTTP: 429, `Retry-After`, the RateLimit fields (feature `tower`) | [`guide::http`], `turnstile::http` |
//! | HTTP behind load balancers: the client's address from trusted proxies (feature `tower`) | [`guide::behind_a_proxy`], `turnstile::http::RealIp` |
//! | costs known only after the response: reserve, then settle | [`guide::llm_token_budgets`], [`Settlement`] |
//! | limits from a file, reloaded while running (feature `config`) | [`guide::limits_from_a_file`], `turnstile::config` |
//! | limits shared by many servers (feature `redis`) | [`guide::redis`], `turnstile::redis` |
//! | metrics and logs (features `metrics`, `tracing`) | `turnstile::observe` |
//! | moving from governor | [`guide::coming_from_governor`] |
//!
//! # What it guarantees
//! - **Exact integer semantics**, the same in every implementation of an algorithm:
//!   see each type. Decisions never depend on thread timing beyond the order in
//!   which requests take effect on a key.
//! - **Lock-free, allocation-free** once a key exists, for every algorithm but
//!   [`SlidingLog`]: one clock reading, one lookup in a lock-free map, one
//!   compare-and-set on the key's `AtomicU64`. A key's first request allocates its
//!   entry (on the default store, a ring of papaya maps), and so does its first
//!   request after each rotation of the ring, which moves it into the young map.
//! - **Consistency**: a stored key's state changes only by atomic read-modify-write
//!   (for [`SlidingLog`], under the key's own lock); a new key's first request is
//!   applied to its state just before the state is stored, so it is never seen half
//!   made. So the decisions on one key are those of some sequential order of its
//!   requests (linearizable per key). Keys are independent; there is no cross-key
//!   ordering.
//! - **Bad input fails at construction**: every [`Quota`] accepted is one the token
//!   bucket, fixed window and sliding log hold exactly; [`SlidingWindowCounter`] and
//!   [`Gcra`] refuse at construction the few they cannot. So every limiter's
//!   constructors (`new`, `with_clock`, [`Builder`]'s `build`), for every algorithm,
//!   keyed and direct, return `Result<_, QuotaError>`. Nothing panics or truncates
//!   later.
//! - **Verified**: turnstile's atomic protocols are model-checked with loom on the
//!   real limiter code, against a store exactly as weak as the internal store
//!   contract the limiters use, each model with a mutant the checker must reject; the
//!   whole limiter runs under shuttle's random schedules. What is checked, and how, is
//!   in `CONTRIBUTING.md` at the repository's root.

// No `unsafe` but in two modules: the word store's write-once key cells and the table
// that reads them (`store/words/`), where safe Rust's cells cost 8 bytes per key; and
// the papaya pass (`store/papaya/pass.rs`), which holds an epoch guard and an iterator
// borrowing it between the steps of a drain that any thread may take (papaya's
// iterator borrows its guard; no owned form exists). miri runs both modules' tests in
// CI (.ci/test).
#![deny(unsafe_code)]
#![deny(missing_docs)]
// Every public type prints (tests/send_sync.rs checks the limiters show their
// configuration).
#![deny(missing_debug_implementations)]
// docs.rs builds with `--cfg docsrs` on nightly: the feature labels on the optional
// modules (`doc(cfg(...))`) need the `doc_cfg` gate there. CI builds the docs the
// same way (.ci/run).
#![cfg_attr(docsrs, feature(doc_cfg))]

mod algorithm;
#[cfg(feature = "baselines")]
#[cfg_attr(docsrs, doc(cfg(feature = "baselines")))]
pub mod baseline;
mod builder;
mod clock;
#[cfg(all(feature = "config", not(turnstile_loom)))]
#[cfg_attr(docsrs, doc(cfg(feature = "config")))]
pub mod config;
mod decision;
mod direct;
pub mod evict;
mod fixed_window;
mod gcra;
pub mod guide;
#[cfg(all(feature = "tower", not(turnstile_loom)))]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub mod http;
mod keyed;
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
mod settle;
/// Under loom, only the leased key's hold, whose protocol loom-tests/ model-checks
/// without Redis: the same file, at the same path, as in the `redis` feature.
#[cfg(turnstile_loom)]
mod redis {
    pub(crate) mod lease {
        pub(crate) mod hold;
    }
}
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

pub use algorithm::{Algorithm, FromQuota, Reconfigurable};
pub use builder::{Builder, DefaultHasher};
pub use clock::{Clock, ManualClock, QuantaClock, RecentClock, StdClock};
pub use decision::{Decision, SharedDecision, SharedError};
pub use direct::{
    DirectFixedWindow, DirectGcra, DirectLimiter, DirectSlidingWindowCounter, DirectTokenBucket,
};
#[cfg(not(any(turnstile_loom, turnstile_shuttle)))]
pub use evict::sweeper::BackgroundSweeper;
pub use evict::{cap::Overflow, stats::KeyStats};
pub use keyed::{
    FixedWindow, Gcra, KeyedLimiter, PerKeyFixedWindow, PerKeySlidingLog, PerKeyTokenBucket,
    SlidingLog, SlidingWindowCounter, TokenBucket,
};
pub use limiter::{DynRateLimiter, KeyRef, RateLimiter};
pub use quota::{Quota, QuotaError};
pub use settle::Settlement;
