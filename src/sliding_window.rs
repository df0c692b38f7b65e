//! The sliding window counter's state word and its pure step functions.
//!
//! As for the token bucket: the lock-free limiter applies
//! [`acquire`](WordAlgorithm::acquire) inside the shared compare-and-set loop, and the
//! property tests and loom models check it.

use crate::algorithm::RulesFromQuota;
use crate::clock::nanos_to_duration;
use crate::quota::{Quota, QuotaError};
use crate::settle::settle_by;
use crate::word::WordAlgorithm;
use crate::{Decision, Settlement};
use std::num::NonZeroU64;
use std::time::Duration;

/// The layout of a sliding window counter's state word, fixed per quota.
///
/// ```text
///  63                   2c  2c-1             c  c-1              0
/// +-----------------------+------------------+------------------+
/// | window index          | previous count   | current count    |
/// +-----------------------+------------------+------------------+
/// ```
///
/// - *current count* (the low `c` bits): requests admitted in the key's window,
///   `0..=limit`, and up to `limit + debt cap` for a key in debt (a settle charged it
///   beyond the limit: [`Settlement`](crate::Settlement)). `c = bits(2 × limit)` where
///   the word has room for it, so the debt cap is one limit; else `c = bits(limit)`,
///   and the debt cap is what that field holds beyond the limit, short of its
///   all-ones value: `2^c − 2 − limit`, possibly nothing (and for a limit of
///   `2^c − 1`, a settle on a key with a previous count charges the current count to
///   `2^c − 2` at most, forgiving the rest). A debt is repaid as the
///   window slides on: the count weighs in as the previous window's, less and less.
/// - *previous count* (the next `c` bits): requests admitted in the window before it.
/// - *window index* (the next `63 - 2c` bits): the key's window, counted since the
///   limiter's epoch; it must hold every window a `u64` nanosecond clock can reach,
///   `u64::MAX / window`, so nothing wraps. The top bit is never set: it marks a
///   relocated word ([`crate::word`]).
///
/// Two counts beside the index do not fit every [`Quota`]: [`SlidingWindowRules::new`]
/// refuses a quota unless `2 × bits(limit) + bits(u64::MAX / window) <= 63` (the index
/// keeping at least one bit), about `limit <= sqrt(window in ns / 2)`. That bound is what
/// one word holds, not a choice: the weighted estimate needs both counts exactly, each
/// up to `limit` (`bits(limit)` bits apiece), and the window index must reach every
/// window of the clock's 584 years so that no key's window ever wraps onto a later one.
/// A larger limit needs a wider word or a shorter clock; the token bucket, the fixed
/// window and the sliding log hold every quota.
///
/// No count is ever all-ones: with the wide field, `2 × limit` is below it; with the
/// narrow one, an admission brings the current count to `limit` only when the
/// previous one is 0 (see [`acquire`](WordAlgorithm::acquire)), and a settle charges
/// it no further than `2^c − 2`. So no word is `RELOCATED - 1`, whose relocated form
/// marks a retired word. A word two windows old carries no
/// information, so every new key starts as the constant word 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlidingWindowRules {
    limit: u64,
    interval: NonZeroU64,
    count_bits: u32,
    /// The most the current count reaches: the limit and the debt cap (see the type's
    /// documentation).
    most: u64,
}

/// Number of bits needed to write `x` in binary.
const fn bits(x: u64) -> u32 {
    u64::BITS - x.leading_zeros()
}

/// A key's state as seen at one reading.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct At {
    /// The window the reading falls in (the key's own for an older reading).
    pub index: u64,
    /// Admitted in the window before `index`.
    pub previous: u64,
    /// Admitted in window `index`.
    pub current: u64,
    /// Whole refill intervals of window `index` elapsed at the reading, `0..limit`.
    pub elapsed: u64,
}

const REQUIREMENT: &str = "63 bits of its word hold the window index (bits(u64::MAX / window)) \
    beside two counts of bits(capacity) each, which allows capacities up to about the square \
    root of the window in nanoseconds (Quota::per_second(n): n <= 16,383; per_minute: \
    n <= 131,071; per_hour: n <= 1,048,575); TokenBucket, FixedWindow and SlidingLog hold \
    every quota";

