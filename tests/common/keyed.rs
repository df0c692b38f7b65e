//! The plain reference models of the keyed limiters: one key's state under one quota
//! is a [`KeyModel`] (one per algorithm: the fixed window, sliding log, sliding window
//! counter and GCRA tests compare their limiters with these, through
//! [`Keyed::plain`]); [`Keyed`] adds the keys, the resolver their quotas come from,
//! reconfiguration, and the watermark that forgetting raises. It never forgets a key.
//!
//! The rules, as the semantics contract states them:
//! - Every request's reading is raised to the watermark; `evict_idle()` at reading
//!   `now` raises the watermark to `now − margin`. Forgetting changes nothing else.
//! - A key's quota comes from the resolver current when its state is created (its
//!   first acquire). A peek of an unknown key answers the full allowance of its
//!   current quota and creates nothing; a refund on an unknown key does nothing.
//! - Reconfiguring changes nothing at once. At a key's next acquire, peek or refund
//!   (at reading `r`), the key moves straight to the quota the current resolver gives
//!   it: to an equal quota, by keeping its state exactly as it is; to another, by
//!   taking what it has left under its old quota at `r' = max(r, its own latest
//!   time)` — a brand-new key if that is the whole old allowance, otherwise a fresh
//!   state under the new quota from which all but that much (at most the new
//!   allowance) is taken at `r'`, and then whatever the key owed at `r'` (its debt,
//!   below) is charged at `r'` too, up to the new debt cap. Then the operation
//!   proceeds at `r`.
//! - A settle of `estimate` at `actual` (at reading `r`, after the move): equal, it
//!   does nothing (and moves nothing); below, the token bucket and GCRA give
//!   `estimate − actual` back as a refund does, saying how much the key got back (a
//!   key with no state: nothing), and the fixed window, the sliding window counter
//!   and the sliding log give nothing back ([`KeyModel::REFUNDS_ON_SETTLE`]);
//!   above, it charges `actual − estimate` even beyond what the key has left, up to
//!   the debt cap (one capacity), creating a new key's state first. A key in debt
//!   has less than nothing: every request, a cost of 0 included, is denied until
//!   refill has repaid the debt and brought the cost.

use std::collections::HashMap;
use std::time::Duration;
use turnstile::{Decision, Quota, Settlement};

/// `nanos` as a `Duration`: a reading far behind a key's own time can owe a wait
/// beyond u64 nanoseconds, and one beyond `Duration`'s range (a window of `u32::MAX`
/// intervals of centuries) is `Duration::MAX`.
fn wait(nanos: u128) -> Duration {
    const NANOS_PER_SEC: u128 = 1_000_000_000;
    match u64::try_from(nanos / NANOS_PER_SEC) {
        Ok(secs) => Duration::new(secs, (nanos % NANOS_PER_SEC) as u32),
        Err(_) => Duration::MAX,
    }
}

/// One key's state under one quota, for one algorithm.
pub trait KeyModel: Clone + std::fmt::Debug {
    /// The state of a key seen for the first time.
    fn new(quota: Quota) -> Self;

    /// One request for `cost` at reading `now` (ns since the epoch).
    fn acquire(&mut self, now: u64, cost: u32) -> Decision;

    /// What the key has left at `now`.
    fn peek(&self, now: u64) -> u32;

    /// `cost` given back at `now`.
    fn refund(&mut self, now: u64, cost: u32) {
        self.give_back(now, cost);
    }

    /// `cost` given back at `now`: how much the key got back.
    fn give_back(&mut self, now: u64, cost: u32) -> u32;

    /// Whether a settle below the estimate gives the difference back
    /// ([`give_back`](Self::give_back)); the windows and the log give nothing back
    /// on settle: their state cannot tell which window (which entries) counted the
    /// estimate.
    const REFUNDS_ON_SETTLE: bool = true;

    /// `extra` taken at `now` whatever the key has left, up to its debt cap: how much
    /// was taken.
    fn charge(&mut self, now: u64, extra: u32) -> u32;

    /// What the key owes at `now` past having nothing left. Only for the algorithms
    /// whose quotas can change.
    fn debt(&self, now: u64) -> u32 {
        unreachable!("{self:?} at {now}: cannot be reconfigured")
    }

    /// When a request at `now` would count if admitted, in the terms of the
    /// algorithm's limit (a grid point, a window, an instant): see [`Self::check`].
    fn counts_at(&self, now: u64) -> u128;

    /// Whether `admitted` — `(counts_at, cost)` of requests admitted under `quota`,
    /// with no refund and no change of quota in between — respects the algorithm's
    /// limit. Anything admitted before them only leaves less room, so the limit holds
    /// for them alone.
    fn check(quota: Quota, admitted: &Admitted) -> Result<(), String>;

