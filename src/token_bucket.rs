//! The token bucket's state word and its pure step functions.
//!
//! Everything here is a function of plain values: the lock-free limiter applies
//! [`acquire`](WordAlgorithm::acquire) inside a compare-and-set loop, the baselines
//! apply it under their locks, and the property tests and loom models check it. One
//! definition of the semantics.

use crate::Decision;
use crate::clock::nanos_to_duration;
use crate::quota::Quota;
use crate::word::{MovableWord, STATE_END, WordAlgorithm};
use std::num::NonZeroU64;
use std::time::Duration;

/// The rules of a token bucket under one quota, and the meaning of its state word.
///
/// The word is one number, `full_at`: the refill grid index (whole intervals since
/// the limiter's epoch) at which the bucket is full again, counting every token it
/// is missing as one grid point still to come. At a reading whose grid index is `g`:
///
/// - the bucket holds `capacity − (full_at − g)` tokens while `full_at > g` (never
///   fewer than none), and `capacity` once `full_at ≤ g`;
/// - a request for `k` tokens is allowed iff the bucket holds at least `k` (for
///   `k ≥ 1`: iff `full_at − g + k ≤ capacity`, `full_at − g` read as 0 when the
///   bucket is full), and stores `max(full_at, g) + k`.
///
/// There is no token field, so nothing bounds the capacity but the quota's `u32`:
/// every capacity fits beside every interval. A key in debt (a settle charged it
/// beyond what it had: [`Settlement`](crate::Settlement)) has `full_at` more than
/// `capacity` past `g`, at most `2 × capacity` (the debt cap is one capacity). So
/// the word is at most `g + 2 × capacity`, and `g` is read no further than
/// [`STATE_END`]` − 1 − 2 × capacity` (just under 2⁶³), so the word never reaches the
/// markers' top bit ([`crate::word`]). That clamp only applies to intervals of 1 and
/// 2 ns (for any longer one, `u64::MAX / interval + 2 × capacity` is below it):
/// readings are exact for the clock's whole range, 584 years, at 3 ns or more; at
/// 1 ns for 292 years (at 2 ns, 584), less `2 × capacity` intervals; past that the
/// grid stops and the bucket gains nothing more.
///
/// Every new key starts as the word 0, full at every reading, so a full bucket is
/// the same constant for every key.
///
/// A reading older than the key's latest write (another core's clock slightly
/// behind) sees the bucket as that word describes it at its own grid index: the
/// tokens still to come by then are missing, so it never has more than a later
/// reading, and it can have fewer. It takes nothing back in time: a request it
/// admits stores `full_at + k`, after the tokens already spoken for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokenBucketRules {
    capacity: u64,
    interval: NonZeroU64,
    /// The most a key can owe, in tokens: one capacity.
    debt_cap: u64,
    /// The last grid index a reading is taken to (see the type's documentation).
    last_index: u64,
}

impl TokenBucketRules {
    /// The rules for `quota`; every quota fits.
    pub fn new(quota: &Quota) -> Self {
        let capacity = u64::from(quota.capacity());
        let interval = quota.interval_nanos();
        // One capacity: the word then stays within `2 × capacity` of the reading's
        // grid index, which the clamp below keeps clear of the markers.
        let debt_cap = capacity;
        Self {
            capacity,
            interval,
            debt_cap,
            last_index: (u64::MAX / interval).min(STATE_END - 1 - capacity - debt_cap),
        }
    }

    /// The word of a full bucket, which is also every new key's first state.
    #[inline]
    pub const fn full(&self) -> u64 {
        0
    }

    /// The refill interval in nanoseconds, for models.
    #[cfg(turnstile_loom)]
    pub const fn interval(&self) -> u64 {
        self.interval.get()
    }

    /// The capacity, for models.
    #[cfg(turnstile_loom)]
    pub const fn capacity(&self) -> u64 {
        self.capacity
    }

    /// The grid index of the reading `now`.
    #[inline(always)]
    fn index(&self, now: u64) -> u64 {
        // A division each time: behind the clock reading it costs nothing measurable
        // (a multiplication by a precomputed reciprocal measured no faster:
        // results/ANALYSIS.md, "The limiting step").
        let index = now / self.interval;
        if index < self.last_index {
            index
        } else {
            self.last_index
        }
    }

