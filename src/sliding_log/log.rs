//! One key's sliding log and its step function.
//!
//! The log is plain data, stepped under the key's lock: [`Log::acquire`] is a
//! function of the log, the reading and the cost alone, which the property tests
//! check against a model that keeps every admitted request forever.

use crate::Decision;
use crate::clock::nanos_to_duration;
use crate::quota::Quota;
use crate::window::Window;

/// What every key's log is checked against: at most `limit` in any `window`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlidingLogRules {
    limit: u64,
    /// The most a key can owe, in entries past the limit: one limit, or less where
    /// the limit and it would pass `u32::MAX` (see [`log_debt_cap`]).
    debt_cap: u64,
    window: Window,
    /// The window when it fits a `u64`, for the expiry test on the hot path; `None`
    /// when it is longer than the clock's range, so nothing ever expires.
    window_nanos: Option<u64>,
}

impl SlidingLogRules {
    /// The rules of `quota`: `limit = capacity`, `window = capacity × refill_every`.
    pub(crate) fn new(quota: &Quota) -> Self {
        let window = Window::of(quota);
        Self {
            limit: u64::from(quota.capacity()),
            debt_cap: log_debt_cap(quota.capacity()),
            window,
            window_nanos: u64::try_from(window.len()).ok(),
        }
    }
}

/// The debt cap of a log of `limit`: one limit, but at most `u32::MAX − limit`, so
/// that a log in debt holds at most `u32::MAX` entries and its `u32` length and
/// slot numbers never overflow. A limit above 2^31 owes less than a limit (a limit
/// of `u32::MAX`, nothing): the rest of a charge is reported forgiven.
const fn log_debt_cap(limit: u32) -> u64 {
    let limit = limit as u64;
    // No underflow: `limit ≤ u32::MAX`.
    let room = u32::MAX as u64 - limit;
    if limit < room { limit } else { room }
}

/// The admitted requests of one key still in its window, oldest first: one timestamp
/// (nanoseconds since the epoch) per unit of cost, in a ring buffer.
///
/// The ring holds at most `limit` timestamps, and its allocation never exceeds
/// `limit` slots: it starts empty, grows by doubling (from 4 slots) while the
/// admitted requests still in the window need more room, is capped at `limit`, and
/// keeps its largest size. A key in debt (a settle charged it beyond the limit:
/// [`Settlement`](crate::Settlement)) holds the extra entries too, at the settle's
/// reading, up to the debt cap of one limit: at most `2 × limit` timestamps and
/// slots (and at most `u32::MAX`: [`log_debt_cap`]).
///
/// Only admitted requests with a cost change the log. They first drop the entries
/// that have left the window at their reading, which later decisions cannot tell
/// apart from keeping them: every later reading counts as at least that one (see
/// [`Log::acquire`]), when those entries have left already.
#[derive(Clone, Debug, Default)]
pub struct Log {
    slots: Box<[u64]>,
    /// The slot of the oldest entry.
    head: u32,
    /// Entries in the ring.
    len: u32,
    /// The latest reading an admission was recorded at (0 before any). Kept apart
    /// from the entries, which expire and can be refunded, so that a lagging reading
    /// counts as no time elapsed since the key's last admission whatever the ring
    /// holds.
    newest: u64,
    /// Whether requests may still change the log.
    pub(crate) status: Status,
}

/// Whether a log is in use, or frozen for good.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Status {
    /// In use.
    #[default]
    Live,
    /// The key is being forgotten: no request may change this log any more.
    Retired,
    /// The key is moving to a new quota: its entries went to the mover.
    Moved,
    /// The log was relocated: it keeps its entries, frozen, for whoever copies them to
    /// the key's new place.
    Relocated,
}

impl Log {
    /// An empty log, allocating nothing.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Slots allocated.
    #[cfg(all(test, not(turnstile_loom)))]
    pub(crate) fn allocated(&self) -> usize {
        self.slots.len()
    }

    /// The slot of the `i`-th oldest entry.
    #[inline]
    fn slot(&self, i: u32) -> usize {
        let slot = self.head as usize + i as usize;
        if slot >= self.slots.len() {
            slot - self.slots.len()
        } else {
            slot
        }
    }

    /// The `i`-th oldest entry.
    #[inline]
    fn entry(&self, i: u32) -> u64 {
        self.slots[self.slot(i)]
    }

    /// The oldest entries, then the rest (the ring's two contiguous runs).
    #[inline]
    fn runs(&self) -> (&[u64], &[u64]) {
        let head = self.head as usize;
        let len = self.len as usize;
        let first = len.min(self.slots.len() - head);
        (&self.slots[head..head + first], &self.slots[..len - first])
    }