    /// The key's own latest time: every reading older than it answers as it does.
    /// Only for the algorithms whose quotas can change.
    fn latest(&self) -> u64 {
        unreachable!("{self:?} cannot be reconfigured")
    }

    /// A fresh state under `quota` from which `taken` is taken at `at`. Only for the
    /// algorithms whose quotas can change.
    fn carrying(quota: Quota, at: u64, taken: u32) -> Self {
        unreachable!("{quota:?}, {at}, {taken}: cannot be reconfigured")
    }
}

/// `(counts_at, cost)` of admitted requests.
pub type Admitted = [(u128, u128)];

/// The quota each key gets: one for even keys, one for odd keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resolver {
    pub even: Quota,
    pub odd: Quota,
}

impl Resolver {
    /// Every key gets `quota`.
    pub fn every(quota: Quota) -> Self {
        Self {
            even: quota,
            odd: quota,
        }
    }

    pub fn of(&self, key: u64) -> Quota {
        if key.is_multiple_of(2) {
            self.even
        } else {
            self.odd
        }
    }
}

/// A key: its quota, its state under it, and what it admitted since its quota last
/// changed or it last got a refund (for the limit check).
#[derive(Clone, Debug)]
struct Key<S> {
    quota: Quota,
    state: S,
    admitted: Vec<(u128, u128)>,
}

impl<S: KeyModel> Key<S> {
    fn new(quota: Quota) -> Self {
        Self {
            quota,
            state: S::new(quota),
            admitted: vec![],
        }
    }
}

/// What a key admitted under one quota, with no refund in between.
#[derive(Clone, Debug)]
struct Stretch {
    key: u64,
    quota: Quota,
    admitted: Vec<(u128, u128)>,
}

/// Keys, each under its own quota, with reconfiguration and the watermark.
#[derive(Clone, Debug)]
pub struct Keyed<S> {
    resolver: Resolver,
    margin: u64,
    watermark: u64,
    keys: HashMap<u64, Key<S>>,
    /// Finished stretches of admissions (a quota change or a refund ended them); the
    /// ones still open are in `keys`.
    stretches: Vec<Stretch>,
}

impl<S: KeyModel> Keyed<S> {
    /// Every key under `quota`, never reconfigured, no margin: the plain model of one
    /// algorithm that the algorithm's own tests compare against.
    pub fn plain(quota: Quota) -> Self {
        Self::new(Resolver::every(quota), Duration::ZERO)
    }

    /// Every key under `resolver` until reconfigured; forgetting with `margin`.
    pub fn new(resolver: Resolver, margin: Duration) -> Self {
        Self {
            resolver,
            margin: u64::try_from(margin.as_nanos()).expect("a margin within u64 ns"),
            watermark: 0,
            keys: HashMap::new(),
            stretches: vec![],
        }
    }

    /// `now` raised to the watermark.
    fn reading(&self, now: u64) -> u64 {
        now.max(self.watermark)
    }

    /// Ends `key`'s current stretch of admissions.
    fn end_stretch(&mut self, key: u64) {
        if let Some(k) = self.keys.get_mut(&key) {
            let admitted = std::mem::take(&mut k.admitted);
            self.stretches.push(Stretch {
                key,
                quota: k.quota,
                admitted,
            });
        }
    }

    /// Moves `key`, if it has state, to the quota the current resolver gives it, at
    /// reading `r`.
    fn move_to_current_quota(&mut self, key: u64, r: u64) {
        let quota = self.resolver.of(key);
        let Some(k) = self.keys.get(&key) else {
            return;
        };
        if k.quota == quota {
            return; // the same quota: the state stays exactly as it is
        }
        let at = r.max(k.state.latest());
        let left = k.state.peek(at);
        let owed = k.state.debt(at);
        let whole = k.quota.capacity();
        self.end_stretch(key);
        if left == whole {
            self.keys.remove(&key); // as good as new: a brand-new key from now on
        } else {
            let kept = left.min(quota.capacity());
            let mut state = S::carrying(quota, at, quota.capacity() - kept);
            state.charge(at, owed);
            let admitted = vec![];
            self.keys.insert(
                key,
                Key {
                    quota,
                    state,
                    admitted,
                },
            );
        }
    }

    pub fn acquire(&mut self, key: u64, now: u64, cost: u32) -> Decision {
        let r = self.reading(now);
        self.move_to_current_quota(key, r);
        let quota = self.resolver.of(key);
        let k = self.keys.entry(key).or_insert_with(|| Key::new(quota));
        let counts_at = k.state.counts_at(r);
        let decision = k.state.acquire(r, cost);
        if decision.is_allowed() && cost > 0 {
            k.admitted.push((counts_at, cost.into()));
        }
        decision
    }

    pub fn peek(&mut self, key: u64, now: u64) -> u32 {
        let r = self.reading(now);
        self.move_to_current_quota(key, r);
        match self.keys.get(&key) {
            Some(k) => k.state.peek(r),
            None => self.resolver.of(key).capacity(),
        }
    }

