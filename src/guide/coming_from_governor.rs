//! Coming from governor: its API in turnstile's words, one example with governor's calls
//! in its comments, and what differs.
//!
//! # The API, side by side
//! | governor | turnstile |
//! |---|---|
//! | `Quota::with_period(p).allow_burst(b)` | `Quota::new(b, p)` (capacity `b`, one more every `p`) |
//! | `Quota::per_second(n)` (burst `n`) | `Quota::per_second(n)` (capacity `n`) |
//! | `RateLimiter::direct(quota)` | `DirectGcra::new(quota)?` (governor's algorithm), or `DirectTokenBucket::new(quota)?` |
//! | `RateLimiter::keyed(quota)` | `Gcra::<K>::new(quota)?`, or `TokenBucket::<K>::new(quota)?` |
//! | `check()` | `try_acquire()`, or `acquire(1)` for the whole `Decision` |
//! | `check_key(&key)` | `limiter.try_acquire(&key)` / `limiter.acquire(&key, 1)` |
//! | `check_n(n)`, `Err(InsufficientCapacity)` | `acquire(n)`, `Decision::ExceedsCapacity` |
//! | `Err(NotUntil)`, `.wait_time_from(now)` | `Decision::Denied { retry_after, .. }`: the same wait, already computed |
//! | `until_ready().await`, `until_n_ready(n)` | `wait::until_ready(&limiter, &key, n, &Wait::up_to(max)).await` (feature `wait`) |
//! | `StreamRateLimitExt::ratelimit_stream(&limiter)` | `wait::throttle(stream, Arc::new(limiter), \|_\| ())` (feature `wait`); per-key: `\|item\| key_of(item)` |
//! | `Jitter::up_to(d)` | `Wait::up_to(max).jitter(d)` |
//! | `retain_recent()`, `shrink_to_fit()` | nothing to call: idle keys are forgotten by the limiter's own sweeper thread (`evict_idle()` on demand; `max_keys` for a hard cap) |
//! | `StateInformationMiddleware` | every `Decision` carries `remaining()` (and `retry_after()`); `peek(&key)` reads without taking |
//!
//! ```rust
//! use std::time::Duration;
//! use turnstile::{Decision, DirectGcra, Gcra, ManualClock, Quota};
//!
//! // governor: Quota::with_period(Duration::from_millis(100)).unwrap().allow_burst(3)
//! let quota = Quota::new(3, Duration::from_millis(100))?;
//! let clock = ManualClock::new(); // a service uses the default clock: DirectGcra::new(quota)
//!
//! // governor: RateLimiter::direct_with_clock(quota, clock); limiter.check()
//! let direct = DirectGcra::with_clock(quota, clock.clone())?;
//! assert!(direct.try_acquire());
//! // governor: limiter.check_n(nonzero!(2u32)) is Ok(Ok(..)); check_n(4) Err(InsufficientCapacity)
//! assert!(direct.acquire(2).is_allowed());
//! assert!(direct.acquire(4).exceeds_capacity());
//! // governor: Err(not_until), not_until.wait_time_from(clock.now()) == 100 ms
//! assert!(matches!(
//!     direct.acquire(1),
//!     Decision::Denied { retry_after, .. } if retry_after == Duration::from_millis(100)
//! ));
//!
//! // governor: RateLimiter::keyed(quota); limiter.check_key(&"alice")
//! let keyed = Gcra::<&str, _>::with_clock(quota, clock.clone())?;
//! assert_eq!(keyed.acquire(&"alice", 1), Decision::Allowed { remaining: 2 });
//! assert_eq!(keyed.peek(&"bob"), 3); // a StateInformationMiddleware-like look, taking nothing
//! # Ok::<(), turnstile::QuotaError>(())
//! ```
//!
//! ```rust,no_run
//! # #[cfg(feature = "wait")]
//! # mod example {
//! use std::time::Duration;
//! use turnstile::wait::{Wait, until_ready};
//! use turnstile::{DirectGcra, Quota};
//!
//! // governor: limiter.until_ready_with_jitter(Jitter::up_to(Duration::from_millis(10))).await
//! async fn call(limiter: &DirectGcra) -> bool {
//!     let wait = Wait::up_to(Duration::from_secs(5)).jitter(Duration::from_millis(10));
//!     // Unlike governor's, the wait has a maximum: a wait beyond it is refused at once.
//!     until_ready(limiter, &(), 1, &wait).await.is_ok()
//! }
//! # }
//! ```
//!
//! # What differs, plainly
//! - **`Gcra` decides exactly as governor's GCRA**: `tests/governor.rs` runs both crates on
//!   the same random schedules (quotas, clock moves, costs from 1 to one above the burst)
//!   and compares every decision and every wait (`retry_after` against
//!   `NotUntil::wait_time_from`): identical.
//! - **`TokenBucket` refills on a grid**: tokens arrive at multiples of the refill interval
//!   since the limiter's epoch, the same instants for every key, where governor's GCRA
//!   spaces each key's cells from its own history. A burst allowed by both can differ by
//!   up to one interval in when its next unit comes.
//! - **Waiting has a maximum**: governor's `until_ready` waits as long as it takes;
//!   turnstile's `until_ready` waits only within `Wait::up_to(max)` and refuses at once a
//!   wait beyond what is left of it. A cost above capacity is a `Decision`
//!   (`ExceedsCapacity`), not a separate error type.
//! - **Keys are forgotten by themselves**: no `retain_recent` to call; memory follows the
//!   active keys, exactly (forgetting never changes a decision). Keys must be `Clone`, as
//!   governor's are.
//! - **Direct limiters are about as fast** as governor's: on one thread both libraries'
//!   checks are mostly the clock reading (see
//!   [`algorithms`](super::algorithms#direct-limiters)). Every figure, keyed and
//!   direct, is in `results/README.md`, explained in `results/ANALYSIS.md`.