impl SlidingWindowRules {
    /// The layout for `quota`.
    ///
    /// # Errors
    /// [`QuotaError::Unsupported`] unless the window index and two counts fit one
    /// word below its top bit: `2 × bits(capacity) + max(1, bits(u64::MAX / window))
    /// <= 63`.
    pub fn new(quota: &Quota) -> Result<Self, QuotaError> {
        let limit = u64::from(quota.capacity());
        let interval = quota.interval_nanos();
        let last_index = u64::MAX / interval / limit;
        // The index keeps at least one bit, so no shift spans the whole word.
        // The top bit marks a relocated word (`crate::word`): never a state's.
        let fits = |count_bits: u32| 2 * count_bits + bits(last_index).max(1) < u64::BITS;
        // Counts twice as wide where they fit (a debt cap of one limit), else as
        // wide as the limit (a debt cap of what the field holds beyond it).
        let (count_bits, most) = if fits(bits(2 * limit)) {
            (bits(2 * limit), 2 * limit)
        } else if fits(bits(limit)) {
            let count_bits = bits(limit);
            (count_bits, limit.max((1 << count_bits) - 2))
        } else {
            return Err(QuotaError::Unsupported {
                algorithm: "SlidingWindowCounter",
                capacity: quota.capacity(),
                refill_every: quota.refill_every(),
                requirement: REQUIREMENT,
            });
        };
        Ok(Self {
            limit,
            interval,
            count_bits,
            most,
        })
    }

    /// The word holding window `index` with `previous` and `current` admitted.
    #[inline]
    pub const fn pack(&self, index: u64, previous: u64, current: u64) -> u64 {
        (index << (2 * self.count_bits)) | (previous << self.count_bits) | current
    }

    /// The word's fields as `(window index, previous count, current count)`.
    #[inline]
    pub const fn unpack(&self, word: u64) -> (u64, u64, u64) {
        let mask = (1 << self.count_bits) - 1;
        (
            word >> (2 * self.count_bits),
            (word >> self.count_bits) & mask,
            word & mask,
        )
    }

    /// The key's state as seen at `now`.
    ///
    /// The next window takes the current count as its previous one; a window two or
    /// more later starts from nothing. A reading older than the key's window (another
    /// core's clock slightly behind) counts as no time elapsed: it sees the start of
    /// the key's window.
    #[inline]
    pub fn at(&self, word: u64, now: u64) -> At {
        let (index, previous, current) = self.unpack(word);
        // The window of `now` in whole refill intervals, so the window itself (which
        // can exceed u64::MAX ns) is never computed.
        let grid = now / self.interval;
        let now_index = grid / self.limit;
        let elapsed = grid - now_index * self.limit;
        if now_index == index {
            At {
                index,
                previous,
                current,
                elapsed,
            }
        } else if now_index < index {
            At {
                index,
                previous,
                current,
                elapsed: 0,
            }
        } else {
            let previous = if now_index == index + 1 { current } else { 0 };
            At {
                index: now_index,
                previous,
                current: 0,
                elapsed,
            }
        }
    }

    /// The requests counted against the key at `at`: the previous window's count
    /// weighted by the share of it the sliding window still overlaps, in whole
    /// intervals rounded up, `(limit - elapsed) / limit`, then rounded up to a whole
    /// request; plus the current count. Both roundings are up, so the estimate is
    /// never below the exact weighted count.
    #[inline]
    pub fn counted(&self, at: &At) -> u64 {
        // At most 2 × limit² < 2^63 (limit < 2^31, see `new`): no overflow.
        let weighted = at.previous * (self.limit - at.elapsed);
        weighted.div_ceil(self.limit) + at.current
    }
}

/// Refuses the quotas [`new`](SlidingWindowRules::new) names: building fails on those.
impl RulesFromQuota for SlidingWindowRules {
    fn from_quota(quota: &Quota) -> Result<Self, QuotaError> {
        Self::new(quota)
    }
}

impl WordAlgorithm for SlidingWindowRules {
    /// The word of every new key: window 0, nothing counted.
    #[inline]
    fn fresh(&self) -> u64 {
        0
    }