    pub fn refund(&mut self, key: u64, now: u64, cost: u32) {
        let r = self.reading(now);
        self.move_to_current_quota(key, r);
        self.end_stretch(key);
        if let Some(k) = self.keys.get_mut(&key) {
            k.state.refund(r, cost);
        }
    }

    /// A request that took `estimate` for `key` settled at `actual`, at `now`.
    pub fn settle(&mut self, key: u64, now: u64, estimate: u32, actual: u32) -> Settlement {
        if actual == estimate {
            return Settlement::default();
        }
        let r = self.reading(now);
        self.move_to_current_quota(key, r);
        if actual < estimate {
            if !S::REFUNDS_ON_SETTLE {
                // Nothing given back: the stretch of admissions goes on, and the
                // limit holds over it.
                return Settlement::default();
            }
            self.end_stretch(key);
            let refunded = match self.keys.get_mut(&key) {
                Some(k) => k.state.give_back(r, estimate - actual),
                None => 0,
            };
            return Settlement {
                refunded,
                ..Settlement::default()
            };
        }
        let extra = actual - estimate;
        let quota = self.resolver.of(key);
        let k = self.keys.entry(key).or_insert_with(|| Key::new(quota));
        let charged = k.state.charge(r, extra);
        Settlement {
            refunded: 0,
            charged,
            forgiven: extra - charged,
        }
    }

    /// Where keys' quotas come from now.
    pub fn resolver(&self) -> Resolver {
        self.resolver
    }

    /// From now on every key gets its quota from `resolver`.
    pub fn reconfigure(&mut self, resolver: Resolver) {
        self.resolver = resolver;
    }

    /// A sweep at reading `now`: it only raises the watermark.
    pub fn evict_idle(&mut self, now: u64) {
        self.watermark = self.watermark.max(now.saturating_sub(self.margin));
    }

    /// Every stretch of admissions, each under its quota, respects its algorithm's
    /// limit.
    pub fn check_limits(&self) -> Result<(), String> {
        let open = self
            .keys
            .iter()
            .map(|(&key, k)| (key, k.quota, &k.admitted));
        let done = self.stretches.iter().map(|s| (s.key, s.quota, &s.admitted));
        for (key, quota, admitted) in done.chain(open) {
            S::check(quota, admitted).map_err(|e| format!("key {key} under {quota:?}: {e}"))?;
        }
        Ok(())
    }
}

fn nanos(quota: Quota) -> u128 {
    quota.refill_every().as_nanos()
}

/// The token bucket of the design notes: the grid index at which the key's bucket is
/// full again, `full_at` (a new key's is 0: full at every reading). At a reading on
/// grid index `g` it holds `capacity − (full_at − g)` tokens, within `0..=capacity`;
/// a request it admits takes its tokens after those already spoken for, setting
/// `full_at = max(full_at, g) + cost`. A reading behind the key's latest write so
/// finds the tokens still to come by then missing: fewer, never more.
///
/// `g` is `now / interval`, read no further than `2^63 − 3 − 2 × capacity` (where a 1
/// or 2 ns grid stops: the state word keeps its top bit free, with room for a debt).
///
/// A settle's charge takes tokens after those spoken for, even past empty:
/// `full_at = max(full_at, g) + charged`, with `full_at − g` at most twice the
/// capacity (the debt cap is one capacity).
#[derive(Clone, Debug)]
pub struct Bucket {
    capacity: u128,
    interval: u128,
    last_index: u128,
    full_at: u128,
}

impl Bucket {
    /// The grid index of the reading `now`.
    fn index(&self, now: u64) -> u128 {
        (u128::from(now) / self.interval).min(self.last_index)
    }

    /// Tokens held at grid index `g`.
    fn tokens(&self, g: u128) -> u128 {
        self.capacity - self.full_at.saturating_sub(g).min(self.capacity)
    }
}

impl KeyModel for Bucket {
    fn new(quota: Quota) -> Self {
        let capacity = u128::from(quota.capacity());
        Self {
            capacity,
            interval: nanos(quota),
            last_index: (1 << 63) - 3 - 2 * capacity,
            full_at: 0,
        }
    }

