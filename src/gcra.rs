//! GCRA's state word and its pure step functions.
//!
//! As for the token bucket: the lock-free limiter applies
//! [`acquire`](WordAlgorithm::acquire) inside the shared compare-and-set loop, and the
//! property tests and loom models check it.

use crate::Decision;
use crate::algorithm::RulesFromQuota;
use crate::clock::nanos_to_duration;
use crate::quota::{Quota, QuotaError};
use crate::word::{STATE_END, WordAlgorithm};
use std::num::NonZeroU64;
use std::time::Duration;

/// GCRA's parameters and the meaning of its state word, fixed per quota.
///
/// ```text
///  63                                                    0
/// +-------------------------------------------------------+
/// | theoretical arrival time (TAT), ns since the epoch     |
/// +-------------------------------------------------------+
/// ```
///
/// The word is one instant: the *theoretical arrival time*, when the key's bucket
/// would be full again if nothing more were admitted. At a reading `t` the key owes
/// `debt = max(0, TAT − t)` nanoseconds, and holds `capacity − debt / interval`
/// tokens, fractions included — a token bucket refilled continuously. An admitted
/// cost `k` moves TAT to `max(TAT, t) + k × interval`.
///
/// TAT can lie up to one full refill (`capacity × interval`) past the reading after
/// an admission, and up to the debt cap's refill further after a settle that charged
/// beyond what the key had ([`Settlement`](crate::Settlement): the key then owes,
/// `TAT − t > capacity × interval`). The debt cap is one capacity, or less where the
/// full refill exceeds 2^61 ns: whole intervals up to `2^62 ns − capacity × interval`,
/// so that the two refills together stay within 2^62 ns. The limiter's time ends that
/// long before the word's: readings later than `end = STATE_END − 1 − full refill −
/// debt refill` count as `end` (so a denial whose wait would end after `end` waits
/// forever, `Duration::MAX`), and TAT stays below [`STATE_END`] (just under 2⁶³),
/// clear of the markers' top bit ([`crate::word`]). [`GcraRules::new`] refuses quotas
/// whose full refill exceeds 2^62 ns (146 years), so the limiter is exact for at least
/// 146 years after its creation.
///
/// A TAT at or before the reading means a full bucket, so every new key starts as the
/// constant word 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GcraRules {
    capacity: u64,
    interval: NonZeroU64,
    /// `capacity × interval`: the debt of an empty bucket, and the burst tolerance.
    full_refill: u64,
    /// `debt_cap × interval`: how far past an empty bucket's TAT a settle may push it,
    /// the debt cap being one capacity unless the full refill exceeds 2^61 ns (see
    /// the type's documentation).
    debt_refill: u64,
    /// The last instant the limiter tells apart:
    /// `STATE_END − 1 − full_refill − debt_refill`.
    end: u64,
}

const REQUIREMENT: &str = "capacity × refill interval (the time an empty bucket takes to \
    refill) must be at most 2^62 ns (146 years), so that every theoretical arrival time \
    stays within the state word's range for at least 146 years";

impl GcraRules {
    /// The layout for `quota`.
    ///
    /// # Errors
    /// [`QuotaError::Unsupported`] when `capacity × refill_every` exceeds 2^62 ns.
    pub fn new(quota: &Quota) -> Result<Self, QuotaError> {
        let capacity = u64::from(quota.capacity());
        let interval = quota.interval_nanos();
        match capacity.checked_mul(interval.get()) {
            Some(full_refill) if full_refill <= 1 << 62 => {
                // One capacity, or the whole intervals that keep both refills within
                // 2^62 ns (`full_refill` at most 2^62: no wrap).
                let debt_cap = capacity.min(((1 << 62) - full_refill) / interval);
                let debt_refill = debt_cap * interval.get();
                Ok(Self {
                    capacity,
                    interval,
                    full_refill,
                    debt_refill,
                    // At least `2^63 − 3 − 2^62`: no wrap.
                    end: STATE_END - 1 - full_refill - debt_refill,
                })
            }
            _ => Err(QuotaError::Unsupported {
                algorithm: "Gcra",
                capacity: quota.capacity(),
                refill_every: quota.refill_every(),
                requirement: REQUIREMENT,
            }),
        }
    }

