//! What settling a reservation did: a request took an estimate of its cost when it
//! was admitted, and later settles at what it actually cost
//! ([`RateLimiter::settle`](crate::RateLimiter::settle)).

/// What [`RateLimiter::settle`](crate::RateLimiter::settle) did with a request that
/// took `estimate` and actually cost `actual`.
///
/// At most one of [`refunded`](Self::refunded) and [`charged`](Self::charged) is
/// non-zero: a request that cost less than its estimate gets the difference back (on
/// the token bucket and GCRA; the windows and the sliding log give nothing back, see
/// below), one that cost more is charged the difference, even beyond what the key
/// had left — the key then owes it, and is refused, even a cost of zero, until its
/// refill has repaid the debt (the denial's `retry_after` counts the debt). What the
/// debt cap kept from being charged is [`forgiven`](Self::forgiven), never dropped
/// silently: `charged + forgiven` is `actual − estimate` whenever the request cost
/// more.
///
/// # What debt means, algorithm by algorithm
/// A settle above the estimate charges the difference even beyond what the key has
/// left: the key then *owes*. A request is allowed iff what the key has covers its
/// cost, and a key in debt has less than nothing: it holds nothing (`peek` and
/// `available` say 0), every request it makes is denied — **a cost of zero
/// included** — and the denial's `retry_after` is the exact wait until its refill
/// has repaid the debt *and* brought the request's cost (for a cost of zero, until
/// the debt is repaid: on the token bucket and GCRA, exactly one interval less than
/// a cost of one waits). What a debt is, in each algorithm's own state:
///
/// - **Token bucket**: `full_at` lies more than `capacity` grid points past the
///   reading; the bucket holds `capacity − (full_at − g)` tokens, below zero. Each
///   interval repays one token.
/// - **GCRA**: the theoretical arrival time lies more than `capacity × interval` past
///   the reading; each interval repays one token (continuously).
/// - **Fixed window**: the window's count passes the limit. What is past the limit
///   when the window ends is carried into the next window as its starting count (the
///   limit refills once a window); a debt of at most one limit is repaid by then.
/// - **Sliding window counter**: the current window's count passes the limit; the
///   weighted estimate then repays it as the window slides on (up to two windows).
/// - **Sliding log**: extra entries recorded at the settle's reading, which count
///   against the key for one window from then, as the admissions they stand for.
///
/// (A reading that lags the key's state, another thread's clock slightly behind, can
/// read the same with no settle: on the token bucket and GCRA a reading behind the
/// key's last refill, on the sliding window counter a late reading inside the key's
/// window. The state cannot tell the two apart, nor can the Redis script, and both
/// deny such a reading a cost of zero.)
///
/// # The debt cap
/// A key owes at most its **debt cap: one capacity** (one window's limit). What a
/// charge would add beyond it is *forgiven*, reported in
/// [`Settlement::forgiven`], never dropped silently. The cap keeps every state in
/// the range its representation holds: a token bucket's `full_at` at most
/// `2 × capacity` grid points past the reading, a GCRA's arrival time at most
/// `2 × capacity × interval`, a window count at most `2 × limit` (each layout
/// reserves that room), a sliding log at most `2 × limit` entries. Three corners
/// hold less, and say so: a sliding window counter whose word has no room for counts
/// twice as wide (quotas near the largest it accepts) owes at most what its count
/// field holds beyond the limit (possibly nothing), a GCRA whose full refill
/// exceeds 2^61 ns owes at most what keeps its arrival time within 2^62 ns of the
/// reading, and a sliding log whose limit exceeds 2^31 owes at most `u32::MAX −
/// limit` entries (its length is a `u32`). The cap is not configurable: a larger one would take from every layout's
/// range (the clock's end, a window index's bits) for every key, and a caller that
/// wants less charged settles at less.
///
/// # Giving back, and keys with no state
/// On the **token bucket and GCRA**, a settle below the estimate is a refund, capped
/// as a refund is: a key never holds more than its capacity, and
/// [`Settlement::refunded`] is what it actually got back (a debt is repaid first).
/// Their tokens are fungible: a token given back is one the key would have had,
/// whenever the estimate was taken. GCRA counts a part of an interval given back as
/// a whole token: a key owing half a token that is given back 1 reports `refunded:
/// 1`, and holds 0.
///
/// **The fixed window, the sliding window counter and the sliding log give nothing
/// back on settle** (`refunded: 0`, the state unchanged). Their state cannot tell
/// which window (which log entries) counted the estimate: given back to a later
/// window, it admits more than the limit there. With a limit of 10 a 1 s window, an
/// estimate of 10 taken at 0.999 s and ten requests admitted in the next window, a
/// settle at 0 would give the next window 10 more, 20 in one window; on the sliding
/// log, a refund drops the oldest live entries, a later request's once the
/// estimate's have left the window, freeing its room early. For refunds on settle,
/// use the token bucket or GCRA. A charge is counted as on every algorithm, and a
/// plain [`refund`](crate::RateLimiter::refund) (a policy's, right after the take,
/// in the same window) still gives back.
///
/// A keyed limiter's key with no state (never seen, or forgotten: full) has nothing
/// to give back; a charge on it creates its state and charges it from full (at its
/// `max_keys` cap, a limiter that cannot store a new key charges nothing, and
/// reports the whole charge forgiven). A key in debt is never forgotten (it carries
/// information), and a key moved to a new quota carries its debt, in units, into
/// the new quota (capped at the new quota's debt cap; see [`crate::per_key`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Settlement {
    /// Given back: `estimate - actual` when the request cost less, less what the
    /// capacity capped (a key that refilled to full holds no more), on the token
    /// bucket and GCRA; always 0 on the fixed window, the sliding window counter and
    /// the sliding log, which give nothing back on settle.
    pub refunded: u32,
    /// Taken beyond the estimate: `actual - estimate` when the request cost more, less
    /// what the debt cap forgave.
    pub charged: u32,
    /// Of `actual - estimate`, what was not charged because the key's debt would have
    /// passed the debt cap.
    pub forgiven: u32,
}

impl Settlement {
    /// A settle that gave `refunded` back.
    #[inline]
    pub(crate) const fn of_refund(refunded: u32) -> Self {
        Self {
            refunded,
            charged: 0,
            forgiven: 0,
        }
    }

    /// A settle that asked to charge `extra` and charged `charged` of it.
    #[inline]
    pub(crate) const fn of_charge(extra: u32, charged: u32) -> Self {
        Self {
            refunded: 0,
            charged,
            forgiven: extra - charged,
        }
    }
}

/// Settles `estimate` at `actual` by one of two steps: `give_back(estimate −
/// actual)`, which returns the new state and what it gave back, or `charge(actual −
/// estimate)`, which returns the new state and what it charged; `unchanged` when the
/// two are equal. The one shape every algorithm's settle takes.
#[inline]
pub(crate) fn settle_by<S>(
    estimate: u32,
    actual: u32,
    unchanged: S,
    give_back: impl FnOnce(u32) -> (S, u32),
    charge: impl FnOnce(u32) -> (S, u32),
) -> (S, Settlement) {
    match actual.cmp(&estimate) {
        std::cmp::Ordering::Less => {
            let (state, refunded) = give_back(estimate - actual);
            (state, Settlement::of_refund(refunded))
        }
        std::cmp::Ordering::Equal => (unchanged, Settlement::default()),
        std::cmp::Ordering::Greater => {
            let extra = actual - estimate;
            let (state, charged) = charge(extra);
            (state, Settlement::of_charge(extra, charged))
        }
    }
}