    fn acquire(&mut self, now: u64, cost: u32) -> Decision {
        let g = self.index(now);
        let tokens = self.tokens(g);
        let cost = u128::from(cost);
        if cost > self.capacity {
            return Decision::ExceedsCapacity {
                remaining: tokens as u32,
                capacity: self.capacity as u32,
            };
        }
        // Allowed iff what is missing and the cost fit the capacity: a key in debt
        // (missing more than the capacity, or a reading behind its last refill) is
        // denied even a cost of 0.
        if self.full_at.saturating_sub(g) + cost <= self.capacity {
            self.full_at = self.full_at.max(g) + cost;
            Decision::Allowed {
                remaining: (tokens - cost) as u32,
            }
        } else {
            // Allowed at the first grid point where what is missing and the cost fit
            // the capacity; none comes past the grid's last point when it stops
            // before the clock's end, and such a wait is `Duration::MAX`: never.
            let ready = self.full_at + cost - self.capacity;
            let stops = self.last_index < u128::from(u64::MAX) / self.interval;
            let retry_after = if stops && ready > self.last_index {
                Duration::MAX
            } else {
                wait(ready * self.interval - u128::from(now))
            };
            Decision::Denied {
                remaining: tokens as u32,
                retry_after,
            }
        }
    }

    fn peek(&self, now: u64) -> u32 {
        self.tokens(self.index(now)) as u32
    }

    /// Tokens back into a bucket that is missing some, up to full at the reading; a
    /// full bucket is left as it is.
    fn give_back(&mut self, now: u64, cost: u32) -> u32 {
        let g = self.index(now);
        if self.full_at <= g {
            return 0;
        }
        let before = self.full_at;
        self.full_at = self.full_at.saturating_sub(u128::from(cost)).max(g);
        (before - self.full_at) as u32
    }

    fn charge(&mut self, now: u64, extra: u32) -> u32 {
        let g = self.index(now);
        let from = self.full_at.max(g);
        let charged = u128::from(extra).min((g + 2 * self.capacity).saturating_sub(from));
        if charged > 0 {
            self.full_at = from + charged;
        }
        charged as u32
    }

    fn debt(&self, now: u64) -> u32 {
        let missing = self.full_at.saturating_sub(self.index(now));
        missing.saturating_sub(self.capacity).min(u32::MAX.into()) as u32
    }

    /// The reading's grid index: an admission's tokens lie in `[g, g + capacity)`,
    /// after every earlier admission's, so admissions at grid indices within `[a, b]`
    /// hold at most `capacity + b − a` tokens.
    fn counts_at(&self, now: u64) -> u128 {
        self.index(now)
    }

    fn check(quota: Quota, admitted: &Admitted) -> Result<(), String> {
        span_bound(admitted, |a, b| u128::from(quota.capacity()) + b - a)
    }

    /// Twice the capacity's grid points before it is full: no request or settle
    /// stored its word earlier, and every reading up to then finds it empty.
    fn latest(&self) -> u64 {
        let at = self.full_at.saturating_sub(2 * self.capacity) * self.interval;
        u64::try_from(at).unwrap_or(u64::MAX)
    }

    fn carrying(quota: Quota, at: u64, taken: u32) -> Self {
        let mut bucket = Self::new(quota);
        bucket.full_at = bucket.index(at) + u128::from(taken);
        bucket
    }
}

/// Every `[a, b]` spanned by admissions holds at most `bound(a, b)` of them.
fn span_bound(admitted: &Admitted, bound: impl Fn(u128, u128) -> u128) -> Result<(), String> {
    let mut sorted = admitted.to_vec();
    sorted.sort_unstable();
    for (i, &(a, _)) in sorted.iter().enumerate() {
        let mut total = 0;
        for &(b, cost) in &sorted[i..] {
            total += cost;
            if total > bound(a, b) {
                return Err(format!("{total} admitted in [{a}, {b}]"));
            }
        }
    }
    Ok(())
}

/// The fixed window (as in tests/fixed_window.rs): the key's window and how much was
/// admitted in it. A new key is window 0, empty.
///
/// A reading's window is `now / window`, taken no further than the last window the
/// word's index holds: `2^(63 − bits(2 × limit + 2)) − 1`, at least 2⁶⁰ intervals in,
/// which only a quota with an interval of a few nanoseconds reaches; that window
/// never ends.
///
/// A settle's charge counts past the limit, up to twice it; what is past the limit
/// when the window ends is the next window's starting count.
#[derive(Clone, Debug)]
pub struct Window {
    limit: u128,
    window: u128,
    last: u128,
    index: u128,
    count: u128,
}

impl Window {
    /// The key's window and count at `now`: a later window starts empty, but for the
    /// next one, which starts with what the key's passed the limit by; an earlier
    /// reading sees the key's own window.
    fn at(&self, now: u64) -> (u128, u128) {
        let current = (u128::from(now) / self.window).min(self.last);
        if self.index >= current {
            (self.index, self.count)
        } else if current == self.index + 1 {
            (current, self.count.saturating_sub(self.limit))
        } else {
            (current, 0)
        }
    }
}

impl KeyModel for Window {
    /// A settle gives nothing back: the state cannot tell which window counted the
    /// estimate.
    const REFUNDS_ON_SETTLE: bool = false;