    /// The last instant this limiter tells apart; later readings count as it.
    #[cfg(any(test, turnstile_loom))]
    pub const fn end(&self) -> u64 {
        self.end
    }

    /// The emission interval: nanoseconds per token, for models.
    #[cfg(turnstile_loom)]
    pub const fn interval(&self) -> u64 {
        self.interval.get()
    }

    /// Whole tokens at reading `t` (already clamped to `end`) for a key whose TAT is
    /// `tat`. A reading before the key's last admission sees the refill run backwards
    /// (there is no record of when that was), possibly below zero: it counts as none.
    #[inline]
    fn tokens(&self, tat: u64, t: u64) -> u64 {
        let debt = tat.saturating_sub(t).min(self.full_refill);
        (self.full_refill - debt) / self.interval
    }
}

/// Refuses the quotas [`new`](GcraRules::new) names: building fails on those.
impl RulesFromQuota for GcraRules {
    fn from_quota(quota: &Quota) -> Result<Self, QuotaError> {
        Self::new(quota)
    }
}

impl WordAlgorithm for GcraRules {
    /// The word of every new key: TAT 0, a full bucket at every reading.
    #[inline]
    fn fresh(&self) -> u64 {
        0
    }

    /// One request for `cost` at `now`: the new TAT and the decision.
    ///
    /// Admitted iff the key holds at least `cost` tokens, i.e. `max(TAT, t) + cost ×
    /// interval <= t + capacity × interval` (so a key in debt, whose TAT lies past
    /// that for every cost, is denied even a cost of 0). Only an admitted request with
    /// a cost changes the word; a denial, a zero cost or a cost above the capacity
    /// returns `word` itself, so callers write nothing.
    #[inline]
    fn acquire(&self, word: u64, now: u64, cost: u32) -> (u64, Decision) {
        let t = now.min(self.end);
        let remaining = self.tokens(word, t);
        let cost = u64::from(cost);
        if cost > self.capacity {
            let decision = Decision::ExceedsCapacity {
                remaining: remaining as u32,
                capacity: self.capacity as u32,
            };
            return (word, decision);
        }
        if cost > remaining {
            let decision = Decision::Denied {
                remaining: remaining as u32,
                retry_after: wait(self, word, t, cost),
            };
            return (word, decision);
        }
        if cost == 0 {
            // Allowed unless the key owes: its arrival time past the reading by more
            // than the burst (`full_refill`), where it has less than nothing.
            if owes(self, word, t) {
                let decision = Decision::Denied {
                    remaining: 0,
                    retry_after: wait(self, word, t, 0),
                };
                return (word, decision);
            }
            let decision = Decision::Allowed {
                remaining: remaining as u32,
            };
            return (word, decision);
        }
        let decision = Decision::Allowed {
            remaining: (remaining - cost) as u32,
        };
        // At most t + full_refill <= end + full_refill = STATE_END − 1: no overflow.
        (word.max(t) + cost * self.interval.get(), decision)
    }

    /// This module's `admit`: the same verdict and word, decided without dividing.
    #[inline(always)]
    fn admit(&self, word: u64, now: u64, cost: u32) -> Option<u64> {
        admit(self, word, now, cost)
    }

    /// Whole tokens `word` holds at `now`, without taking any.
    #[inline]
    fn available(&self, word: u64, now: u64) -> u32 {
        self.tokens(word, now.min(self.end)) as u32
    }

    /// `cost` tokens given back at `now`: the TAT moves `cost × interval` earlier, but
    /// never before the reading — a full bucket holds no more. The word to store, and
    /// the tokens given back: the intervals the TAT moved, a part of one (a bucket
    /// refilled to a fraction of a token short of full) counted as one.
    #[inline]
    fn give_back(&self, word: u64, now: u64, cost: u32) -> (u64, u32) {
        let t = now.min(self.end);
        if word <= t {
            return (word, 0);
        }
        // Saturating: a cost above the capacity refunds everything, however large.
        let new = word
            .saturating_sub(u64::from(cost).saturating_mul(self.interval.get()))
            .max(t);
        // At most `cost` intervals: a `u32`.
        (new, (word - new).div_ceil(self.interval.get()) as u32)
    }

