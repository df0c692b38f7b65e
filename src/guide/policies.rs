//! Several limits on one request, taken all or nothing; trying a limit in dry run
//! before enforcing it; waiting instead of refusing.
//!
//! The rules — all or nothing, every check asked even after a denial, precedence,
//! which check an answer names, missing keys, concurrency, Redis checks beside
//! in-process ones, dry run — are stated once, on [`crate::policy`], with a first
//! example. Waiting is [`crate::wait`] (feature `wait`). This page is a tour.
//!
//! # Why a policy
//! A request is often limited along several dimensions at once: its endpoint's limit
//! for its user, and a limit for its IP address. Asking two limiters one after the
//! other gets the refusal right but not the bookkeeping: a request the second refuses
//! has already spent a token at the first, and a client that is refused keeps draining
//! its other limits. A [`Policy`] lists the checks — each a limiter, where to find its
//! key in the request, and a cost — asks them all, and gives back what a refused
//! request took. Its answer, a [`Verdict`], names the most restrictive check, which is
//! what the HTTP layer's `RateLimit` field reports ([`http`](super::http)).
//!
//! # Trying a limit first: dry run
//! Shadow mode, like nginx's `limit_req_dry_run`: put the new check in dry run and
//! watch what it would refuse, while the request goes ahead by the enforced checks
//! alone.
//!
//! ```
//! use std::sync::Arc;
//! use turnstile::policy::{Check, Policy};
//! use turnstile::{ManualClock, Quota, TokenBucket};
//!
//! struct Request { user: String, ip: u32 }
//!
//! let clock = ManualClock::new();
//! let (per_user, per_ip) = (Quota::per_minute(10)?, Quota::per_minute(3)?);
//! let users = Arc::new(TokenBucket::<String, _>::with_clock(per_user, clock.clone())?);
//! let ips = Arc::new(TokenBucket::<u32, _>::with_clock(per_ip, clock.clone())?);
//! let policy: Policy<Request> = Policy::builder()
//!     .check(Check::from_limiter("per-user", users, |r: &Request| Some(r.user.clone())))
//!     // On trial: asked, counted and logged, never refusing.
//!     .check(Check::from_limiter("per-ip", ips, |r: &Request| Some(r.ip)).dry_run())
//!     .build()?;
//!
//! let request = Request { user: "alice".into(), ip: 7 };
//! for _ in 0..3 {
//!     assert!(policy.acquire(&request).is_allowed());
//! }
//! let verdict = policy.acquire(&request); // the 4th from this IP this minute
//! assert!(verdict.is_allowed()); // served: the per-IP limit is not enforced yet
//! assert!(!verdict.if_enforced().is_allowed()); // but it would have been refused
//! assert_eq!(verdict.refused_in_dry_run().collect::<Vec<_>>(), vec![1]); // by check 1
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! What a dry-run check takes and gives back, why it never spends allowance an
//! enforced check needs, and what clients see of it are on [`crate::policy`] (dry
//! run). A whole policy goes into dry run with [`PolicyBuilder::dry_run`], and every
//! route of the HTTP layer with its builder's `dry_run`. Property-tested against a
//! reference model with random mixes of enforced and dry-run checks
//! (`tests/dry_run.rs`).
//!
//! # Waiting instead of refusing
//! With the feature `wait`, [`until_ready`](crate::wait::until_ready) (one limiter)
//! and `Policy::until_ready` (a policy) sleep for the exact `retry_after` and ask
//! again, within a maximum: a wait beyond it is refused at once, without sleeping
//! first. [`throttle`](crate::wait::throttle) holds a stream to a limiter's pace,
//! governor's `ratelimit_stream` for keyed limiters too. Tested in tokio's paused time
//! with a [`ManualClock`](crate::ManualClock) moved in step (`tests/wait.rs`,
//! `tests/stream.rs`).
//!
//! ```no_run
//! # #[cfg(feature = "wait")]
//! # mod example {
//! use std::time::Duration;
//! use turnstile::policy::Policy;
//! use turnstile::wait::Wait;
//!
//! struct Request { user: String }
//!
//! // Inside a tokio runtime: a batch job that should slow down rather than fail.
//! async fn send(policy: &Policy<Request>, request: &Request) -> bool {
//!     let wait = Wait::up_to(Duration::from_secs(30)).jitter(Duration::from_millis(50));
//!     policy.until_ready(request, &wait).await.is_ok()
//! }
//! # }
//! ```
//!
//! [`Policy`]: crate::policy::Policy
//! [`Verdict`]: crate::policy::Verdict
//! [`PolicyBuilder::dry_run`]: crate::policy::PolicyBuilder::dry_run
