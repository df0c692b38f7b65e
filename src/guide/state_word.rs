//! The token bucket's semantics, its one-word state, and what each algorithm's
//! representation can hold.
//!
//! # The token bucket, exactly
//! A token bucket with capacity C and one token per interval I ([`TokenBucket`]):
//!
//! - Tokens arrive on a **grid shared by all keys**: the limiter's epoch (its
//!   creation) plus whole multiples of I. A key's bucket is created **full** on its
//!   first request.
//! - Refill is lazy: a key gains one token per grid point passed, capped at C. The
//!   unfinished part of an interval is kept: with C = 1 and I = 1 s, requests at 0,
//!   1500 and 2000 ms are all allowed, 2999 ms is denied, 3000 ms is allowed.
//! - `acquire(cost)` is allowed iff the key has at least `cost` tokens; then it takes
//!   them. A denied request changes nothing and is not counted, so a client that
//!   keeps retrying while denied is not locked out.
//! - `retry_after` of a denied request is the exact wait until enough tokens exist:
//!   the same request sent that much later succeeds (if nothing else took from the
//!   key), 1 ns earlier it does not. A cost above C is reported as never satisfiable
//!   ([`Decision::ExceedsCapacity`]).
//! - A clock reading older than the key's latest request (TSC readings differ across
//!   cores) sees the tokens that arrive between the two as missing: it admits less
//!   than the later reading would, never more, and what it takes comes after the
//!   tokens already spoken for. No underflow, no panic. A key idle for any span is
//!   simply full.
//!
//! ```
//! use std::time::Duration;
//! use turnstile::{ManualClock, Quota, TokenBucket};
//!
//! let clock = ManualClock::new();
//! let limiter = TokenBucket::<u64, _>::with_clock(Quota::new(1, Duration::from_secs(1))?, clock.clone())?;
//! for (ms, allowed) in [(0, true), (1500, true), (2000, true), (2999, false), (3000, true)] {
//!     clock.set(Duration::from_millis(ms));
//!     assert_eq!(limiter.try_acquire(&1), allowed, "at {ms} ms");
//! }
//! # Ok::<(), turnstile::QuotaError>(())
//! ```
//!
//! **Why a shared grid** rather than a per-key refill clock: a full bucket then
//! carries no information at all, so forgetting it ([`bounded_memory`](super::bounded_memory))
//! cannot change any later decision, and the state word stores a grid index rather
//! than a per-key origin. Its one visible effect: a new key's first refill comes at
//! the next grid point, within one interval, rather than a whole interval after its
//! first request.
//!
//! # The state word
//! Each key's token bucket is one 64-bit word holding one number: **the refill grid
//! index at which the bucket is full again** (`full_at`), counting each missing token
//! as one grid point still to come. At a reading on grid index `g` (whole intervals
//! since the epoch) the bucket holds `C − (full_at − g)` tokens, never fewer than
//! none, and `C` once `full_at ≤ g`; a request for `k ≤ C` is allowed iff that is at
//! least `k`, and stores `max(full_at, g) + k`. A new key is the word 0, full at every
//! reading.
//!
//! There is no token field, so **every quota fits**: every capacity from 1 to
//! `u32::MAX` beside every interval from 1 ns to 584 years — `Quota::per_second(1_000_000)`,
//! or `Quota::new(u32::MAX, Duration::from_nanos(1))` for a bandwidth limit of 4 GiB
//! at once refilled a byte per nanosecond. The word never exceeds `g + 2C` (a
//! settle's debt, at most one capacity, lies past the empty bucket), so nothing
//! wraps: **the limiter is exact for 584 years after its creation** (for a 1 ns
//! interval, 292 years less `2C` nanoseconds, after which its grid stops). The `per_*`
//! constructors of [`Quota`] round the interval *up* to the nanosecond when the period
//! does not divide evenly, so the long-run rate never exceeds n per period (above a
//! billion a second, the interval is 1 ns).
//!
//! The other single-word algorithms' layouts are drawn in
//! [`algorithms`](super::algorithms#fixed-window).
//!
//! # Clock readings and range, per algorithm
//! A reading older than a key's state counts as no time elapsed for the window
//! algorithms (the key's window or newest timestamp). The token bucket and GCRA keep
//! no time of the last request, only when the key is full again, so such a reading
//! owes more — as if the refill ran backwards — and admits less, never more; its
//! `retry_after` is longer by exactly the skew.
//!
//! | algorithm | quotas it holds | exact for |
//! |---|---|---|
//! | [`TokenBucket`] | every `Quota` | the clock's whole range, 584 years; at a 1 ns interval 292 years less 2C ns, after which its grid stops |
//! | [`FixedWindow`] | every `Quota` (a window longer than the clock's range is one window forever) | 584 years; for intervals of a few nanoseconds, whose window index has fewer bits, at least 2⁶⁰ intervals (36 years at 1 ns; the count field holds up to twice the limit, for a debt), after which the last window never ends |
//! | [`SlidingLog`] | every `Quota`, but memory grows with the limit: 8 bytes per request in the window | 584 years |
//! | [`SlidingWindowCounter`] | index and two counts must fit one word below its top bit: `2 × bits(C) + max(1, bits(u64::MAX / W)) ≤ 63`, about C ≤ √(W in ns / 2): `per_second(n)` up to 16,383, `per_minute` up to 131,071, `per_hour` up to 1,048,575 | 584 years |
//! | [`Gcra`] | `C × I ≤ 2^62` ns (a full refill within 146 years) | 292 years less one full refill and the debt cap's refill (`2^63 − 3 − (C + D) × I` ns, the debt cap `D = min(C, (2^62 − C × I) / I)`): later readings count as that instant |
//!
//! Every state word keeps its top bit clear: that bit marks a key frozen where it is
//! while a copy of it takes its place (a relocation, [`crate::evict`]), and it is why
//! the 1 ns token bucket and the GCRA stop at 292 years rather than the clock's 584.
//!
//! `SlidingWindowCounter` and `Gcra` check their bound at construction, refusing with
//! [`QuotaError::Unsupported`]; every limiter's constructors (`new`, `with_clock`,
//! `Builder::build`) return `Result<_, QuotaError>` alike, so that code reads the same
//! whichever algorithm it builds, and the three that hold every quota never refuse. The counter's bound is what one word holds: two exact
//! counts of up to C each, beside a window index that reaches every window of the
//! clock's range. The Redis limiters count in microseconds and hold fewer quotas:
//! see [`crate::redis`]'s units and limits.
//!
//! [`TokenBucket`]: crate::TokenBucket
//! [`FixedWindow`]: crate::FixedWindow
//! [`SlidingLog`]: crate::SlidingLog
//! [`SlidingWindowCounter`]: crate::SlidingWindowCounter
//! [`Gcra`]: crate::Gcra
//! [`Quota`]: crate::Quota
//! [`QuotaError::Unsupported`]: crate::QuotaError::Unsupported
//! [`Decision::ExceedsCapacity`]: crate::Decision::ExceedsCapacity