    /// `extra` tokens taken at `now` whatever the key holds: the TAT moves `extra ×
    /// interval` later, to at most one full refill and the debt cap's refill past the
    /// reading, in whole tokens (see [`charged`]).
    #[inline]
    fn charge(&self, word: u64, now: u64, extra: u32) -> (u64, u32) {
        let t = now.min(self.end);
        charged(
            word,
            t,
            self.full_refill + self.debt_refill,
            self.interval,
            extra,
        )
    }

    /// The tokens owed at `now` beyond an empty bucket, a part of one counted as one.
    fn debt(&self, word: u64, now: u64) -> u32 {
        let t = now.min(self.end);
        let owed = word.saturating_sub(t).saturating_sub(self.full_refill);
        // At most the debt cap's refill at a reading no earlier than the settle's;
        // saturated for a reading that lags further.
        owed.div_ceil(self.interval.get()).min(u64::from(u32::MAX)) as u32
    }

    /// From the TAT on (if the clock's range reaches it): the bucket is full at every
    /// later reading, as a new key's (TAT 0) is, and an admission moves either TAT to
    /// the same reading plus the cost.
    fn forgettable_from(&self, word: u64) -> Option<u64> {
        (word <= self.end).then_some(word)
    }
}

/// A charge of `extra` tokens on the key whose TAT is `tat`, at reading `t`, where the
/// TAT may lie at most `most` ns past the reading: the TAT to store and the whole
/// tokens charged. A TAT before the reading (a full bucket) counts from the reading,
/// as an admission does; nothing charged leaves the word as it was.
#[inline]
const fn charged(tat: u64, t: u64, most: u64, interval: NonZeroU64, extra: u32) -> (u64, u32) {
    let from = if tat > t { tat } else { t };
    // `t + most ≤ end + full_refill + debt_refill = STATE_END − 1`: no overflow.
    let room = (t + most).saturating_sub(from) / interval.get();
    let extra = extra as u64;
    let charged = if extra < room { extra } else { room };
    if charged == 0 {
        (tat, 0)
    } else {
        // Within the room: below `STATE_END`. At most `extra`: a `u32`.
        (from + charged * interval.get(), charged as u32)
    }
}

/// [`acquire`](WordAlgorithm::acquire)'s verdict and word without its decision: the TAT
/// to store if a request for `cost` at `now` is allowed, `None` if it is not (denied,
/// or a cost above the capacity). For a caller that asks only whether
/// (`try_acquire`, keyed or direct, through [`WordAlgorithm::admit`]).
///
/// It compares instants, as governor's GCRA does: the TAT against the latest one at
/// which the key still holds `cost`, `t + (capacity − cost) × interval`, a bound that
/// depends on the reading alone. `acquire` counts whole tokens first, a division by
/// the interval that its comparison waits for. Under a stream of admissions the TAT
/// each check reads is the one the check before wrote, so what stands between the two
/// is one comparison, a maximum and an addition. The property tests hold it to
/// `acquire`, verdict and word, on every input.
#[inline]
pub fn admit(rules: &GcraRules, word: u64, now: u64, cost: u32) -> Option<u64> {
    let t = now.min(rules.end);
    let cost = u64::from(cost);
    if cost > rules.capacity {
        return None;
    }
    if cost == 0 {
        // Allowed, and changes nothing, unless the key owes.
        return (!owes(rules, word, t)).then_some(word);
    }
    // At most `capacity × interval = full_refill`: no overflow. The key holds `cost`
    // whole tokens iff it owes at most `full_refill − weight`; the bound is at most
    // `end + full_refill = STATE_END − 1`, and so is the new TAT.
    let weight = cost * rules.interval.get();
    let latest = t + (rules.full_refill - weight);
    if word > latest {
        return None;
    }
    Some(word.max(t) + weight)
}

/// Whether the key with TAT `tat` owes at reading `t` (already clamped to `end`): its
/// arrival time lies more than one full refill (the burst) past the reading, so it
/// holds less than nothing and even a cost of 0 is denied. A reading before the
/// key's last admission can see that too (it cannot be told from a debt). No
/// overflow: `t + full_refill ≤ end + full_refill < STATE_END`.
#[inline]
fn owes(rules: &GcraRules, tat: u64, t: u64) -> bool {
    tat > t + rules.full_refill
}

