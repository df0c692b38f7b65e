//! Bounded memory: idle keys are forgotten by the limiter itself, exactly; which
//! store to keep keys in; and the hard cap for hostile churn.
//!
//! The protocol that makes forgetting exact, and when the ring's cycle and the word
//! store's sweeps run, are on [`crate::evict`]; this page is the user's side.
//!
//! # What is forgotten, and why it is safe
//! A keyed limiter keeps state for every client that calls. turnstile forgets a key —
//! on its own, with no call you must remember, at the next drain of its store once it
//! holds [`MIN_SWEEP_KEYS`](crate::evict::MIN_SWEEP_KEYS) keys — once its state has
//! carried no information for a margin (default 1 s): a token bucket full again, a GCRA arrival
//! time in the past, nothing counted in the current or previous window, a log whose
//! timestamps have all left. On the shared refill grid such a state answers every
//! later request exactly as a brand-new key does (see
//! [`state_word`](super::state_word)), so forgetting never changes a decision and never
//! hands a throttled client a fresh allowance. Property tests sweep after every
//! request and compare with a model that never forgets, for every algorithm.
//!
//! ```
//! use std::time::Duration;
//! use turnstile::{Overflow, Quota, TokenBucket};
//!
//! let limiter = TokenBucket::<String>::builder(Quota::per_second(10)?)
//!     .eviction_margin(Duration::from_secs(5)) // forget 5 s after a bucket is full again
//!     .max_keys(1_000_000, Overflow::Shared(Quota::per_second(100)?)) // hard cap
//!     .build()?;
//! assert!(limiter.try_acquire("client-1"));
//! assert_eq!(limiter.stats().keys, 1);
//! # Ok::<(), turnstile::QuotaError>(())
//! ```
//!
//! # The settings
//! | builder call | what it does |
//! |---|---|
//! | [`eviction_margin(d)`](crate::Builder::eviction_margin) | how long a state must have carried no information before it is forgotten (default 1 s) |
//! | [`expected_keys(n)`](crate::Builder::expected_keys) | presizes the store's first map: no growth below `n` keys until the first rotation |
//! | [`word_store()`](crate::Builder::word_store) | the word store instead of the ring of papaya maps (below) |
//! | [`max_keys(n, overflow)`](crate::Builder::max_keys) | the hard cap (below) |
//! | [`manual_eviction()`](crate::Builder::manual_eviction) | no sweeper thread: only [`evict_idle()`](crate::KeyedLimiter::evict_idle), on your thread or a [`BackgroundSweeper`](crate::BackgroundSweeper), forgets keys |
//!
//! [`stats()`](crate::KeyedLimiter::stats) counts keys, forgotten keys and overflowed
//! requests.
//!
//! # How keys are forgotten
//! The default store is a ring of three papaya maps: new keys go into the young one;
//! when it has grown, it becomes the old one, and the old one is drained — each state
//! that carries no information is forgotten, every other one is moved into the young
//! map (a key a request meets in the old map is moved by that request) — and then
//! reused. Each limiter has a thread of its own for the drain, `turnstile-sweeper`,
//! and every new key's insertion takes a small share of a drain under way (a few
//! entries, never waiting: if another thread holds every part of the drain it tries,
//! it skips its share), so the old map empties as fast as the young one fills,
//! whatever CPU the thread gets. [`crate::evict`] says when and how, step by step. The
//! thread shares the maps, so a limiter's keys, hasher and clock must be
//! `Send + Sync + 'static` (std's key types and the usual hashers are); keys are also
//! `Clone`, as governor's are (a new key's entry owns a copy). `max_keys` is the
//! bound that holds whatever happens. Measured memory on a stream of 10M distinct
//! keys, against governor, is in `results/memory-stream.md`.
//!
//! # The ring or the word store
//! **The ring** (the default) keeps requests from waiting on each other: a lookup and a
//! new key's insertion take no lock, and a share of the drain only *tries* the locks of
//! the drain's regions, skipping its share when all are held (`tests/stall.rs` stalls a
//! request inside the key's `Hash`, `Eq` and `Clone`, also while the map grows, and
//! shows that no other request's check, peek, refund or new key waits; it runs no
//! drain).
//! The exceptions: the sliding log's per-key lock; a key being moved to a new quota
//! (per-key limiters), which its next request waits out; inside papaya, a write to an
//! entry that a resize is copying; and the one request that opens a drain the thread
//! left overdue (or that has no thread), which may wait inside papaya for the old map's
//! resize to finish. papaya allocates an entry per key and frees forgotten ones through
//! its epoch-based reclamation. It holds every algorithm's state, per-key quotas'
//! included.
//!
//! **The word store** ([`Builder::word_store`](crate::Builder::word_store), for the
//! four single-word algorithms) is the opt-in for memory-bound services: keys and
//! words side by side in 1,024 segments, each a table of its own, no allocation per
//! key — fewer heap bytes per key than papaya's entries, faster insertion (a new key
//! in fewer instructions) and cheaper forgetting per key (`results/ANALYSIS.md`,
//! "Memory" and "The stores", which say which store each figure was measured on). Its
//! price: an insertion, a removal, a step of a growth or a share of a sweep takes its
//! segment's lock, so a thread stalled while it holds one keeps that segment's
//! insertions waiting (`tests/stall.rs` shows it). Its forgetting is shared as the
//! ring's is: while a sweep is under way, each new key's insertion sweeps a few groups
//! of a segment no other thread holds (it only tries the lock, so a share never
//! waits), and the sweeper thread the rest, so a fast stream of new keys pays for its
//! own forgetting however little of the CPU the thread gets (two request threads on
//! two cores: `results/memory-stream.md`).
//!
//! # The hard cap
//! For hostile churn (ids rotating faster than buckets refill):
//! `max_keys(n, overflow)`. At the cap a new key asks the sweeper thread for room (at
//! most once per margin; with no thread, because its start failed or a drain panicked,
//! that request makes the room itself) and is answered at once: [`Overflow::Deny`]
//! answers [`Decision::Overflow`] with a `retry_hint`, and [`Overflow::Shared`]
//! sends every such key to one shared allowance; once the next cycle (or, on the word
//! store, sweep) has made room, new keys are stored again. With `manual_eviction()`
//! only `evict_idle()` makes room. The ring holds the keys of at least about three
//! margins in normal operation, so a cap below that is reached without an attack
//! (`results/memory-stream.md`). The cap is approximate: threads inserting at the same
//! moment may each pass the check, so it can be exceeded by at most the number of
//! threads inserting concurrently. Behind the HTTP layer an overflow is a 503
//! ([`crate::http`]).
//!
//! [`Overflow::Deny`]: crate::Overflow::Deny
//! [`Overflow::Shared`]: crate::Overflow::Shared
//! [`Decision::Overflow`]: crate::Decision::Overflow
