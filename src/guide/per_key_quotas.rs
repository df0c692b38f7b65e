//! A quota per key — premium users get more — and quotas changed while the limiter
//! runs.
//!
//! The rules for a key whose quota changes, and how a move stays exact under
//! concurrency, are on [`crate::per_key`]; this page shows how to build such a limiter
//! and what it costs.
//!
//! # Building one
//! [`build_per_key`](crate::Builder::build_per_key) takes a resolver, asked once per
//! key, when the key's state is created; the quota it returns is stored beside that
//! state, in the same map entry ([`crate::per_key`]).
//! [`build_reconfigurable`](crate::Builder::build_reconfigurable) gives every key the
//! builder's quota until [`set_quota`](crate::KeyedLimiter::set_quota) or
//! [`reconfigure`](crate::KeyedLimiter::reconfigure) changes it — while the limiter
//! runs, without a lock on the hot path.
//!
//! ```
//! use turnstile::{ManualClock, Quota, TokenBucket};
//!
//! // Quotas are validated once, up front; the resolver only picks one.
//! let (premium, standard) = (Quota::per_minute(1000)?, Quota::per_minute(100)?);
//! let clock = ManualClock::new();
//! let limiter = TokenBucket::<String>::builder(standard)
//!     .clock(clock.clone())
//!     .build_per_key(move |user: &String| {
//!         if user.starts_with("premium:") { premium } else { standard }
//!     });
//! assert_eq!(limiter.peek("premium:ann"), 1000);
//! assert_eq!(limiter.peek("bob"), 100);
//!
//! // Later, at run time: everyone gets 10 a minute from their next request on.
//! limiter.set_quota(Quota::per_minute(10)?);
//! assert_eq!(limiter.peek("premium:ann"), 10);
//! # Ok::<(), turnstile::QuotaError>(())
//! ```
//!
//! [`PerKeyTokenBucket`](crate::PerKeyTokenBucket),
//! [`PerKeyFixedWindow`](crate::PerKeyFixedWindow) and
//! [`PerKeySlidingLog`](crate::PerKeySlidingLog) name these limiters: the algorithms
//! that hold every quota. Their states are not single words, so they live in the ring
//! of papaya maps whichever store the builder names.
//!
//! # What changes for a key, in short
//! A key moves at its next request (acquire, peek or refund), straight to the quota
//! the resolver gives it then. The same quota changes nothing; a key with its whole
//! allowance starts afresh, as if forgotten; any other key keeps what it had left,
//! capped at the new quota — a shrinking quota cuts it at once, a growing one does not
//! hand out the difference. The exact rules, the one bounded corner (a lagging clock
//! during a move to a faster quota) and the loom models that check them are on
//! [`crate::per_key`].
//!
//! # What waits
//! Only a request for a key that is being moved, and only until the mover has swapped
//! it; your resolver runs before anything is frozen, so a slow or panicking resolver
//! holds up its own caller alone ([`crate::per_key`] says why).