    fn new(quota: Quota) -> Self {
        let limit = u128::from(quota.capacity());
        let count_bits = 128 - (2 * limit + 2).leading_zeros();
        Self {
            limit,
            window: limit * nanos(quota),
            last: (1 << (63 - count_bits)) - 1,
            index: 0,
            count: 0,
        }
    }

    fn acquire(&mut self, now: u64, cost: u32) -> Decision {
        let (index, count) = self.at(now);
        let (cost, remaining) = (u128::from(cost), self.limit.saturating_sub(count) as u32);
        if cost > self.limit {
            Decision::ExceedsCapacity {
                remaining,
                capacity: self.limit as u32,
            }
        } else if count + cost > self.limit {
            // A key counting past the limit is denied even a cost of 0.
            // The last window the index holds never ends (when the clock would
            // reach a later one).
            // The next window starts with the debt; if the cost does not fit beside
            // it, the one after, empty.
            let next = if count.saturating_sub(self.limit) + cost <= self.limit {
                index + 1
            } else {
                index + 2
            };
            let clamped = self.last < u128::from(u64::MAX) / self.window;
            let retry_after = if clamped && next > self.last {
                Duration::MAX
            } else {
                wait(next * self.window - u128::from(now))
            };
            Decision::Denied {
                remaining,
                retry_after,
            }
        } else {
            if cost > 0 {
                (self.index, self.count) = (index, count + cost);
            }
            Decision::Allowed {
                remaining: (self.limit.saturating_sub(count) - cost) as u32,
            }
        }
    }

    fn peek(&self, now: u64) -> u32 {
        self.limit.saturating_sub(self.at(now).1) as u32
    }

    /// Admissions of the window seen at `now` given back, at most its count.
    fn give_back(&mut self, now: u64, cost: u32) -> u32 {
        let (index, count) = self.at(now);
        let back = count.min(cost.into());
        if back > 0 {
            (self.index, self.count) = (index, count - back);
        }
        back as u32
    }

    fn charge(&mut self, now: u64, extra: u32) -> u32 {
        let (index, count) = self.at(now);
        let charged = u128::from(extra).min((2 * self.limit).saturating_sub(count));
        if charged > 0 {
            (self.index, self.count) = (index, count + charged);
        }
        charged as u32
    }

    fn debt(&self, now: u64) -> u32 {
        self.at(now).1.saturating_sub(self.limit) as u32
    }

    /// The window the request counts in.
    fn counts_at(&self, now: u64) -> u128 {
        self.at(now).0
    }

    /// No window holds more than the limit.
    fn check(quota: Quota, admitted: &Admitted) -> Result<(), String> {
        per_window(u128::from(quota.capacity()), admitted)
    }

    fn latest(&self) -> u64 {
        (self.index * self.window) as u64
    }

    fn carrying(quota: Quota, at: u64, taken: u32) -> Self {
        let mut window = Self::new(quota);
        let index = (u128::from(at) / window.window).min(window.last);
        (window.index, window.count) = (index, taken.into());
        window
    }
}

/// No window (the first of each pair) holds more than `limit`.
fn per_window(limit: u128, admitted: &Admitted) -> Result<(), String> {
    let mut windows: HashMap<u128, u128> = HashMap::new();
    for &(window, cost) in admitted {
        *windows.entry(window).or_default() += cost;
    }
    match windows.into_iter().find(|&(_, total)| total > limit) {
        Some((window, total)) => Err(format!("{total} admitted in window {window}")),
        None => Ok(()),
    }
}

/// The sliding log (as in tests/sliding_log.rs): every admitted request, kept forever,
/// with the reading it was admitted at; a request at `s` counts while `t − window <
/// s`. A reading older than the key's newest admission counts as that admission.
/// A settle's charge is recorded as admissions at its reading, up to twice the limit
/// in the window.
#[derive(Clone, Debug)]
pub struct Log {
    limit: u128,
    window: u128,
    admitted: Vec<(u128, u128)>,
    newest: u128,
}

impl Log {
    fn reading(&self, now: u64) -> u128 {
        u128::from(now).max(self.newest)
    }

    fn counted(&self, t: u128) -> u128 {
        let live = self.admitted.iter().filter(|&&(s, _)| t - s < self.window);
        live.map(|(_, cost)| cost).sum()
    }
}

impl KeyModel for Log {
    /// A settle gives nothing back: the state cannot tell which entries counted the
    /// estimate.
    const REFUNDS_ON_SETTLE: bool = false;

    fn new(quota: Quota) -> Self {
        Self {
            limit: quota.capacity().into(),
            window: u128::from(quota.capacity()) * nanos(quota),
            admitted: vec![],
            newest: 0,
        }
    }

