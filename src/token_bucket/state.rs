//! The token bucket's state word and its pure step functions.
//!
//! Everything here is a function of plain values: the lock-free limiter applies
//! [`acquire`] inside a compare-and-set loop, the baselines apply it under their locks,
//! and the property tests and loom models check it. One definition of the semantics.

use crate::Decision;
use crate::clock::nanos_to_duration;
use crate::quota::Quota;
use crate::word::{MovableWord, WordAlgorithm};
use std::time::Duration;

/// The layout of a token bucket's state word, fixed per quota.
///
/// ```text
///  63                          t   t-1                   0
/// +-----------------------------+-----------------------+
/// | last refill (grid index)    | tokens                |
/// +-----------------------------+-----------------------+
/// ```
///
/// - *tokens* (the low `t` bits, `t = bits(capacity + 2)`): the token count at the last
///   refill, `0..=capacity`. The field leaves its two highest values free: no state
///   has them, so the words [`RETIRED`](crate::word::RETIRED) (all ones) and
///   [`MOVED`](crate::word::MOVED) (all ones but the lowest bit) are never a state.
/// - *last refill* (the upper `64 - t` bits): the refill grid index of the last refill,
///   counted in whole intervals since the limiter's epoch. The field is wide enough for
///   `u64::MAX / interval`, so every instant a `u64` nanosecond clock can name (584
///   years) fits and nothing ever wraps. [`Quota`] refuses capacities that would not
///   leave it that many bits.
///
/// A full bucket needs no refill time: at any later instant it is still full, so
/// [`TokenBucketRules::full`] is one constant word for every key, with grid index 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokenBucketRules {
    capacity: u64,
    interval: u64,
    token_bits: u32,
}

/// Number of bits needed to write `x` in binary.
const fn bits(x: u64) -> u32 {
    u64::BITS - x.leading_zeros()
}

impl TokenBucketRules {
    /// The layout for `quota`, which guarantees that it fits.
    pub fn new(quota: &Quota) -> Self {
        let capacity = u64::from(quota.capacity());
        Self {
            capacity,
            interval: quota.interval_nanos(),
            token_bits: bits(capacity + 2),
        }
    }

    /// The word of a full bucket, which is also every new key's first state.
    #[inline]
    pub const fn full(&self) -> u64 {
        self.capacity
    }

    #[inline]
    const fn tokens(&self, word: u64) -> u64 {
        word & ((1 << self.token_bits) - 1)
    }

    #[inline]
    const fn last_refill(&self, word: u64) -> u64 {
        word >> self.token_bits
    }

    /// The word holding `tokens` and refill grid index `last_refill`.
    #[inline]
    pub const fn pack(&self, last_refill: u64, tokens: u64) -> u64 {
        (last_refill << self.token_bits) | tokens
    }

    /// The refill interval in nanoseconds, for models.
    #[cfg(turnstile_loom)]
    pub const fn interval(&self) -> u64 {
        self.interval
    }

    /// The word's fields as `(last refill grid index, tokens)`, for tests and models.
    #[cfg(any(test, turnstile_loom))]
    pub const fn unpack(&self, word: u64) -> (u64, u64) {
        (self.last_refill(word), self.tokens(word))
    }
}

impl WordAlgorithm for TokenBucketRules {
    const RESERVES_MOVED: bool = true;

    #[inline]
    fn fresh(&self) -> u64 {
        self.full()
    }

    /// Full as of `at`, with its last refill no later than `at`'s grid point: at every
    /// later reading it refills to full at that reading's grid point, as a new key does.
    fn forgettable(&self, word: u64, at: u64) -> bool {
        self.last_refill(word) <= at / self.interval && refill(self, word, at).0 == self.capacity
    }

    #[inline]
    fn acquire(&self, word: u64, now: u64, cost: u32) -> (u64, Decision) {
        acquire(self, word, now, cost)
    }

    #[inline]
    fn available(&self, word: u64, now: u64) -> u32 {
        available(self, word, now)
    }

    #[inline]
    fn refund(&self, word: u64, now: u64, cost: u32) -> u64 {
        refund(self, word, now, cost)
    }
}

/// The bucket refilled lazily at `now` (nanoseconds since the epoch): its token count
/// and its new refill grid index.
///
/// Counting whole grid points passed keeps the unfinished part of an interval, and a
/// reading older than the last refill (another core's clock slightly behind) counts as
/// no time elapsed.
#[inline]
fn refill(layout: &TokenBucketRules, word: u64, now: u64) -> (u64, u64) {
    let last = layout.last_refill(word);
    // Most readings fall in the interval that the last refill started (`last * interval`
    // cannot overflow: `last <= u64::MAX / interval`); only the others pay for a
    // division (about 4 ns here). A reading before that interval wraps to a huge
    // difference and takes the general path, which clamps it to `last`.
    let index = if now.wrapping_sub(last * layout.interval) < layout.interval {
        last
    } else {
        (now / layout.interval).max(last)
    };
    let tokens = layout.tokens(word);
    let room = layout.capacity - tokens;
    let gained = index - last;
    let tokens = if gained >= room {
        layout.capacity
    } else {
        tokens + gained
    };
    (tokens, index)
}

