//! What settling a reservation did: a request took an estimate of its cost when it
//! was admitted, and later settles at what it actually cost
//! ([`RateLimiter::settle`](crate::RateLimiter::settle)).

/// What [`RateLimiter::settle`](crate::RateLimiter::settle) did with a request that
/// took `estimate` and actually cost `actual`.
///
/// At most one of [`refunded`](Self::refunded) and [`charged`](Self::charged) is
/// non-zero: a request that cost less than its estimate gets the difference back, one
/// that cost more is charged the difference, even beyond what the key had left — the
/// key then owes it, and is refused until its refill has repaid the debt (the
/// denial's `retry_after` counts the debt). What the debt cap kept from being charged
/// is [`forgiven`](Self::forgiven), never dropped silently.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Settlement {
    /// Given back: `estimate - actual` when the request cost less, less what the
    /// capacity capped (a key that refilled to full holds no more).
    pub refunded: u32,
    /// Taken beyond the estimate: `actual - estimate` when the request cost more, less
    /// what the debt cap forgave.
    pub charged: u32,
    /// Of `actual - estimate`, what was not charged because the key's debt would have
    /// passed the debt cap.
    pub forgiven: u32,
}