    fn acquire(&mut self, now: u64, cost: u32) -> Decision {
        let t = self.reading(now);
        let room = self.limit.saturating_sub(self.counted(t));
        let cost = u128::from(cost);
        if cost > self.limit {
            return Decision::ExceedsCapacity {
                remaining: room as u32,
                capacity: self.limit as u32,
            };
        }
        // A key with more live entries than the limit is denied even a cost of 0.
        if self.counted(t) + cost > self.limit {
            // The count only falls when an admission leaves: try each such instant.
            let leaving = self.admitted.iter().map(|&(s, _)| s + self.window);
            let ready = leaving
                .filter(|&at| at > t)
                .find(|&at| self.counted(at) + cost <= self.limit)
                .expect("every admission leaves");
            return Decision::Denied {
                remaining: room as u32,
                retry_after: wait(ready - u128::from(now)),
            };
        }
        if cost > 0 {
            self.admitted.push((t, cost));
            self.newest = t;
        }
        Decision::Allowed {
            remaining: (room - cost) as u32,
        }
    }

    fn peek(&self, now: u64) -> u32 {
        self.limit.saturating_sub(self.counted(self.reading(now))) as u32
    }

    /// The oldest admissions still in the window at the reading given back first.
    fn give_back(&mut self, now: u64, cost: u32) -> u32 {
        let t = self.reading(now);
        let mut left = u128::from(cost);
        for (s, taken) in &mut self.admitted {
            if t - *s < self.window {
                let back = left.min(*taken);
                *taken -= back;
                left -= back;
            }
        }
        (u128::from(cost) - left) as u32
    }

    fn charge(&mut self, now: u64, extra: u32) -> u32 {
        let t = self.reading(now);
        let charged = u128::from(extra).min((2 * self.limit).saturating_sub(self.counted(t)));
        if charged > 0 {
            self.admitted.push((t, charged));
            self.newest = t;
        }
        charged as u32
    }

    fn debt(&self, now: u64) -> u32 {
        let counted = self.counted(self.reading(now));
        counted.saturating_sub(self.limit) as u32
    }

    /// The instant the request is recorded at.
    fn counts_at(&self, now: u64) -> u128 {
        self.reading(now)
    }

    /// No window of the quota's length, wherever it lies, holds more than the limit.
    fn check(quota: Quota, admitted: &Admitted) -> Result<(), String> {
        let limit = u128::from(quota.capacity());
        let window = limit * nanos(quota);
        // The busiest windows end at an admission: check the window ending at each.
        for &(end, _) in admitted {
            let in_window: u128 = admitted
                .iter()
                .filter(|&&(s, _)| s <= end && end - s < window)
                .map(|(_, cost)| cost)
                .sum();
            if in_window > limit {
                return Err(format!("{in_window} admitted in the window ending {end}"));
            }
        }
        Ok(())
    }

    fn latest(&self) -> u64 {
        self.newest as u64
    }

    fn carrying(quota: Quota, at: u64, taken: u32) -> Self {
        let mut log = Self::new(quota);
        if taken > 0 {
            log.admitted.push((at.into(), taken.into()));
        }
        log.newest = at.into();
        log
    }
}

/// The sliding window counter (as in tests/sliding_window.rs): every admitted request
/// with the reading it was admitted at; the fixed windows' counts are sums over them,
/// the weighted comparison one exact rational inequality, and a denial's wait found by
/// trying each later grid point in turn.
///
/// A settle's charge is recorded as admissions at its reading, the weighted count
/// (rounded up) reaching at most `most`: twice the limit where the word has room for
/// counts twice as wide, else what a count as wide as the limit holds short of
/// all-ones (and with a previous window's count, never the all-ones value itself).
#[derive(Clone, Debug)]
pub struct Counter {
    limit: u128,
    interval: u128,
    most: u128,
    /// The count field's all-ones value.
    all_ones: u128,
    admitted: Vec<(u128, u128)>,
}

impl Counter {
    fn window(&self) -> u128 {
        self.limit * self.interval
    }

    /// A reading older than the window of the key's last admission counts as that
    /// window's start.
    fn reading(&self, now: u64) -> u128 {
        let now = u128::from(now);
        match self.admitted.last() {
            Some(&(last, _)) => now.max(last / self.window() * self.window()),
            None => now,
        }
    }

    /// Requests the key could take at reading `t`: ⌊limit − previous × (limit − q) /
    /// limit − current⌋, or none, where q is the whole intervals elapsed in t's window.
    fn room(&self, t: u128) -> u128 {
        match self.scaled(t) {
            ..=0 => 0,
            scaled => scaled as u128 / self.limit,
        }
    }

    /// Whether a request for `cost` fits at reading `t`: `previous × (limit − q) /
    /// limit + current + cost ≤ limit`, exactly. A key whose weighted count is past
    /// the limit is denied even a cost of 0.
    fn fits(&self, t: u128, cost: u128) -> bool {
        self.scaled(t) >= (cost * self.limit) as i128
    }