/// One request for `cost` tokens at `now`: the word to store and the decision.
///
/// The returned word equals `word` exactly when the state did not change (a denial
/// with nothing refilled, a cost above capacity), so callers write nothing then.
#[inline]
pub fn acquire(layout: &TokenBucketRules, word: u64, now: u64, cost: u32) -> (u64, Decision) {
    let (tokens, index) = refill(layout, word, now);
    let cost = u64::from(cost);
    if cost > layout.capacity {
        let decision = Decision::ExceedsCapacity {
            remaining: tokens as u32,
            capacity: layout.capacity as u32,
        };
        return (word, decision);
    }
    if tokens >= cost {
        let remaining = tokens - cost;
        let decision = Decision::Allowed {
            remaining: remaining as u32,
        };
        (layout.pack(index, remaining), decision)
    } else {
        let decision = Decision::Denied {
            remaining: tokens as u32,
            retry_after: wait_for(layout, index, cost - tokens, now),
        };
        // The refill is kept (it is what the reference model does, and it matters when a
        // later reading is older); with nothing refilled this packs back to `word`.
        (layout.pack(index, tokens), decision)
    }
}

/// Tokens available at `now`, without taking any.
#[inline]
pub fn available(layout: &TokenBucketRules, word: u64, now: u64) -> u32 {
    refill(layout, word, now).0 as u32
}

/// `cost` tokens given back at `now`, capped at the capacity: the word to store. A
/// bucket already full at `now` is left exactly as it is — it has nothing missing,
/// and a new key's canonical full word must stay indistinguishable from no key.
#[inline]
pub fn refund(layout: &TokenBucketRules, word: u64, now: u64, cost: u32) -> u64 {
    let (tokens, index) = refill(layout, word, now);
    if tokens == layout.capacity {
        return word;
    }
    let tokens = (tokens + u64::from(cost)).min(layout.capacity);
    layout.pack(index, tokens)
}

/// Exact time from `now` until `missing` more tokens have arrived after grid index
/// `index`: they arrive at grid points `index + 1 ..= index + missing`.
#[inline]
fn wait_for(layout: &TokenBucketRules, index: u64, missing: u64, now: u64) -> Duration {
    let ready_at = (u128::from(index) + u128::from(missing)) * u128::from(layout.interval);
    // `index >= now / interval`, so `ready_at > now`: the wait is never zero.
    nanos_to_duration(ready_at - u128::from(now))
}

#[cfg(all(test, not(turnstile_loom)))]
mod tests {
    use super::*;
    use crate::quota::max_capacity;

    const MS: u64 = 1_000_000;

    fn layout(capacity: u32, interval: Duration) -> TokenBucketRules {
        TokenBucketRules::new(&Quota::new(capacity, interval).unwrap())
    }

    /// Runs requests of cost 1 at the given millisecond readings from a full bucket.
    fn allowed_at(layout: &TokenBucketRules, readings_ms: &[u64]) -> Vec<bool> {
        let mut word = layout.full();
        readings_ms
            .iter()
            .map(|&ms| {
                let (new, decision) = acquire(layout, word, ms * MS, 1);
                word = new;
                decision.is_allowed()
            })
            .collect()
    }

    #[test]
    fn the_design_notes_example_keeps_the_unfinished_part_of_an_interval() {
        // Capacity 1, one token per second: 0, 1500 and 2000 ms pass; 2999 does not;
        // 3000 does. Refilling to `now` instead of the grid point would deny 2000.
        let l = layout(1, Duration::from_secs(1));
        assert_eq!(
            allowed_at(&l, &[0, 1500, 2000, 2999, 3000]),
            [true, true, true, false, true]
        );
    }

    #[test]
    fn the_capacity_caps_what_silence_buys() {
        let l = layout(3, Duration::from_secs(1));
        // An hour of silence after draining buys 3 requests, not 3600.
        let out = allowed_at(
            &l,
            &[0, 0, 0, 0, 3_600_000, 3_600_000, 3_600_000, 3_600_000],
        );
        assert_eq!(out, [true, true, true, false, true, true, true, false]);
    }

    #[test]
    fn a_denied_request_without_refill_leaves_the_word_untouched() {
        let l = layout(2, Duration::from_secs(1));
        let (drained, _) = acquire(&l, l.full(), 10 * MS, 2);
        let (after, decision) = acquire(&l, drained, 500 * MS, 1);
        assert!(!decision.is_allowed());
        assert_eq!(after, drained);
    }

    #[test]
    fn a_denial_that_refilled_stores_the_refill_but_takes_nothing() {
        let l = layout(5, Duration::from_secs(1));
        let (drained, _) = acquire(&l, l.full(), 0, 5);
        let (after, decision) = acquire(&l, drained, 2500 * MS, 3);
        assert_eq!(
            decision,
            Decision::Denied {
                remaining: 2,
                retry_after: Duration::from_millis(500)
            }
        );
        assert_eq!(l.unpack(after), (2, 2));
    }

