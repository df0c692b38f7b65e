//! The five algorithms side by side: what a limit means, their edges, their memory,
//! and when to pick which; then direct limiters, the baselines and the clocks.
//!
//! Each type's own documentation holds its exact semantics; this page compares them.
//!
//! # One trait, one quota
//! Every limiter implements [`RateLimiter`] (and has the same methods of its own, so
//! using a limiter needs no trait import): the same keys, map and injected clocks,
//! `acquire(key, cost)` all or nothing, `peek`, `refund`, and a [`Decision`] whose
//! `retry_after` is the exact wait and which reports a cost above the limit as never
//! satisfiable. A denial changes nothing, so a client retrying while denied is never
//! locked out.
//!
//! **One quota, read per algorithm.** The window algorithms take `limit = capacity`
//! per `window = capacity × refill_every`, so `Quota::per_minute(100)` is 100 per
//! minute for every one of them. GCRA takes burst `capacity`, one token per
//! `refill_every`, as the token bucket does.
//!
//! | type | the limit means | at the edges | state per key | a check |
//! |---|---|---|---|---|
//! | [`TokenBucket`] | bursts of C, one token more every I, on a grid shared by all keys | in any span, at most C + the grid points in it: C + 1 at two readings 1 ns apart across a grid point | one `AtomicU64` | lock-free, no allocation |
//! | [`Gcra`] | the same with **continuous** refill: tokens spaced exactly I apart | in any span [a, b], at most C + ⌊(b − a) / I⌋ | one `AtomicU64` | lock-free, no allocation |
//! | [`FixedWindow`] | at most C per calendar window, aligned to the limiter's epoch | **2C at two readings 1 ns apart** across a boundary (100 in the last second of a minute, 100 in the first of the next) | one `AtomicU64` | lock-free, no allocation |
//! | [`SlidingWindowCounter`] | about C in any window: the previous window's count weighted by its overlap | in any span d ≤ W, at most C + ⌊(d − 1) / I⌋ (up to 2C − 1 over a whole window); may also deny what the exact log admits | one `AtomicU64` | lock-free, no allocation |
//! | [`SlidingLog`] | at most C in **any** window, exactly | none | a `Mutex`, and up to C timestamps (2C while it owes: see *Reserve, then settle*) | the key's own lock; allocates while the key's ring grows |
//!
//! **When to pick which.** "Burst plus rate": `TokenBucket` (fastest, exact,
//! forgettable when full), or `Gcra` for tokens spaced exactly one interval after the
//! last admission rather than on a shared grid (what nginx's `limit_req`, governor and
//! redis-cell do). "At most N in any window, exactly": `SlidingLog`, when N is small
//! enough to keep N timestamps per key. "About N in any window", cheaply:
//! `SlidingWindowCounter`. `FixedWindow` only where a burst of 2N across a boundary
//! does not matter.
//!
//! **Memory per key**: a single-word algorithm's state is its 8-byte word, held with
//! the key in a papaya entry (or, with the word store, beside the key in its table); a
//! sliding-log key holds a `Mutex` and a ring of timestamps, and adds 8 bytes per
//! timestamp slot as its ring grows (4 slots first, doubling, never beyond C; 2C for
//! a key a settle charged into debt). The measured bytes per key of each store,
//! against governor's, and what the ring's three maps hold: `results/ANALYSIS.md`,
//! "Memory". The word store, and presizing papaya with `expected_keys`, are in
//! [`bounded_memory`](super::bounded_memory).
//!
//! # Fixed window
//! ```text
//!  63                          c   c-1                   0
//! +-----------------------------+-----------------------+
//! | window index                | count (c = bits(2C+2))|
//! +-----------------------------+-----------------------+
//! ```
//!
//! The window of the key's last admitted request and what it admitted there (every
//! `Quota` fits: the index needs no more bits than the token bucket's refill index,
//! the count no more than its tokens). A request in the next window starts from
//! what a settle charged past the limit (the debt carried one window), one in any
//! later window from zero.
//! The flaw is the reset itself: nothing remembers how late in its window the last
//! window's requests came, so C at the end of one window and C at the start of the
//! next all pass — tested by name (`tests/fixed_window.rs`).
//!
//! # Sliding window counter
//! ```text
//!  63                   2c  2c-1             c  c-1              0
//! +-----------------------+------------------+------------------+
//! | window index          | previous count p | current count n  |   c = bits(2C) or bits(C)
//! +-----------------------+------------------+------------------+
//! ```
//!
//! The previous window's count weighs by the share of it the sliding window still
//! overlaps, in whole intervals, compared exactly in integers; its over- and
//! under-admission against the exact log are stated on [`SlidingWindowCounter`] and
//! tested over random schedules (`tests/sliding_window.rs`).
//!
//! # Sliding log
//! Each key keeps the times of its admitted requests in a ring buffer under its own
//! lock (one `Mutex` per key in the same map; never a global lock). Tested: no window
//! of length W ever holds more than C admitted requests, over random schedules
//! (`tests/sliding_log.rs`).
//!
//! # GCRA
//! The word is one instant, the key's theoretical arrival time in nanoseconds since
//! the epoch. It decides as a token bucket refilled continuously — checked decision by
//! decision against one written that way (`tests/gcra.rs`) — and exactly as
//! governor's GCRA (`tests/governor.rs`). How it differs from the grid `TokenBucket`
//! is on [`Gcra`].
//!
//! # Reserve, then settle: what debt means
//! A request whose cost is known only afterwards (the tokens a model call used, the
//! bytes a response sent) takes an estimate with `acquire(key, estimate)` and later
//! calls `settle(key, estimate, actual)`: the difference is charged when it cost
//! more — even beyond what the key has left — and given back when it cost less, on
//! the token bucket and GCRA (never beyond what the key holds). The key then
//! **owes**: a request is allowed iff what the key has covers its cost, and a key in
//! debt has less than nothing, so `peek` says 0, every request is denied — **a cost
//! of zero too** — and the denial's `retry_after` is the exact wait until refill has
//! repaid the debt and brought the cost (for a cost of zero, until the debt is
//! repaid). A key owes at most one capacity (the **debt cap**,
//! which keeps every state word in its range); what a charge would add past it is
//! reported in [`Settlement::forgiven`], never dropped silently. One compare-and-set,
//! as a request; no allocation. A key in debt carries information, so forgetting
//! never drops it; a move to a new quota carries the debt in units into the new quota
//! ([`per_key`](crate::per_key)). What a debt is in each algorithm:
//!
//! - **Token bucket**: `full_at` lies more than C grid points past the reading; each
//!   grid point repays one token, then the bucket refills as usual.
//! - **GCRA**: the arrival time lies more than C × I past the reading; repaid
//!   continuously, one token per I.
//! - **Fixed window**: the window's count passes C (up to 2C). The part past C is
//!   carried into the next window as its starting count — the limit refills once a
//!   window — so a debt charged late in a window is not wiped out by the boundary.
//! - **Sliding window counter**: the current count passes C; as the window slides it
//!   weighs in as the previous window's count, less and less, repaid within two
//!   windows. Its word holds counts up to 2C only where it has two spare bits; for
//!   quotas near the largest it accepts, the debt cap is what its count field holds
//!   past C (possibly nothing), and a settle says what that cap forgave.
//! - **Sliding log**: the charge is recorded as that many timestamps at the settle's
//!   reading, counting for one window from then, exactly as admissions there would;
//!   a key in debt holds up to 2C timestamps.
//!
//! **Only the token bucket and GCRA give back on settle.** A settle below the
//! estimate on the fixed window, the sliding window counter or the sliding log
//! refunds nothing (`refunded: 0`): their state cannot tell which window (which log
//! entries) counted the estimate, and giving it to a later window admits more than
//! the limit there. With C = 10 a 1 s window, an estimate of 10 taken at 0.999 s and
//! ten requests admitted in the next window, a refund of the estimate would let ten
//! more into that window; on the log it would drop a later request's timestamps once
//! the estimate's have left the window. The bucket's and GCRA's tokens are fungible
//! (a token given back is one the key would have had, capped at the capacity), so
//! for refunds on settle, use the token bucket or GCRA. (A policy's plain `refund`,
//! right after the take, still gives back on every algorithm.)
//!
//! ```
//! use std::time::Duration;
//! use turnstile::{ManualClock, Quota, Settlement, TokenBucket};
//!
//! let clock = ManualClock::new();
//! // 100 tokens a minute per user, in bursts of up to 100.
//! let limiter = TokenBucket::<String, _>::with_clock(Quota::per_minute(100)?, clock)?;
//! assert!(limiter.acquire("alice", 20).is_allowed()); // the estimate
//! // The call used 130: 80 were left, so 30 are owed.
//! let settled = limiter.settle("alice", 20, 130);
//! assert_eq!(settled, Settlement { refunded: 0, charged: 110, forgiven: 0 });
//! assert_eq!(limiter.peek("alice"), 0);
//! // The next token comes once the 30 owed are repaid: 31 tokens at 0.6 s each.
//! let wait = limiter.acquire("alice", 1).retry_after();
//! assert_eq!(wait, Some(Duration::from_millis(31 * 600)));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Direct limiters
//! One state for the whole process, without a map: [`DirectTokenBucket`],
//! [`DirectGcra`], [`DirectFixedWindow`], [`DirectSlidingWindowCounter`], each with
//! its keyed twin's semantics ([`DirectLimiter`] says how they are used). Tested
//! decision for decision against each algorithm's reference model, for exact
//! admission counts under four threads, for no allocation, and as a policy check; the
//! token bucket's loom models 1 and 2 run on them too.
//!
//! **About as fast as governor's direct limiter.** On one thread both spend most of
//! their check reading the clock (quanta's TSC), so neither can be much faster while
//! both read it per check; [`RecentClock`] is the cheaper clock, at the price of
//! readings up to its refresh interval old. With several threads the one word's cache
//! line decides, and which library leads there has moved with the machine's load from
//! run to run. `cargo run --release -p compare` measures 1–8 threads into
//! `results/README.md`, and `results/ANALYSIS.md` ("Direct limiters") explains the
//! figures.
//!
//! # Implementations and clocks
//! Every algorithm runs in one generic [`KeyedLimiter`]`<A, K, C, S>` (the map, the
//! clock, forgetting idle keys); `TokenBucket<K>` and the others are it with their
//! own `A`. The single-word algorithms share one compare-and-set loop around their
//! pure step functions; the sliding log takes its key's lock.
//!
//! | type | synchronisation | use |
//! |---|---|---|
//! | [`TokenBucket`] | one `AtomicU64` per key, CAS loop, papaya (`Builder::word_store` for the word store) | the product |
//! | [`Gcra`], [`FixedWindow`], [`SlidingWindowCounter`] | the same map and CAS loop, each around its own pure step | the other single-word algorithms |
//! | [`SlidingLog`] | the same map, a `Mutex` per key around its timestamps | the exact window |
//! | [`MutexPerKey`] | the same map, a `Mutex<u64>` per key | measured against |
//! | [`GlobalLock`] | one `Mutex<HashMap>` for all keys | measured against |
//!
//! The token bucket and its two baselines (feature `baselines`: they are for the
//! benchmarks, not for use) apply the same pure step function to the same word, so
//! they make the same decisions and pass the same semantic and concurrency tests.
//! Every algorithm's step is checked against a plain reference model of that
//! algorithm written in its test.
//!
//! Clocks are generic parameters, not trait objects: [`QuantaClock`] (default; one TSC
//! reading), [`RecentClock`] (one atomic load, lagging by at most its
//! refresh interval — so only ever stricter), [`StdClock`] (`Instant`, for machines
//! without a usable TSC), [`ManualClock`] (tests; clones share one time, and it can be
//! set backwards to model skew).
//!
//! [`RateLimiter`]: crate::RateLimiter
//! [`Settlement::forgiven`]: crate::Settlement::forgiven
//! [`Decision`]: crate::Decision
//! [`TokenBucket`]: crate::TokenBucket
//! [`Gcra`]: crate::Gcra
//! [`FixedWindow`]: crate::FixedWindow
//! [`SlidingWindowCounter`]: crate::SlidingWindowCounter
//! [`SlidingLog`]: crate::SlidingLog
//! [`DirectTokenBucket`]: crate::DirectTokenBucket
//! [`DirectGcra`]: crate::DirectGcra
//! [`DirectFixedWindow`]: crate::DirectFixedWindow
//! [`DirectSlidingWindowCounter`]: crate::DirectSlidingWindowCounter
//! [`DirectLimiter`]: crate::DirectLimiter
//! [`KeyedLimiter`]: crate::KeyedLimiter
//! [`MutexPerKey`]: crate::baseline::MutexPerKey
//! [`GlobalLock`]: crate::baseline::GlobalLock
//! [`QuantaClock`]: crate::QuantaClock
//! [`RecentClock`]: crate::RecentClock
//! [`StdClock`]: crate::StdClock
//! [`ManualClock`]: crate::ManualClock