    /// `limit × (limit − previous × (limit − q) / limit − current)`: the room at
    /// reading `t`, scaled by the limit, below zero for a key in debt.
    fn scaled(&self, t: u128) -> i128 {
        let window = t / self.window();
        let in_window = |w: u128| -> u128 {
            let admitted = self.admitted.iter();
            admitted
                .filter(|(at, _)| at / self.window() == w)
                .map(|(_, cost)| cost)
                .sum()
        };
        let previous = if window == 0 {
            0
        } else {
            in_window(window - 1)
        };
        let current = in_window(window);
        let q = (t - window * self.window()) / self.interval;
        (self.limit * self.limit) as i128
            - (previous * (self.limit - q)) as i128
            - (current * self.limit) as i128
    }
}

impl Counter {
    /// Admitted in window `w`.
    fn in_window(&self, w: u128) -> u128 {
        let admitted = self.admitted.iter();
        admitted
            .filter(|(at, _)| at / self.window() == w)
            .map(|(_, cost)| cost)
            .sum()
    }
}

impl KeyModel for Counter {
    /// A settle gives nothing back: the state cannot tell which window counted the
    /// estimate.
    const REFUNDS_ON_SETTLE: bool = false;

    fn new(quota: Quota) -> Self {
        let limit = u64::from(quota.capacity());
        let last_index = u64::MAX / (nanos(quota) as u64) / limit;
        let bits = |x: u64| u64::BITS - x.leading_zeros();
        let fits = |c: u32| 2 * c + bits(last_index).max(1) <= 63;
        let (count_bits, most) = if fits(bits(2 * limit)) {
            (bits(2 * limit), 2 * limit)
        } else {
            let c = bits(limit);
            (c, limit.max((1 << c) - 2))
        };
        Self {
            limit: limit.into(),
            interval: nanos(quota),
            most: most.into(),
            all_ones: (1 << count_bits) - 1,
            admitted: vec![],
        }
    }

    fn acquire(&mut self, now: u64, cost: u32) -> Decision {
        let t = self.reading(now);
        let room = self.room(t);
        let cost = u128::from(cost);
        if cost > self.limit {
            return Decision::ExceedsCapacity {
                remaining: room as u32,
                capacity: self.limit as u32,
            };
        }
        if !self.fits(t, cost) {
            let mut grid = t / self.interval + 1;
            while !self.fits(grid * self.interval, cost) {
                grid += 1;
            }
            return Decision::Denied {
                remaining: room as u32,
                retry_after: wait(grid * self.interval - u128::from(now)),
            };
        }
        if cost > 0 {
            self.admitted.push((t, cost));
        }
        Decision::Allowed {
            remaining: (room - cost) as u32,
        }
    }

    fn peek(&self, now: u64) -> u32 {
        self.room(self.reading(now)) as u32
    }

    /// Admissions of the reading's window given back, newest first, at most what the
    /// window holds; emptied admissions stay as markers of the key's last window.
    fn give_back(&mut self, now: u64, cost: u32) -> u32 {
        let t = self.reading(now);
        let window = self.window();
        let mut left = u128::from(cost);
        for (at, taken) in self.admitted.iter_mut().rev() {
            if *at / window == t / window {
                let back = left.min(*taken);
                *taken -= back;
                left -= back;
            }
        }
        (u128::from(cost) - left) as u32
    }

    fn charge(&mut self, now: u64, extra: u32) -> u32 {
        let t = self.reading(now);
        let w = t / self.window();
        let previous = if w == 0 { 0 } else { self.in_window(w - 1) };
        let most = if previous == 0 {
            self.most
        } else {
            self.most.min(self.all_ones - 1)
        };
        // The weighted count, rounded up, and the current window's: at most `most`.
        let q = (t - w * self.window()) / self.interval;
        let counted = (previous * (self.limit - q)).div_ceil(self.limit) + self.in_window(w);
        let charged = u128::from(extra).min(most.saturating_sub(counted));
        if charged > 0 {
            self.admitted.push((t, charged));
        }
        charged as u32
    }

    /// The fixed window the request counts in.
    fn counts_at(&self, now: u64) -> u128 {
        self.reading(now) / self.window()
    }

    /// No fixed window holds more than the limit (the weighted previous window only
    /// leaves less room).
    fn check(quota: Quota, admitted: &Admitted) -> Result<(), String> {
        per_window(u128::from(quota.capacity()), admitted)
    }
}

/// GCRA (as in tests/gcra.rs): a theoretical arrival time; readings past the limiter's
/// end (2^63 − 3 − capacity × interval − the debt cap's refill) count as the end, so
/// a wait past it is forever (`Duration::MAX`). A settle's charge moves the TAT on by
/// whole intervals, to at most both refills past the reading; the debt cap is one
/// capacity, or the whole intervals that keep both refills within 2^62 ns.
#[derive(Clone, Debug)]
pub struct Arrival {
    capacity: u128,
    interval: u128,
    debt_refill: u128,
    end: u128,
    tat: u128,
}