    /// The reading a request at `now` is decided at: a reading older than the key's
    /// latest admission (another core's clock slightly behind) counts as no time
    /// elapsed.
    #[inline]
    fn reading(&self, now: u64) -> u64 {
        now.max(self.newest)
    }

    /// How many of the oldest entries have left the window at reading `t`: an entry
    /// at `s` counts while `t − s < window`.
    #[inline]
    fn expired(&self, rules: &SlidingLogRules, t: u64) -> u32 {
        let Some(last_expired) = rules.window_nanos.and_then(|w| t.checked_sub(w)) else {
            return 0;
        };
        let (older, newer) = self.runs();
        let in_older = older.partition_point(|&s| s <= last_expired);
        let expired = if in_older < older.len() {
            in_older
        } else {
            in_older + newer.partition_point(|&s| s <= last_expired)
        };
        expired as u32
    }

    /// One request for `cost` at `now`, all or nothing: admitted iff the entries
    /// still in the window plus `cost` are at most the limit (so a key in debt is
    /// denied even a cost of 0), recording `cost` timestamps. A denial changes
    /// nothing; its `retry_after` is the exact wait until enough entries have left.
    pub(crate) fn acquire(&mut self, rules: &SlidingLogRules, now: u64, cost: u32) -> Decision {
        let t = self.reading(now);
        let expired = self.expired(rules, t);
        let live = u64::from(self.len - expired);
        // A key in debt holds more than the limit: nothing remains.
        let remaining = rules.limit.saturating_sub(live);
        let cost = u64::from(cost);
        if cost > rules.limit {
            return Decision::ExceedsCapacity {
                remaining: remaining as u32,
                capacity: rules.limit as u32,
            };
        }
        // Allowed iff the live entries and the cost fit the limit: a key in debt (more
        // live entries than the limit) is denied even a cost of 0.
        if live + cost > rules.limit {
            // Admitted once the oldest `live + cost − limit` entries have left (at most
            // `live`, as `cost ≤ limit`): when the last of them does, one window after
            // it. For a cost of 0, when the debt has left.
            let last_to_leave = self.entry(expired + (live + cost - rules.limit) as u32 - 1);
            let leaves_at = u128::from(last_to_leave) + rules.window.len();
            return Decision::Denied {
                remaining: remaining as u32,
                retry_after: nanos_to_duration(leaves_at - u128::from(now)),
            };
        }
        if cost > 0 {
            self.drop_oldest(expired);
            self.push(t, cost as u32, rules.limit);
        }
        Decision::Allowed {
            remaining: (remaining - cost) as u32,
        }
    }

    /// What the key can still admit at `now`, without taking any.
    pub(crate) fn available(&self, rules: &SlidingLogRules, now: u64) -> u32 {
        let t = self.reading(now);
        (rules
            .limit
            .saturating_sub(u64::from(self.len - self.expired(rules, t)))) as u32
    }

    /// The entries past the limit still in the window at `now`: what the key owes.
    pub(crate) fn debt(&self, rules: &SlidingLogRules, now: u64) -> u32 {
        let t = self.reading(now);
        // At most the debt cap, one limit: a `u32`.
        u64::from(self.len - self.expired(rules, t)).saturating_sub(rules.limit) as u32
    }

    /// `extra` entries recorded at `now` (the reading, as an admission's) whatever
    /// the window has left, up to the limit and the debt cap: how many were
    /// recorded. They count against the key for one window from the reading, as
    /// admissions there would.
    pub(crate) fn charge(&mut self, rules: &SlidingLogRules, now: u64, extra: u32) -> u32 {
        let t = self.reading(now);
        let expired = self.expired(rules, t);
        let most = rules.limit + rules.debt_cap;
        let room = most.saturating_sub(u64::from(self.len - expired));
        // At most `extra`: a `u32`.
        let charged = u64::from(extra).min(room) as u32;
        if charged > 0 {
            self.drop_oldest(expired);
            self.push(t, charged, most);
        }
        charged
    }

    /// Gives back `cost` admissions at `now` by dropping that many of the oldest
    /// entries still in the window. The refunded request's own entries may be newer,
    /// but dropping older ones instead leaves every kept entry at least as late as
    /// the true one it stands for, so the log never admits more than the exact one.
    /// Entries that have left the window stay: they are history a lagging reading
    /// may still count (see [`Log::reading`]).
    /// How many were dropped: what the key got back (a debt repaid first).
    pub(crate) fn refund(&mut self, rules: &SlidingLogRules, now: u64, cost: u32) -> u32 {
        let expired = self.expired(rules, self.reading(now));
        let dropped = cost.min(self.len - expired);
        // Close the gap: every later entry moves `dropped` places towards the oldest.
        for i in expired..self.len - dropped {
            let (to, from) = (self.slot(i), self.slot(i + dropped));
            self.slots[to] = self.slots[from];
        }
        self.len -= dropped;
        dropped
    }