    /// One request for `cost` at `now`: the word to store and the decision.
    ///
    /// Admitted iff `counted + cost <= limit` — with the exact, unrounded weighted count
    /// this is the same test, since `cost` and the current count are whole. So an
    /// admission leaves `previous × (limit − elapsed) / limit + current <= limit`, which
    /// is why a full current count implies an empty previous one.
    ///
    /// A key in debt (its weighted count past the limit) is denied even a cost of 0.
    /// Only an admitted request with a cost changes the word; a denial, a zero cost or
    /// a cost above the limit returns `word` itself, so callers write nothing.
    #[inline]
    fn acquire(&self, word: u64, now: u64, cost: u32) -> (u64, Decision) {
        let at = self.at(word, now);
        let remaining = self.limit.saturating_sub(self.counted(&at));
        let cost = u64::from(cost);
        if cost > self.limit {
            let decision = Decision::ExceedsCapacity {
                remaining: remaining as u32,
                capacity: self.limit as u32,
            };
            return (word, decision);
        }
        if cost > remaining {
            let decision = Decision::Denied {
                remaining: remaining as u32,
                retry_after: wait(self, &at, cost, now),
            };
            return (word, decision);
        }
        if cost == 0 {
            // Allowed unless the key owes (its weighted count past the limit): it
            // has less than nothing, and waits until the count slides back within it.
            let decision = if self.counted(&at) > self.limit {
                Decision::Denied {
                    remaining: 0,
                    retry_after: wait(self, &at, 0, now),
                }
            } else {
                Decision::Allowed {
                    remaining: remaining as u32,
                }
            };
            return (word, decision);
        }
        let decision = Decision::Allowed {
            remaining: (remaining - cost) as u32,
        };
        (
            self.pack(at.index, at.previous, at.current + cost),
            decision,
        )
    }

    /// Requests `word` can still admit at `now`, without taking any.
    #[inline]
    fn available(&self, word: u64, now: u64) -> u32 {
        let at = self.at(word, now);
        self.limit.saturating_sub(self.counted(&at)) as u32
    }

    /// `cost` admissions given back from the current window's count as seen at `now` (at
    /// most what it holds, a debt first): the word to store, and how many were given
    /// back. The previous window's count is history the estimate weighs; it is left
    /// as it is.
    #[inline]
    fn give_back(&self, word: u64, now: u64, cost: u32) -> (u64, u32) {
        let at = self.at(word, now);
        let left = at.current.saturating_sub(u64::from(cost));
        if left == at.current {
            (word, 0)
        } else {
            // At most `cost`: a `u32`.
            (
                self.pack(at.index, at.previous, left),
                (at.current - left) as u32,
            )
        }
    }

    /// A settle gives nothing back: the word cannot tell which window counted the
    /// estimate (the current one, or the previous, which the estimate only weighs),
    /// and giving it to a later window would admit more than the limit there. A
    /// settle above the estimate is a [`charge`](Self::charge). (A
    /// [`refund`](WordAlgorithm::refund) right after the take, a policy's, still
    /// gives back to the current window.)
    #[inline]
    fn settle(&self, word: u64, now: u64, estimate: u32, actual: u32) -> (u64, Settlement) {
        settle_by(
            estimate,
            actual,
            word,
            |_| (word, 0),
            |extra| self.charge(word, now, extra),
        )
    }

    /// `extra` admissions counted in the current window at `now` whatever the estimate
    /// has left, the weighted estimate up to the limit and the debt cap (see the
    /// type's documentation): the word to store, and how many were counted.
    #[inline]
    fn charge(&self, word: u64, now: u64, extra: u32) -> (u64, u32) {
        let at = self.at(word, now);
        // Never both counts all-ones: with a previous count, the current one stops
        // short of the field's all-ones value (which only a narrow field's limit can
        // be, `2^c − 1`; the wide field's `most` is below it).
        let most = match at.previous {
            0 => self.most,
            _ => self.most.min((1 << self.count_bits) - 2),
        };
        // Up to `most` counted, the weighted previous count included: so the debt
        // (what is counted past the limit) is at most the debt cap, and the current
        // count, never above what is counted, at most `most`.
        let charged = u64::from(extra).min(most.saturating_sub(self.counted(&at)));
        if charged == 0 {
            (word, 0)
        } else {
            // At most `most`, which the field holds, never all-ones. At most `extra`.
            let word = self.pack(at.index, at.previous, at.current + charged);
            (word, charged as u32)
        }
    }

    /// What the weighted estimate counts past the limit at `now`.
    fn debt(&self, word: u64, now: u64) -> u32 {
        let counted = self.counted(&self.at(word, now));
        // At most `2 × most`, below 2^33; saturated to a `u32`.
        counted.saturating_sub(self.limit).min(u64::from(u32::MAX)) as u32
    }

    /// From the start of the first window in which nothing is counted in it nor in
    /// the one before it (the word's own if both its counts are zero, the next if only
    /// the current one is, else the one after): at every later reading both counts
    /// are zero, as for a new key.
    fn forgettable_from(&self, word: u64) -> Option<u64> {
        let (index, previous, current) = self.unpack(word);
        let after = match (previous, current) {
            (0, 0) => 0,
            (_, 0) => 1,
            _ => 2,
        };
        let window = u128::from(index) + after;
        let start = window * u128::from(self.limit) * u128::from(self.interval.get());
        u64::try_from(start).ok()
    }
}