    /// Whether the grid index of the reading `now` is at least `point`, without
    /// dividing: `point × interval ≤ now`, and the grid reaching `point`. No overflow:
    /// the product is taken only for `point ≤ last_index ≤ u64::MAX / interval`.
    #[inline(always)]
    fn reached(&self, point: u64, now: u64) -> bool {
        point <= self.last_index && point * self.interval.get() <= now
    }

    /// The tokens a bucket full at `full_at` is missing at grid index `index`: 0 when
    /// it is full, more than the capacity when the reading lags far behind the word.
    #[inline(always)]
    const fn missing(full_at: u64, index: u64) -> u64 {
        full_at.saturating_sub(index)
    }

    /// The tokens held at grid index `index`.
    #[inline(always)]
    const fn tokens(&self, full_at: u64, index: u64) -> u64 {
        self.capacity.saturating_sub(Self::missing(full_at, index))
    }
}

impl WordAlgorithm for TokenBucketRules {
    const RESERVES_MOVED: bool = true;

    #[inline]
    fn fresh(&self) -> u64 {
        self.full()
    }

    /// The tokens missing at `now` beyond the capacity.
    fn debt(&self, word: u64, now: u64) -> u32 {
        let debt = Self::missing(word, self.index(now)).saturating_sub(self.capacity);
        // At most the debt cap (a capacity) at a reading no earlier than the
        // moment; saturated for a reading that lags further.
        debt.min(u64::from(u32::MAX)) as u32
    }

    /// Full from the start of grid index `full_at` (if the grid reaches it): at every
    /// later reading it is full, as a new key is, and a request leaves `g + k` on
    /// either.
    fn forgettable_from(&self, word: u64) -> Option<u64> {
        // No overflow: `last_index × interval` is at most `u64::MAX`.
        (word <= self.last_index).then(|| word * self.interval.get())
    }

    /// One request for `cost` tokens at `now`: the word to store and the decision.
    ///
    /// The returned word equals `word` exactly when the state did not change (every
    /// denial, a cost above capacity), so callers write nothing then.
    #[inline]
    fn acquire(&self, word: u64, now: u64, cost: u32) -> (u64, Decision) {
        let index = self.index(now);
        let missing = Self::missing(word, index);
        let tokens = self.capacity.saturating_sub(missing);
        let cost = u64::from(cost);
        // Allowed iff what the key has covers the cost: a key in debt (missing more
        // than the capacity, or a reading behind the last refill, which the word
        // cannot tell apart) has less than nothing, so even a cost of 0 is denied.
        // No overflow: `missing ≤ full_at < STATE_END < 2^64 − 2^32`.
        if missing + cost <= self.capacity {
            // `word.max(index) + cost ≤ index + capacity` (the tokens held are what is not
            // missing at `index`), at most `last_index + capacity`: never a marker.
            let decision = Decision::Allowed {
                remaining: (tokens - cost) as u32,
            };
            (word.max(index) + cost, decision)
        } else if cost > self.capacity {
            let decision = Decision::ExceedsCapacity {
                remaining: tokens as u32,
                capacity: self.capacity as u32,
            };
            (word, decision)
        } else {
            let decision = Decision::Denied {
                remaining: tokens as u32,
                retry_after: wait_for(self, word, cost, now),
            };
            (word, decision)
        }
    }

    /// This module's `admit`: the same verdict and word, decided without dividing.
    #[inline(always)]
    fn admit(&self, word: u64, now: u64, cost: u32) -> Option<u64> {
        admit(self, word, now, cost)
    }

    /// Tokens available at `now`, without taking any.
    #[inline]
    fn available(&self, word: u64, now: u64) -> u32 {
        self.tokens(word, self.index(now)) as u32
    }

    /// `cost` tokens given back at `now`, capped at the capacity: the word to store,
    /// and the tokens given back (a debt is repaid first). A bucket already full at
    /// `now` is left exactly as it is — it has nothing missing, and a new key's
    /// canonical full word must stay indistinguishable from no key.
    #[inline]
    fn give_back(&self, word: u64, now: u64, cost: u32) -> (u64, u32) {
        let index = self.index(now);
        if word <= index {
            return (word, 0);
        }
        // Full at `index` at the most: a refund never gives more than the capacity.
        let new = word.saturating_sub(u64::from(cost)).max(index);
        // At most `cost`: a `u32`.
        (new, (word - new) as u32)
    }

