//! The key cap (`max_keys`): what a new key meets when the store is full.

use crate::algorithm::Algorithm;
use crate::{Decision, Quota};

/// What a limiter at its `max_keys` cap does with a new key (an attacker rotating
/// client ids faster than buckets refill, or forgetting behind): the cap asks for
/// room and answers at once, whether or not some keys held could be forgotten.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Overflow {
    /// Fail closed: the request is answered [`Decision::Overflow`] and the key gets no
    /// state.
    Deny,
    /// Every new key that finds no room shares one overflow allowance under this
    /// quota, so unknown clients keep a small, bounded service during an attack.
    Shared(Quota),
}

/// One allowance shared by every new key that finds the store full (`Overflow::Shared`):
/// a state of the limiter's algorithm under the overflow quota, never forgotten.
pub(crate) struct SharedAllowance(Box<dyn Fn(u64, u32) -> Decision + Send + Sync>);

impl SharedAllowance {
    /// The allowance of `rules` (the overflow quota's).
    pub(crate) fn new<R: Algorithm<()> + 'static>(rules: R) -> Self {
        let state = rules.create(&());
        let overflow = Decision::Overflow {
            retry_hint: std::time::Duration::ZERO,
        };
        Self(Box::new(move |now, cost| {
            rules.acquire(&state, now, cost).unwrap_or(overflow)
        }))
    }

    /// A request for `cost` at `now` on the shared allowance.
    pub(crate) fn acquire(&self, now: u64, cost: u32) -> Decision {
        (self.0)(now, cost)
    }
}