/// Exact time from `now` until a denied request for `cost <= limit` is admitted, if
/// nothing else is. The count only falls with time, and only at grid points, so this
/// is the first grid point where it has fallen far enough. Out of line, to keep the
/// admitting path short.
#[inline(never)]
fn wait(rules: &SlidingWindowRules, at: &At, cost: u64, now: u64) -> Duration {
    let limit = rules.limit;
    let ready = if at.current + cost <= limit {
        // Later in this window, once `previous × (limit − q) <= room × limit`, i.e. at
        // interval q = limit − ⌊room × limit / previous⌋ (limit itself: the next
        // window, where this window's count weighs in fully but fits). previous > 0,
        // or the request would have been admitted.
        let room = limit - at.current - cost;
        u128::from(at.index) * u128::from(limit) + u128::from(limit - room * limit / at.previous)
    } else {
        // The next window, where the current count becomes the previous one (> 0,
        // since current + cost > limit >= cost) with room `limit − cost`; at its end
        // (cost = limit) the window after, which starts empty.
        let room = limit - cost;
        (u128::from(at.index) + 1) * u128::from(limit)
            + u128::from(limit - room * limit / at.current)
    };
    nanos_to_duration(ready * u128::from(rules.interval.get()) - u128::from(now))
}

#[cfg(all(test, not(turnstile_loom)))]
mod tests {
    use super::*;

    use crate::word::strategies::{any_quota, readings};
    use proptest::prelude::*;

    const MS: u64 = 1_000_000;

    proptest! {
        /// `forgettable_from` is the start of the first window in which neither it
        /// nor the one before counts anything. Counts up to what the current count
        /// reaches with a debt included: a word in debt is never forgettable.
        #[test]
        fn forgettable_from_is_the_start_of_the_first_window_with_nothing_counted(
            quota in any_quota(), index in any::<u64>(), previous in any::<u64>(),
            current in any::<u64>(), random in any::<u64>(),
        ) {
            let Ok(rules) = SlidingWindowRules::new(&quota) else { return Ok(()) };
            let last_index = u64::MAX / rules.interval / rules.limit;
            let counts = rules.most + 1;
            let index = index % last_index.saturating_add(1);
            let word = rules.pack(index, previous % counts, current % counts);
            let from = rules.forgettable_from(word);
            for at in readings(from, random) {
                let seen = rules.at(word, at);
                let empty = seen.index == at / rules.interval / rules.limit
                    && seen.previous == 0
                    && seen.current == 0;
                prop_assert_eq!(rules.forgettable(word, at), empty);
                prop_assert!(rules.debt(word, at) == 0 || !rules.forgettable(word, at));
            }
        }
    }

    /// 4 per 400 ms window, one interval = 100 ms.
    fn four_per_400ms() -> SlidingWindowRules {
        SlidingWindowRules::new(&Quota::new(4, Duration::from_millis(100)).unwrap()).unwrap()
    }

    #[test]
    fn the_previous_window_weighs_by_its_overlap_in_whole_intervals_rounded_up() {
        let l = four_per_400ms();
        let word = l.pack(0, 0, 4);
        // Window 1, 0..99 ms in: the previous window overlaps 4 of 4 intervals.
        assert_eq!(l.available(word, 400 * MS), 0);
        // 100 ms in: 3 of 4 intervals, 4 × 3/4 = 3 counted.
        assert_eq!(l.available(word, 500 * MS), 1);
        assert_eq!(l.available(word, 599 * MS), 1);
        assert_eq!(l.available(word, 700 * MS), 3);
        // Two windows later, nothing is left.
        assert_eq!(l.available(word, 800 * MS), 4);
        // 3 previous at 1 of 4 intervals elapsed: 3 × 3/4 = 2.25, counted as 3.
        assert_eq!(l.available(l.pack(1, 3, 0), 500 * MS), 1);
    }

    #[test]
    fn retry_after_is_the_first_grid_point_where_the_request_fits() {
        let l = four_per_400ms();
        let word = l.pack(1, 4, 0);
        // At 450 ms, 4 counted; 2 fit once 4 × (4 − q)/4 <= 2, i.e. q = 2: 600 ms.
        let (same, d) = l.acquire(word, 450 * MS, 2);
        assert_eq!(same, word);
        assert_eq!(d.retry_after(), Some(Duration::from_millis(150)));
        assert!(!l.acquire(word, 600 * MS - 1, 2).1.is_allowed());
        assert!(l.acquire(word, 600 * MS, 2).1.is_allowed());
        // A full window's worth waits for the window after: nothing of the previous
        // may remain.
        let (_, d) = l.acquire(word, 450 * MS, 4);
        assert_eq!(d.retry_after(), Some(Duration::from_millis(350)));
    }