    /// `extra` tokens taken at `now` whatever the bucket holds: `full_at` moves
    /// `extra` grid points later, to at most `g + capacity + debt_cap` (see
    /// [`charged`]).
    #[inline]
    fn charge(&self, word: u64, now: u64, extra: u32) -> (u64, u32) {
        charged(word, self.index(now), self.capacity + self.debt_cap, extra)
    }
}

/// A charge of `extra` on the bucket full at `full_at`, at grid index `index`, where
/// the bucket may be missing at most `most` tokens (its capacity and its debt cap):
/// the word to store and the tokens charged. A bucket full at the reading counts
/// from the reading, as an admission does (`max(full_at, g) + k`); nothing charged
/// leaves `full_at` as it was (a full bucket's canonical word included). A reading
/// that lags behind the word finds less room, never more.
#[inline]
const fn charged(full_at: u64, index: u64, most: u64, extra: u32) -> (u64, u32) {
    let from = if full_at > index { full_at } else { index };
    // `index + most ≤ last_index + 2 × capacity < STATE_END`: no overflow, and the
    // word stays below the markers.
    let room = (index + most).saturating_sub(from);
    let extra = extra as u64;
    let charged = if extra < room { extra } else { room };
    if charged == 0 {
        (full_at, 0)
    } else {
        // At most `extra`: a `u32`.
        (from + charged, charged as u32)
    }
}

/// [`acquire`](WordAlgorithm::acquire)'s verdict and word without its decision: the
/// word to store if a request for `cost` at `now` is allowed, `None` if it is not
/// (denied, or a cost above the capacity). For a caller that asks only whether
/// (`try_acquire`, keyed or direct, through [`WordAlgorithm::admit`]).
///
/// It decides without dividing: "the reading's grid index is at least `p`" is
/// `p × interval ≤ now` ([`TokenBucketRules::reached`]), one multiplication, where
/// `acquire` divides the reading by the interval (a 64-bit `div`) and compares only
/// once the quotient is there. The grid index is divided out only for the word of an
/// admission into a bucket already full at the reading. The property tests hold it
/// to `acquire`, verdict and word, on every input.
#[inline]
pub fn admit(rules: &TokenBucketRules, word: u64, now: u64, cost: u32) -> Option<u64> {
    let cost = u64::from(cost);
    if cost > rules.capacity {
        return None;
    }
    // A bucket full at the reading (index `full_at + 1` reached; no wrap, the word is
    // below the markers) admits every cost up to the capacity and stores `g + cost`.
    // Asked first: it is a keyed limiter's usual case (a key is full again by its
    // next request), which then takes one `reached` and the division, not two
    // `reached` and the division (a denial pays this `reached` too; counted in
    // results/ANALYSIS.md, "The limiting step"). At most `last_index + capacity`:
    // never a marker.
    if rules.reached(word + 1, now) {
        return Some(refilled(rules, now, cost));
    }
    // The first grid index at which the bucket holds `cost` tokens: where the tokens
    // missing are down to `capacity − cost` (for a cost of 0, down to the capacity:
    // a key in debt is denied even that).
    let ready = word.saturating_sub(rules.capacity - cost);
    // `max(full_at, g) + cost` with `full_at` the larger (the bucket is not full),
    // summed only when allowed: a denied word can be within `cost` of `u64::MAX` (a
    // 1 ns interval's grid ends near it), where the sum would overflow.
    rules.reached(ready, now).then(|| word + cost)
}

/// The word an admission of `cost` into a bucket full at `now` stores: `g + cost`.
/// Inlined: it ends `admit`'s first branch, so the division stays on that branch
/// alone. (It was cold and out of line while `admit` asked it last, when inlining
/// made the compiler divide on every admission; once the full bucket was asked first,
/// the call cost the keyed token bucket instructions on every check:
/// results/ANALYSIS.md, "The limiting step".)
#[inline]
fn refilled(rules: &TokenBucketRules, now: u64, cost: u64) -> u64 {
    rules.index(now) + cost
}