impl Arrival {
    fn t(&self, now: u64) -> u128 {
        u128::from(now).min(self.end)
    }

    /// Tokens at reading `t`, in nanoseconds of refill: capacity × interval less the
    /// debt (TAT − t), which a reading before the last admission can push below 0.
    fn refill_ns(&self, t: u128) -> i128 {
        (self.capacity * self.interval) as i128 - (self.tat as i128 - t as i128).max(0)
    }

    fn whole_tokens(&self, refill_ns: i128) -> u32 {
        (refill_ns.max(0) as u128 / self.interval) as u32
    }
}

impl KeyModel for Arrival {
    fn new(quota: Quota) -> Self {
        let capacity = u128::from(quota.capacity());
        let interval = nanos(quota);
        let full = capacity * interval;
        let debt_refill = capacity.min(((1 << 62) - full.min(1 << 62)) / interval) * interval;
        Self {
            capacity,
            interval,
            debt_refill,
            end: (1 << 63) - 3 - full - debt_refill,
            tat: 0,
        }
    }

    fn acquire(&mut self, now: u64, cost: u32) -> Decision {
        let t = self.t(now);
        let refill_ns = self.refill_ns(t);
        let remaining = self.whole_tokens(refill_ns);
        let needed = (u128::from(cost) * self.interval) as i128;
        if u128::from(cost) > self.capacity {
            Decision::ExceedsCapacity {
                remaining,
                capacity: self.capacity as u32,
            }
        } else if needed > refill_ns {
            // Tokens never count below zero, but the refill does: a key in debt (a
            // TAT more than the burst past the reading) is denied even a cost of 0,
            // and the wait counts the whole debt; one that ends after the end never
            // ends.
            let wait_ns = (needed - refill_ns) as u128;
            Decision::Denied {
                remaining,
                retry_after: if t + wait_ns > self.end {
                    Duration::MAX
                } else {
                    wait(wait_ns)
                },
            }
        } else {
            if cost > 0 {
                self.tat = self.tat.max(t) + needed as u128;
            }
            Decision::Allowed {
                remaining: remaining - cost,
            }
        }
    }

    fn peek(&self, now: u64) -> u32 {
        self.whole_tokens(self.refill_ns(self.t(now)))
    }

    /// TAT moved `cost` emission intervals earlier, but not before the reading: the
    /// intervals it moved, a part of one counted as one.
    fn give_back(&mut self, now: u64, cost: u32) -> u32 {
        let t = self.t(now);
        if self.tat <= t {
            return 0;
        }
        let before = self.tat;
        let given_back = u128::from(cost) * self.interval;
        self.tat = self.tat.saturating_sub(given_back).max(t);
        (before - self.tat).div_ceil(self.interval) as u32
    }

    fn charge(&mut self, now: u64, extra: u32) -> u32 {
        let t = self.t(now);
        let from = self.tat.max(t);
        let most = t + self.capacity * self.interval + self.debt_refill;
        let charged = u128::from(extra).min(most.saturating_sub(from) / self.interval);
        if charged > 0 {
            self.tat = from + charged * self.interval;
        }
        charged as u32
    }

    /// The reading, as GCRA takes it.
    fn counts_at(&self, now: u64) -> u128 {
        self.t(now)
    }

    /// In any `[a, b]`, at most the capacity plus one per whole interval in it.
    fn check(quota: Quota, admitted: &Admitted) -> Result<(), String> {
        let (capacity, interval) = (u128::from(quota.capacity()), nanos(quota));
        span_bound(admitted, |a, b| capacity + (b - a) / interval)
    }
}

/// The schedule driver's view: keys are `u32`, and a limiter never reconfigured never
/// moves a key, so a peek needs no `&mut`.
impl<S: KeyModel> super::schedule::Model for Keyed<S> {
    fn acquire(&mut self, key: u32, now: u64, cost: u32) -> Decision {
        Keyed::acquire(self, key.into(), now, cost)
    }

    fn peek(&self, key: u32, now: u64) -> u32 {
        let key = u64::from(key);
        assert_eq!(
            self.keys.get(&key).map(|k| k.quota),
            self.keys.get(&key).map(|_| self.resolver.of(key)),
            "the schedule driver's models are never reconfigured"
        );
        let r = self.reading(now);
        match self.keys.get(&key) {
            Some(k) => k.state.peek(r),
            None => self.resolver.of(key).capacity(),
        }
    }

    fn refund(&mut self, key: u32, now: u64, cost: u32) {
        Keyed::refund(self, key.into(), now, cost)
    }

    fn settle(&mut self, key: u32, now: u64, estimate: u32, actual: u32) -> Settlement {
        Keyed::settle(self, key.into(), now, estimate, actual)
    }
}
