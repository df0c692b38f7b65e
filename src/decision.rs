//! The answer to a request.

use std::time::Duration;

/// What a limiter decided for one request.
///
/// `remaining` is always the number of tokens (or, for window limiters, requests)
/// left for the key *after* this decision.
#[must_use = "a decision that is not checked limits nothing"]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// The request was admitted and its cost taken.
    Allowed {
        /// Tokens left after taking the cost.
        remaining: u32,
    },
    /// The request was not admitted and the key's state is unchanged. Sending the same
    /// request `retry_after` from now succeeds, if nothing else takes from the key
    /// meanwhile; sending it any earlier does not.
    Denied {
        /// Tokens available now (fewer than the cost).
        remaining: u32,
        /// Exact time until enough tokens exist; never rounded down.
        /// `Duration::MAX` means never: the wait lies beyond the end of the limiter's
        /// clock (584 years; GCRA, a fixed window or a 1 ns token bucket, whose
        /// states cannot name later times, stop earlier, as their documentation
        /// says).
        retry_after: Duration,
    },
    /// The cost is larger than the quota's capacity: this request can never succeed,
    /// however long the caller waits. The key's state is unchanged.
    ExceedsCapacity {
        /// Tokens available now.
        remaining: u32,
        /// The quota's capacity, which the cost exceeded.
        capacity: u32,
    },
    /// The limiter already holds its `max_keys` keys, none of them could be forgotten,
    /// and its overflow policy is [`Overflow::Deny`](crate::Overflow::Deny): this new
    /// key was not admitted and has no state.
    Overflow {
        /// When the limiter will next try to make room by forgetting idle keys — a
        /// hint, not the promise [`Decision::Denied`] makes.
        retry_after: Duration,
    },
}

impl Decision {
    /// Whether the request was admitted.
    #[inline]
    pub fn is_allowed(&self) -> bool {
        matches!(self, Decision::Allowed { .. })
    }

    /// Tokens left for the key after this decision.
    #[inline]
    pub fn remaining(&self) -> u32 {
        match *self {
            Decision::Allowed { remaining }
            | Decision::Denied { remaining, .. }
            | Decision::ExceedsCapacity { remaining, .. } => remaining,
            Decision::Overflow { .. } => 0,
        }
    }

    /// For a denied request that can succeed later, the exact wait (for
    /// [`Decision::Overflow`], a hint); `None` when the request was allowed or can
    /// never succeed (see [`Decision::exceeds_capacity`]).
    #[inline]
    pub fn retry_after(&self) -> Option<Duration> {
        match *self {
            Decision::Denied { retry_after, .. } | Decision::Overflow { retry_after } => {
                Some(retry_after)
            }
            Decision::Allowed { .. } | Decision::ExceedsCapacity { .. } => None,
        }
    }

    /// Whether the cost exceeds the capacity, so that no wait can make it succeed.
    #[inline]
    pub fn exceeds_capacity(&self) -> bool {
        matches!(self, Decision::ExceedsCapacity { .. })
    }
}