/// Exact time from `now` until a request for `cost` (at most the capacity, more than
/// the bucket holds) is allowed: at grid index `full_at + cost − capacity`, the
/// first at which the tokens missing and the cost fit the capacity. For a cost of 0
/// (denied to a key in debt) that is when the debt is repaid, one interval before a
/// cost of 1 is allowed.
#[inline]
fn wait_for(rules: &TokenBucketRules, full_at: u64, cost: u64, now: u64) -> Duration {
    // `cost ≤ capacity` and the request was denied, so `full_at + cost − capacity` is
    // above the reading's grid index and no subtraction wraps.
    let ready = u128::from(full_at) + u128::from(cost) - u128::from(rules.capacity);
    if ready > u128::from(rules.last_index) && rules.last_index < u64::MAX / rules.interval {
        // Past the grid's last point where it stops before the clock's end (a 1 or
        // 2 ns interval, 292 or 584 years in): no wait brings the tokens. (Past the clock's end
        // itself, the wait is exact, to a time no reading reaches.)
        return Duration::MAX;
    }
    // Above the reading's grid index, so after the reading: never zero.
    nanos_to_duration(ready * u128::from(rules.interval.get()) - u128::from(now))
}

#[cfg(all(test, not(turnstile_loom)))]
mod tests {
    use super::*;

    use crate::word::strategies::{any_quota, readings};
    use proptest::prelude::*;

    const MS: u64 = 1_000_000;

    proptest! {
        /// `forgettable_from` is the first instant at which the bucket is full: the
        /// grid index reaches `full_at`. Words in debt (up to the debt cap past an
        /// empty bucket) included: one is never forgettable while it owes.
        #[test]
        fn forgettable_from_is_the_first_instant_the_bucket_is_full(
            quota in any_quota(),
            word in any::<u64>(),
            below_top in prop_oneof![Just(None), (0..4u64).prop_map(Some)],
            random in any::<u64>(),
        ) {
            let rules = TokenBucketRules::new(&quota);
            // Up to the deepest debt, the band past `last_index` drawn often.
            let top = rules.last_index + rules.capacity + rules.debt_cap;
            let word = match below_top {
                None => word % (top + 1),
                Some(back) => top.saturating_sub(back),
            };
            let from = rules.forgettable_from(word);
            for at in readings(from, random) {
                prop_assert_eq!(rules.forgettable(word, at), word <= rules.index(at));
                prop_assert!(rules.debt(word, at) == 0 || !rules.forgettable(word, at));
            }
        }
    }

    proptest! {
        /// `admit` is `acquire`'s verdict and word, from any word requests and
        /// settles' charges leave (words in debt included), at any reading (lagging
        /// ones included), for any cost (1 and 0 on a key in debt among them).
        #[test]
        fn admit_is_acquires_verdict_and_word(
            quota in any_quota(),
            earlier in proptest::collection::vec(
                (any::<u64>(), 0..=20u32, any::<bool>()), 0..4,
            ),
            now in any::<u64>(),
            near in 0..3u64,
            cost in prop_oneof![0..=2u32, 0..=20u32, any::<u32>()],
        ) {
            let rules = TokenBucketRules::new(&quota);
            let word = earlier.iter().fold(rules.full(), |word, &(at, cost, charge)| {
                if charge {
                    rules.charge(word, at, cost).0
                } else {
                    rules.acquire(word, at, cost).0
                }
            });
            // Readings on and just around the grid points that decide: where the
            // bucket holds `cost`, and where it is full again.
            let interval = rules.interval.get();
            let ready = word.saturating_sub(rules.capacity.saturating_sub(u64::from(cost)));
            for at in [
                now,
                ready.saturating_mul(interval).saturating_add(near).saturating_sub(1),
                word.saturating_add(1).saturating_mul(interval).saturating_add(near).saturating_sub(1),
            ] {
                let (new, decision) = rules.acquire(word, at, cost);
                prop_assert_eq!(
                    admit(&rules, word, at, cost),
                    decision.is_allowed().then_some(new),
                    "word {} at {} for {}", word, at, cost
                );
            }
        }
    }