    /// The latest reading an admission was recorded at: every earlier reading counts
    /// as this one.
    pub(crate) fn newest(&self) -> u64 {
        self.newest
    }

    /// The earliest instant at which the log holds nothing that counts then or later
    /// and no admission after it — from then on it answers as a new key's does — or
    /// `None` if no instant in the clock's range is one.
    pub(crate) fn forgettable_from(&self, rules: &SlidingLogRules) -> Option<u64> {
        let (older, newer) = self.runs();
        match newer.last().or(older.last()) {
            None => Some(self.newest),
            // Every entry has left the window once the youngest has (`expired`).
            Some(&youngest) => rules
                .window_nanos
                .and_then(|window| youngest.checked_add(window))
                .map(|gone| gone.max(self.newest)),
        }
    }

    fn drop_oldest(&mut self, n: u32) {
        if n == 0 {
            return;
        }
        let head = self.head as usize + n as usize;
        let cap = self.slots.len();
        self.head = (if head >= cap { head - cap } else { head }) as u32;
        self.len -= n;
    }

    /// Appends `cost` copies of `t`, growing the ring if needed, to at most `most`
    /// slots (the limit for an admission; the limit and the debt cap for a charge).
    /// The caller has checked that `len + cost <= most`.
    fn push(&mut self, t: u64, cost: u32, most: u64) {
        let needed = self.len as usize + cost as usize;
        if needed > self.slots.len() {
            let doubled = (2 * self.slots.len()).max(4);
            self.grow(needed.max(doubled).min(most as usize));
        }
        let cap = self.slots.len();
        self.newest = t;
        for i in 0..cost as usize {
            let slot = self.head as usize + self.len as usize + i;
            self.slots[if slot >= cap { slot - cap } else { slot }] = t;
        }
        self.len += cost;
    }

    /// Moves the entries, oldest first, into a new ring of `slots` slots.
    fn grow(&mut self, slots: usize) {
        let mut grown = Vec::with_capacity(slots);
        let (older, newer) = self.runs();
        grown.extend_from_slice(older);
        grown.extend_from_slice(newer);
        grown.resize(slots, 0);
        self.slots = grown.into_boxed_slice();
        self.head = 0;
    }
}