/// Exact time from reading `t` until a key with TAT `tat` holds `cost` tokens: when
/// its debt has fallen to `(capacity − cost) × interval` (for a cost of 0, when the
/// debt is repaid: one interval before a cost of 1 fits). A denial means that instant
/// is after `t`, so the wait is never zero. An instant past `end` never comes (later
/// readings count as `end`): `Duration::MAX`, never, as [`Decision::Denied`] says.
/// Out of line, to keep the admitting path short.
#[inline(never)]
fn wait(rules: &GcraRules, tat: u64, t: u64, cost: u64) -> Duration {
    let ready = tat - (rules.capacity - cost) * rules.interval.get();
    if ready > rules.end {
        // Found by the `quota` fuzz target: a TAT close to the end of the limiter's
        // time told a wait after which the key still held too little.
        return Duration::MAX;
    }
    nanos_to_duration(u128::from(ready - t))
}

#[cfg(all(test, not(turnstile_loom)))]
mod tests {
    use super::*;
    use crate::word::strategies::{any_quota, readings};
    use proptest::prelude::*;

    const MS: u64 = 1_000_000;

    proptest! {
        /// `forgettable_from` is the TAT, when the clock's range reaches it.
        #[test]
        fn forgettable_from_is_the_theoretical_arrival_time(
            quota in any_quota(), word in any::<u64>(), random in any::<u64>(),
        ) {
            let Ok(rules) = GcraRules::new(&quota) else { return Ok(()) };
            let from = rules.forgettable_from(word);
            for at in readings(from, random) {
                prop_assert_eq!(rules.forgettable(word, at), word <= at.min(rules.end));
            }
        }
    }