    #[test]
    fn weighted_requests_are_all_or_nothing() {
        let l = layout(10, Duration::from_secs(1));
        let (word, d) = acquire(&l, l.full(), 0, 7);
        assert_eq!(d, Decision::Allowed { remaining: 3 });
        let (word2, d) = acquire(&l, word, 0, 4);
        assert_eq!(d.remaining(), 3);
        assert!(!d.is_allowed());
        assert_eq!(word2, word);
    }

    #[test]
    fn retry_after_is_the_exact_wait_and_never_rounds_down() {
        let l = layout(4, Duration::from_millis(250));
        let (word, _) = acquire(&l, l.full(), 100 * MS, 4);
        // At 100 ms: 0 tokens; 3 more arrive at 250, 500 and 750 ms.
        let (_, d) = acquire(&l, word, 100 * MS, 3);
        let wait = d.retry_after().unwrap();
        assert_eq!(wait, Duration::from_millis(650));
        let at = 100 * MS + wait.as_nanos() as u64;
        assert!(acquire(&l, word, at, 3).1.is_allowed());
        assert!(!acquire(&l, word, at - 1, 3).1.is_allowed());
    }

    #[test]
    fn a_cost_above_capacity_is_reported_as_never_satisfiable() {
        let l = layout(3, Duration::from_secs(1));
        let (word, d) = acquire(&l, l.full(), 0, 4);
        assert_eq!(
            d,
            Decision::ExceedsCapacity {
                remaining: 3,
                capacity: 3
            }
        );
        assert_eq!(d.retry_after(), None);
        assert_eq!(word, l.full());
    }

    #[test]
    fn a_reading_older_than_the_last_refill_counts_as_no_time_elapsed() {
        let l = layout(2, Duration::from_secs(1));
        let (word, _) = acquire(&l, l.full(), 5000 * MS, 2);
        // Another core reads 3000 ms: no underflow, nothing gained, nothing lost.
        let (after, d) = acquire(&l, word, 3000 * MS, 1);
        assert!(!d.is_allowed());
        assert_eq!(after, word);
        assert_eq!(d.retry_after(), Some(Duration::from_millis(3000)));
        assert!(acquire(&l, word, 6000 * MS, 1).1.is_allowed());
    }

    #[test]
    fn any_idle_span_leaves_a_full_bucket() {
        let l = layout(7, Duration::from_millis(10));
        let (word, _) = acquire(&l, l.full(), 0, 7);
        let ten_years = 10 * 365 * 24 * 3600 * 1000 * MS;
        assert_eq!(available(&l, word, ten_years), 7);
        assert_eq!(available(&l, word, u64::MAX), 7);
        let (word, d) = acquire(&l, word, u64::MAX - 1, 7);
        assert!(d.is_allowed());
        assert_eq!(available(&l, word, u64::MAX), 0);
    }

    #[test]
    fn the_largest_grid_index_and_capacity_fit_without_overlap() {
        for interval in [4, 1000, MS, 1 << 40, u64::MAX] {
            let capacity = max_capacity(interval).min(u64::from(u32::MAX)) as u32;
            let l = layout(capacity, Duration::from_nanos(interval));
            let last = u64::MAX / interval;
            let word = l.pack(last, u64::from(capacity));
            assert_eq!(l.unpack(word), (last, u64::from(capacity)), "{interval}");
        }
    }

    #[test]
    fn a_refund_gives_tokens_back_up_to_the_capacity() {
        let l = layout(5, Duration::from_secs(1));
        let (word, _) = acquire(&l, l.full(), 0, 4);
        let word = refund(&l, word, 0, 3);
        assert_eq!(available(&l, word, 0), 4);
        assert_eq!(available(&l, refund(&l, word, 0, 3), 0), 5);
        // Refilled first: at 2 s, 1 + 2 tokens, then 2 back, capped at 5.
        let (word, _) = acquire(&l, l.full(), 0, 4);
        assert_eq!(l.unpack(refund(&l, word, 2000 * MS, 2)), (2, 5));
    }

    #[test]
    fn a_wait_beyond_durations_range_saturates() {
        let l = layout(u32::MAX, Duration::from_nanos(u64::MAX));
        let (word, _) = acquire(&l, l.full(), 0, u32::MAX);
        let (_, d) = acquire(&l, word, 0, u32::MAX);
        assert_eq!(d.retry_after(), Some(Duration::MAX));
    }
}

impl MovableWord for TokenBucketRules {
    fn for_quota(quota: &Quota) -> Self {
        TokenBucketRules::new(quota)
    }

    /// The last refill's grid point: an earlier reading counts as no time elapsed.
    fn moment(&self, word: u64) -> u64 {
        // No overflow: the grid index is at most `u64::MAX / interval`.
        self.last_refill(word) * self.interval
    }
}