    #[test]
    fn a_full_current_window_waits_into_the_next_one() {
        let l = four_per_400ms();
        let (word, _) = l.acquire(l.fresh(), 50 * MS, 4);
        // Window 1 counts these 4 as previous: 1 fits once 4 × (4 − q)/4 <= 3, q = 1.
        let (_, d) = l.acquire(word, 50 * MS, 1);
        assert_eq!(d.retry_after(), Some(Duration::from_millis(450)));
        let (_, d) = l.acquire(word, 50 * MS, 4);
        assert_eq!(d.retry_after(), Some(Duration::from_millis(750)));
        assert!(l.acquire(word, 800 * MS, 4).1.is_allowed());
        assert!(!l.acquire(word, 800 * MS - 1, 4).1.is_allowed());
    }

    #[test]
    fn a_reading_older_than_the_keys_window_sees_its_start() {
        let l = four_per_400ms();
        let word = l.pack(2, 4, 0); // window 2 = [800, 1200) ms
        let at = l.at(word, 300 * MS);
        assert_eq!(
            at,
            At {
                index: 2,
                previous: 4,
                current: 0,
                elapsed: 0
            }
        );
        // The wait runs from the reading itself: 1 fits at 900 ms.
        let (_, d) = l.acquire(word, 300 * MS, 1);
        assert_eq!(d.retry_after(), Some(Duration::from_millis(600)));
    }

    #[test]
    fn quotas_whose_counts_do_not_fit_beside_the_index_are_refused_by_name() {
        assert!(SlidingWindowRules::new(&Quota::per_second(16_383).unwrap()).is_ok());
        let err = SlidingWindowRules::new(&Quota::per_second(16_384).unwrap()).unwrap_err();
        assert!(matches!(
            err,
            QuotaError::Unsupported {
                algorithm: "SlidingWindowCounter",
                capacity: 16_384,
                ..
            }
        ));
        assert!(err.to_string().contains("SlidingWindowCounter"), "{err}");
    }

    #[test]
    fn documented_per_period_limits_hold() {
        // REQUIREMENT quotes these; for per-period quotas the window is the period, so
        // the bound is monotone and every n up to it fits.
        for (make, limit) in [
            (
                Quota::per_second as fn(u32) -> Result<Quota, QuotaError>,
                16_383,
            ),
            (Quota::per_minute, 131_071),
            (Quota::per_hour, 1_048_575),
        ] {
            for n in 1..=limit {
                assert!(SlidingWindowRules::new(&make(n).unwrap()).is_ok(), "{n}");
            }
            assert!(SlidingWindowRules::new(&make(limit + 1).unwrap()).is_err());
        }
    }

    #[test]
    fn every_accepted_quota_packs_its_largest_fields_without_overlap() {
        for interval in [1, 4, 5, 1000, 1 << 20, MS, 1 << 40, u64::MAX] {
            for limit in [1, 2, 3, 1 << 15, 1 << 16, 1 << 20, u32::MAX - 1, u32::MAX] {
                let quota = Quota::new(limit, Duration::from_nanos(interval)).unwrap();
                let Ok(l) = SlidingWindowRules::new(&quota) else {
                    continue;
                };
                let last = u64::MAX / interval / l.limit;
                let word = l.pack(last, l.limit, l.limit);
                assert_eq!(l.unpack(word), (last, l.limit, l.limit), "{quota:?}");
                assert_eq!(l.at(word, u64::MAX).index, last);
            }
        }
    }

    #[test]
    fn readings_at_the_end_of_the_clock_are_exact() {
        let l = four_per_400ms();
        let (word, d) = l.acquire(l.fresh(), u64::MAX, 4);
        assert!(d.is_allowed());
        let (_, d) = l.acquire(word, u64::MAX, 1);
        // Window index of u64::MAX, then q = 1 of the next window.
        let window = 400 * u128::from(MS);
        let next = (u128::from(u64::MAX) / window + 1) * window + 100 * u128::from(MS);
        let wait = (next - u128::from(u64::MAX)) as u64;
        assert_eq!(d.retry_after(), Some(Duration::from_nanos(wait)));
    }
}