#[cfg(all(test, not(turnstile_loom)))]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::time::Duration;

    const MS: u64 = 1_000_000;

    /// 3 per 300 ms.
    fn three_per_300ms() -> SlidingLogRules {
        SlidingLogRules::new(&Quota::new(3, Duration::from_millis(100)).unwrap())
    }

    /// The debt cap keeps the entries a log may hold, the limit and the debt cap,
    /// within its `u32` length: one limit up to 2^31 − 1, less above, none at
    /// `u32::MAX`.
    #[test]
    fn a_log_in_debt_never_holds_more_than_u32_max_entries() {
        let rules_of =
            |limit| SlidingLogRules::new(&Quota::new(limit, Duration::from_secs(1)).unwrap());
        for (limit, cap) in [
            (3, 3),
            ((1 << 31) - 1, (1 << 31) - 1),
            (1 << 31, (1 << 31) - 1),
            ((1 << 31) + 10, (1 << 31) - 11),
            (u32::MAX, 0),
        ] {
            let rules = rules_of(limit);
            assert_eq!(rules.debt_cap, cap, "limit {limit}");
            assert!(rules.limit + rules.debt_cap <= u64::from(u32::MAX));
        }
    }

    #[test]
    fn a_request_counts_for_exactly_one_window() {
        let rules = three_per_300ms();
        let mut log = Log::new();
        assert!(log.acquire(&rules, 10 * MS, 1).is_allowed());
        assert!(log.acquire(&rules, 20 * MS, 2).is_allowed());
        let d = log.acquire(&rules, 309 * MS, 1);
        assert_eq!(d.retry_after(), Some(Duration::from_nanos(MS)));
        assert!(log.acquire(&rules, 310 * MS, 1).is_allowed());
        // 20 ms counts twice, until 320 ms.
        let d = log.acquire(&rules, 310 * MS, 2);
        assert_eq!(d.retry_after(), Some(Duration::from_millis(10)));
        assert_eq!(log.available(&rules, 320 * MS), 2);
    }

    /// A charge records entries at its reading, past the limit up to twice it (the
    /// debt cap), growing the ring to at most twice the limit; they count for one
    /// window from the reading, and a refund drops the oldest live entries first.
    #[test]
    fn a_charge_is_entries_at_its_reading_for_one_window() {
        let rules = three_per_300ms();
        let mut log = Log::new();
        assert!(log.acquire(&rules, 10 * MS, 2).is_allowed());
        assert_eq!(
            log.charge(&rules, 50 * MS, 10),
            4,
            "2 + 4 = twice the limit"
        );
        assert_eq!(log.len, 6);
        assert!(log.allocated() <= 6);
        assert_eq!(
            (log.available(&rules, 50 * MS), log.debt(&rules, 50 * MS)),
            (0, 3)
        );
        // The oldest two leave at 310 ms; the charged four at 350 ms.
        let d = log.acquire(&rules, 100 * MS, 1);
        assert_eq!(d.retry_after(), Some(Duration::from_millis(250)));
        assert_eq!(log.debt(&rules, 310 * MS), 1);
        assert_eq!(log.available(&rules, 350 * MS), 3);
        // Given back: the oldest live first, the debt repaid before anything.
        assert_eq!(log.refund(&rules, 60 * MS, 2), 2);
        assert_eq!(log.debt(&rules, 60 * MS), 1);
    }

    #[test]
    fn a_reading_older_than_the_newest_entry_counts_as_no_time_elapsed() {
        let rules = three_per_300ms();
        let mut log = Log::new();
        assert!(log.acquire(&rules, 500 * MS, 3).is_allowed());
        // Another core reads 100 ms: nothing underflows; the entries from 500 ms
        // still count, and the wait runs from the reading.
        assert_eq!(log.available(&rules, 100 * MS), 0);
        let d = log.acquire(&rules, 100 * MS, 1);
        assert_eq!(d.retry_after(), Some(Duration::from_millis(700)));
    }

    #[test]
    fn the_ring_wraps_and_keeps_time_order() {
        let rules = three_per_300ms();
        let mut log = Log::new();
        for step in 0..20u64 {
            let now = step * 100 * MS;
            assert!(log.acquire(&rules, now, 1).is_allowed(), "{step}");
            // This one and the two before it are in the window (300 ms ago is not).
            assert_eq!(log.available(&rules, now), 2u32.saturating_sub(step as u32));
        }
        assert_eq!(log.allocated(), 3);
    }

    proptest! {
        #[test]
        fn the_log_never_holds_or_allocates_more_than_the_limit(
            limit in 1u32..40,
            steps in prop::collection::vec((0u64..3_000, 0u32..45), 1..300),
        ) {
            let rules = SlidingLogRules::new(&Quota::new(limit, Duration::from_micros(10)).unwrap());
            let mut log = Log::new();
            let mut now = 0;
            for (by, cost) in steps {
                now += by;
                let _ = log.acquire(&rules, now, cost);
                prop_assert!(log.len <= limit);
                prop_assert!(log.allocated() <= limit as usize);
                // Time order, so the oldest entries leave first.
                let (older, newer) = log.runs();
                let entries: Vec<u64> = older.iter().chain(newer).copied().collect();
                prop_assert!(entries.windows(2).all(|w| w[0] <= w[1]));
            }
        }

        /// `forgettable_from` is the first instant with no admission after it and no
        /// entry still in the window, after any mix of requests, refunds and lagging
        /// readings.
        #[test]
        fn forgettable_from_is_the_first_instant_the_log_is_as_new(
            limit in 1u32..10,
            steps in prop::collection::vec((0u64..3_000, 0u32..12, any::<bool>()), 1..60),
            probe in 0u64..200_000,
        ) {
            let rules = SlidingLogRules::new(&Quota::new(limit, Duration::from_micros(10)).unwrap());
            let mut log = Log::new();
            let mut now = 0u64;
            for (by, cost, refund) in steps {
                // Now and then a reading behind the last one (another core's clock).
                now = if by % 7 == 0 { now.saturating_sub(by) } else { now + by };
                if refund {
                    log.refund(&rules, now, cost);
                } else {
                    let _ = log.acquire(&rules, now, cost);
                }
                let from = log.forgettable_from(&rules);
                for at in [probe, from.map_or(probe, |f| f.saturating_sub(1)), from.unwrap_or(probe)] {
                    let as_new = log.newest <= at && log.expired(&rules, at) == log.len;
                    prop_assert_eq!(from.is_some_and(|from| from <= at), as_new);
                }
            }
        }
    }
}