    proptest! {
        /// `admit` is `acquire`'s verdict and word, from any TAT requests and
        /// settles' charges leave (TATs in debt included), at any reading (lagging
        /// ones and the limiter's end included), for any cost (1 and 0 on a key in
        /// debt among them).
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
            let Ok(rules) = GcraRules::new(&quota) else { return Ok(()) };
            let word = earlier.iter().fold(rules.fresh(), |word, &(at, cost, charge)| {
                if charge {
                    rules.charge(word, at, cost).0
                } else {
                    rules.acquire(word, at, cost).0
                }
            });
            // Readings on and just around the instant the key holds `cost`.
            let owed = (rules.capacity.saturating_sub(u64::from(cost)))
                .saturating_mul(rules.interval.get());
            let ready = word.saturating_sub(owed);
            for at in [now, ready.saturating_add(near).saturating_sub(1), word] {
                let (new, decision) = rules.acquire(word, at, cost);
                prop_assert_eq!(
                    admit(&rules, word, at, cost),
                    decision.is_allowed().then_some(new),
                    "word {} at {} for {}", word, at, cost
                );
            }
        }
    }

    fn rules(capacity: u32, interval: Duration) -> GcraRules {
        GcraRules::new(&Quota::new(capacity, interval).unwrap()).unwrap()
    }

    #[test]
    fn a_refund_of_the_largest_cost_refills_the_key_without_overflowing() {
        let l = rules(2, Duration::from_secs(3600));
        let (word, _) = l.acquire(l.fresh(), 0, 2);
        let word = l.refund(word, 0, u32::MAX);
        assert_eq!(l.available(word, 0), 2);
    }

    #[test]
    fn tokens_accrue_continuously_one_per_interval() {
        let l = rules(3, Duration::from_millis(100));
        let (word, d) = l.acquire(l.fresh(), 1000 * MS, 3);
        assert_eq!(d, Decision::Allowed { remaining: 0 });
        assert_eq!(word, 1300 * MS);
        // One token exactly one interval after the drain, not at a grid point.
        assert_eq!(l.available(word, 1099 * MS), 0);
        assert_eq!(l.available(word, 1100 * MS), 1);
        assert_eq!(l.available(word, 1250 * MS), 2);
        assert_eq!(l.available(word, 5000 * MS), 3);
    }

    #[test]
    fn retry_after_is_exact_and_a_denial_changes_nothing() {
        let l = rules(3, Duration::from_millis(100));
        let (word, _) = l.acquire(l.fresh(), 1000 * MS, 3);
        let (same, d) = l.acquire(word, 1030 * MS, 2);
        assert_eq!(same, word);
        assert_eq!(
            d,
            Decision::Denied {
                remaining: 0,
                retry_after: Duration::from_millis(170)
            }
        );
        assert!(!l.acquire(word, 1200 * MS - 1, 2).1.is_allowed());
        let (word, d) = l.acquire(word, 1200 * MS, 2);
        assert_eq!(d, Decision::Allowed { remaining: 0 });
        assert_eq!(word, 1500 * MS); // TAT moves on from 1300 ms, not from the reading
    }

    #[test]
    fn a_reading_before_the_last_admission_owes_more_never_less() {
        let l = rules(2, Duration::from_millis(100));
        let (word, _) = l.acquire(l.fresh(), 1000 * MS, 2); // TAT 1200 ms
        // A lagging core reads 900 ms: it owes 300 ms, more than a full refill; it
        // counts as no tokens, without underflow, and waits the extra 100 ms.
        assert_eq!(l.available(word, 900 * MS), 0);
        let (same, d) = l.acquire(word, 900 * MS, 1);
        assert_eq!(same, word);
        assert_eq!(d.retry_after(), Some(Duration::from_millis(200)));
        assert_eq!(l.acquire(word, 900 * MS, 0).1.remaining(), 0);
    }

    #[test]
    fn costs_above_the_capacity_are_never_satisfiable() {
        let l = rules(2, Duration::from_millis(100));
        assert_eq!(
            l.acquire(l.fresh(), 0, 3),
            (
                l.fresh(),
                Decision::ExceedsCapacity {
                    remaining: 2,
                    capacity: 2
                }
            )
        );
    }

    #[test]
    fn the_limiter_ends_two_full_refills_before_the_clock() {
        let l = rules(4, Duration::from_millis(1));
        assert_eq!(l.end(), STATE_END - 1 - 8 * MS);
        let (word, d) = l.acquire(l.fresh(), u64::MAX, 4);
        assert!(d.is_allowed());
        assert_eq!(word, STATE_END - 1 - 4 * MS, "room for the debt cap");
        // The deepest debt reaches the last word below the markers, and no further.
        let (deepest, charged) = l.charge(word, u64::MAX, 9);
        assert_eq!((deepest, charged), (STATE_END - 1, 4));
        assert_eq!(l.charge(deepest, u64::MAX, 1), (deepest, 0));
        assert_eq!(l.debt(deepest, u64::MAX), 4);
        // Later readings count as the end: time stands still, nothing is gained.
        assert_eq!(l.available(word, u64::MAX), 0);
        // So a wait ending after the end never ends (this said 1 ms, after which
        // the key still held nothing, until the `quota` fuzz target caught it).
        let (_, d) = l.acquire(word, u64::MAX, 1);
        assert_eq!(d.retry_after(), Some(Duration::MAX));
    }

    #[test]
    fn a_wait_ending_at_the_end_is_exact_and_one_past_it_is_never() {
        let l = rules(4, Duration::from_millis(1));
        // Emptied one millisecond before the end: the first token is back at the end.
        let t = l.end() - MS;
        let (word, d) = l.acquire(l.fresh(), t, 4);
        assert!(d.is_allowed());
        let (_, d) = l.acquire(word, t, 1);
        assert_eq!(d.retry_after(), Some(Duration::from_millis(1)));
        let (_, d) = l.acquire(word, l.end(), 1);
        assert!(d.is_allowed(), "{d:?}");
        // Two tokens are due one millisecond after the end: never.
        let (_, d) = l.acquire(word, t, 2);
        assert_eq!(d.retry_after(), Some(Duration::MAX));
    }

    #[test]
    fn a_full_refill_beyond_2_pow_62_ns_is_refused_by_name() {
        let half = Duration::from_nanos(1 << 61);
        assert!(GcraRules::new(&Quota::new(2, half).unwrap()).is_ok());
        let err = GcraRules::new(&Quota::new(3, half).unwrap()).unwrap_err();
        assert!(matches!(
            err,
            QuotaError::Unsupported {
                algorithm: "Gcra",
                capacity: 3,
                ..
            }
        ));
        let most = Quota::new(u32::MAX, Duration::from_nanos(u64::MAX)).unwrap();
        assert!(GcraRules::new(&most).is_err());
    }
}