    /// At the end of time on a 1 ns grid the drained word is within the capacity of
    /// `u64::MAX`: `admit` denies there as `acquire` does, for every cost, without
    /// summing past it (it once computed the word of a denied request, and overflowed).
    #[test]
    fn admit_denies_a_drained_bucket_at_the_end_of_a_one_nanosecond_grid() {
        let rules = rules(4, Duration::from_nanos(1));
        let mut word = rules.full();
        for _ in 0..4 {
            word = admit(&rules, word, u64::MAX, 1).expect("a token left");
        }
        assert_eq!(
            word,
            STATE_END - 1 - 4,
            "the last grid index plus the capacity (the debt cap's room above it)"
        );
        for cost in 0..=5 {
            let (new, decision) = rules.acquire(word, u64::MAX, cost);
            assert_eq!(
                admit(&rules, word, u64::MAX, cost),
                decision.is_allowed().then_some(new),
                "cost {cost}"
            );
        }
        assert_eq!(admit(&rules, word, u64::MAX, 4), None);
    }

    fn rules(capacity: u32, interval: Duration) -> TokenBucketRules {
        TokenBucketRules::new(&Quota::new(capacity, interval).unwrap())
    }

    /// Runs requests of cost 1 at the given millisecond readings from a full bucket.
    fn allowed_at(rules: &TokenBucketRules, readings_ms: &[u64]) -> Vec<bool> {
        let mut word = rules.full();
        readings_ms
            .iter()
            .map(|&ms| {
                let (new, decision) = rules.acquire(word, ms * MS, 1);
                word = new;
                decision.is_allowed()
            })
            .collect()
    }

    #[test]
    fn the_design_notes_example_keeps_the_unfinished_part_of_an_interval() {
        // Capacity 1, one token per second: 0, 1500 and 2000 ms pass; 2999 does not;
        // 3000 does. Refilling to `now` instead of the grid point would deny 2000.
        let l = rules(1, Duration::from_secs(1));
        assert_eq!(
            allowed_at(&l, &[0, 1500, 2000, 2999, 3000]),
            [true, true, true, false, true]
        );
    }

    #[test]
    fn the_capacity_caps_what_silence_buys() {
        let l = rules(3, Duration::from_secs(1));
        // An hour of silence after draining buys 3 requests, not 3600.
        let out = allowed_at(
            &l,
            &[0, 0, 0, 0, 3_600_000, 3_600_000, 3_600_000, 3_600_000],
        );
        assert_eq!(out, [true, true, true, false, true, true, true, false]);
    }

    #[test]
    fn a_denied_request_without_refill_leaves_the_word_untouched() {
        let l = rules(2, Duration::from_secs(1));
        let (drained, _) = l.acquire(l.full(), 10 * MS, 2);
        let (after, decision) = l.acquire(drained, 500 * MS, 1);
        assert!(!decision.is_allowed());
        assert_eq!(after, drained);
    }

    #[test]
    fn a_denial_writes_nothing_even_after_a_refill() {
        let l = rules(5, Duration::from_secs(1));
        let (drained, _) = l.acquire(l.full(), 0, 5);
        let (after, decision) = l.acquire(drained, 2500 * MS, 3);
        assert_eq!(
            decision,
            Decision::Denied {
                remaining: 2,
                retry_after: Duration::from_millis(500)
            }
        );
        assert_eq!(after, drained);
    }

    #[test]
    fn weighted_requests_are_all_or_nothing() {
        let l = rules(10, Duration::from_secs(1));
        let (word, d) = l.acquire(l.full(), 0, 7);
        assert_eq!(d, Decision::Allowed { remaining: 3 });
        let (word2, d) = l.acquire(word, 0, 4);
        assert_eq!(d.remaining(), 3);
        assert!(!d.is_allowed());
        assert_eq!(word2, word);
    }

    #[test]
    fn retry_after_is_the_exact_wait_and_never_rounds_down() {
        let l = rules(4, Duration::from_millis(250));
        let (word, _) = l.acquire(l.full(), 100 * MS, 4);
        // At 100 ms: 0 tokens; 3 more arrive at 250, 500 and 750 ms.
        let (_, d) = l.acquire(word, 100 * MS, 3);
        let wait = d.retry_after().unwrap();
        assert_eq!(wait, Duration::from_millis(650));
        let at = 100 * MS + wait.as_nanos() as u64;
        assert!(l.acquire(word, at, 3).1.is_allowed());
        assert!(!l.acquire(word, at - 1, 3).1.is_allowed());
    }

    #[test]
    fn a_cost_above_capacity_is_reported_as_never_satisfiable() {
        let l = rules(3, Duration::from_secs(1));
        let (word, d) = l.acquire(l.full(), 0, 4);
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
    fn a_reading_older_than_the_last_write_sees_the_tokens_still_to_come_as_missing() {
        let l = rules(4, Duration::from_secs(1));
        // At 5 s, 3 of 4 taken: full again at grid point 8.
        let (word, _) = l.acquire(l.full(), 5000 * MS, 3);
        assert_eq!(word, 8);
        assert_eq!(l.available(word, 5000 * MS), 1);
        // Another core reads 4.5 s (grid point 4): 4 of 4 still to come, none held.
        assert_eq!(l.available(word, 4500 * MS), 0);
        let (after, d) = l.acquire(word, 4500 * MS, 1);
        assert_eq!(after, word);
        assert_eq!(d.remaining(), 0);
        // Its wait is to grid point 5, where the token it asks for is there.
        assert_eq!(d.retry_after(), Some(Duration::from_millis(500)));
        // A reading far behind (grid point 1) finds nothing and owes more than the
        // capacity's worth of intervals; no subtraction wraps.
        let (_, d) = l.acquire(word, 1000 * MS, 4);
        assert_eq!(d.remaining(), 0);
        assert_eq!(d.retry_after(), Some(Duration::from_secs(7)));
        // A lagging reading that is allowed takes after what is spoken for: full
        // again one grid point later, never earlier. (At grid point 4 the bucket full
        // at 6 holds 2, so 1 remains.)
        let (word, _) = l.acquire(l.full(), 5000 * MS, 1);
        let (after, d) = l.acquire(word, 4000 * MS, 1);
        assert_eq!(d, Decision::Allowed { remaining: 1 });
        assert_eq!(after, word + 1);
        assert_eq!(l.available(after, 5000 * MS), 2);
    }

    #[test]
    fn any_idle_span_leaves_a_full_bucket() {
        let l = rules(7, Duration::from_millis(10));
        let (word, _) = l.acquire(l.full(), 0, 7);
        let ten_years = 10 * 365 * 24 * 3600 * 1000 * MS;
        assert_eq!(l.available(word, ten_years), 7);
        assert_eq!(l.available(word, u64::MAX), 7);
        let (word, d) = l.acquire(word, u64::MAX - 1, 7);
        assert!(d.is_allowed());
        assert_eq!(l.available(word, u64::MAX), 0);
    }

    #[test]
    fn every_capacity_fits_beside_every_interval_and_no_state_is_a_marker() {
        for interval in [1, 2, 3, 1000, MS, 1 << 40, u64::MAX] {
            for capacity in [1, 2, 1000, u32::MAX - 1, u32::MAX] {
                let l = rules(capacity, Duration::from_nanos(interval));
                // The latest reading there is, draining the bucket: the largest word.
                let (word, d) = l.acquire(l.full(), u64::MAX, capacity);
                assert_eq!(
                    d,
                    Decision::Allowed { remaining: 0 },
                    "{interval} {capacity}"
                );
                assert!(word < STATE_END, "{interval} {capacity}: {word}");
                assert_eq!(l.available(word, u64::MAX), 0);
                // The next token comes after the clock's last reading: at a grid
                // point the clock cannot reach (an exact wait), or never, where a
                // 1 or 2 ns grid stops first.
                let (_, d) = l.acquire(word, u64::MAX, 1);
                assert!(!d.is_allowed(), "{interval} {capacity}");
                let wait = d.retry_after().expect("a denial");
                assert!(wait > Duration::ZERO, "{interval} {capacity}");
                if interval <= 2 {
                    assert_eq!(d.retry_after(), Some(Duration::MAX), "{capacity}");
                }
            }
        }
    }

    #[test]
    fn a_million_a_second_and_the_largest_burst_at_one_nanosecond_work() {
        // One token every microsecond, a million at once.
        let l = TokenBucketRules::new(&Quota::per_second(1_000_000).unwrap());
        let (word, d) = l.acquire(l.full(), 0, 1_000_000);
        assert_eq!(d, Decision::Allowed { remaining: 0 });
        let (_, d) = l.acquire(word, 0, 1);
        assert_eq!(d.retry_after(), Some(Duration::from_micros(1)));
        assert_eq!(l.available(word, 250 * MS), 250_000);
        // u32::MAX at once, one more every nanosecond.
        let l = rules(u32::MAX, Duration::from_nanos(1));
        let (word, d) = l.acquire(l.full(), 7, u32::MAX);
        assert_eq!(d, Decision::Allowed { remaining: 0 });
        assert_eq!(l.available(word, 7 + 1_000), 1_000);
        assert_eq!(l.available(word, 7 + u64::from(u32::MAX)), u32::MAX);
        let (_, d) = l.acquire(word, 7, u32::MAX);
        assert_eq!(
            d.retry_after(),
            Some(Duration::from_nanos(u64::from(u32::MAX)))
        );
    }

    #[test]
    fn a_one_nanosecond_grid_stops_twice_the_capacity_before_its_words_end() {
        let l = rules(10, Duration::from_nanos(1));
        let last = STATE_END - 1 - 20;
        let (word, _) = l.acquire(l.full(), last - 3, 10);
        // Three tokens by the last grid point, none after it.
        assert_eq!(l.available(word, last), 3);
        assert_eq!(l.available(word, u64::MAX), 3);
        let (_, d) = l.acquire(word, u64::MAX, 4);
        assert_eq!(d.retry_after(), Some(Duration::MAX));
        // The debt cap's room is there at the end too: the deepest debt is the last
        // word below the markers' range, and nothing passes it.
        let (drained, _) = l.acquire(l.full(), u64::MAX, 10);
        let (deepest, charged) = l.charge(drained, u64::MAX, u32::MAX);
        assert_eq!((deepest, charged), (STATE_END - 1, 10));
        assert_eq!(l.charge(deepest, u64::MAX, 1), (deepest, 0));
    }

    #[test]
    fn a_refund_gives_tokens_back_up_to_the_capacity() {
        let l = rules(5, Duration::from_secs(1));
        let (word, _) = l.acquire(l.full(), 0, 4);
        let word = l.refund(word, 0, 3);
        assert_eq!(l.available(word, 0), 4);
        assert_eq!(l.available(l.refund(word, 0, 3), 0), 5);
        // Refilled first: at 2 s, 1 + 2 tokens, then 2 back, capped at 5: full at 2 s.
        let (word, _) = l.acquire(l.full(), 0, 4);
        assert_eq!(l.refund(word, 2000 * MS, 2), 2);
        // A full bucket is left as it is.
        assert_eq!(l.refund(l.full(), 2000 * MS, 2), l.full());
    }

    #[test]
    fn a_wait_beyond_durations_range_saturates() {
        let l = rules(u32::MAX, Duration::from_nanos(u64::MAX));
        let (word, _) = l.acquire(l.full(), 0, u32::MAX);
        let (_, d) = l.acquire(word, 0, u32::MAX);
        assert_eq!(d.retry_after(), Some(Duration::MAX));
    }
}

impl MovableWord for TokenBucketRules {
    fn for_quota(quota: &Quota) -> Self {
        TokenBucketRules::new(quota)
    }

    /// The grid point `capacity + debt_cap` intervals before the bucket is full: no
    /// request or settle can have stored the word earlier, and every reading up to it
    /// finds the bucket empty and owing its whole debt cap, so each answers as it
    /// does.
    fn moment(&self, word: u64) -> u64 {
        // A settle stores up to `capacity + debt_cap` past its reading's grid index,
        // so that is how far before the word a write can lie. Below
        // `u64::MAX / interval + 1`: the product stays within `u64` but for the last
        // grid point, which saturates to the clock's end.
        word.saturating_sub(self.capacity + self.debt_cap)
            .saturating_mul(self.interval.get())
    }
}
