//! How big a key's next lease is: the pure rule, from what the last one showed.
//!
//! A lease should cover about half a lifetime of the key's traffic in this process:
//! big enough that a hot key pays one round trip per many requests, small enough that
//! tokens rarely sit unused until they expire (which is the price, in
//! under-admission, of leasing). The rule moves towards that without measuring rates:
//! - a key starts at one token (a key seen once costs one round trip, taking exactly
//!   its cost, as the plain limiter does);
//! - a fetch that comes within half a lifetime of the previous one means the lease ran
//!   low that fast: the size **doubles**, up to the limiter's maximum;
//! - a fetch that finds tokens of the previous lease expired unused means the lease was
//!   bigger than the traffic: the size **halves**, down to one;
//! - otherwise it stays.
//!
//! Doubling and halving reach any size in a logarithmic number of fetches, and each
//! step is observable (the limiter counts them), so tests need no timing.

/// What the rule did to a key's lease size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Resize {
    /// Kept as it was (or already at its bound).
    Kept,
    /// Doubled (capped at the maximum).
    Grew,
    /// Halved (down to one).
    Shrank,
}

/// What a fetch knows when it sizes the next lease.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Observed {
    /// Nanoseconds since this key's previous fetch, `None` for its first.
    pub(crate) since_last_fetch: Option<u64>,
    /// Tokens of the previous lease this fetch found expired unused.
    pub(crate) expired: u32,
}

/// The next lease size after `size`, for a limiter whose leases live `lifetime`
/// nanoseconds and hold at most `max` tokens (`max >= 1`).
pub(crate) fn next(size: u32, max: u32, lifetime: u64, observed: Observed) -> (u32, Resize) {
    let size = size.clamp(1, max);
    if observed.expired > 0 {
        let halved = (size / 2).max(1);
        return (
            halved,
            if halved < size {
                Resize::Shrank
            } else {
                Resize::Kept
            },
        );
    }
    match observed.since_last_fetch {
        Some(elapsed) if elapsed <= lifetime / 2 => {
            let doubled = size.saturating_mul(2).min(max);
            (
                doubled,
                if doubled > size {
                    Resize::Grew
                } else {
                    Resize::Kept
                },
            )
        }
        _ => (size, Resize::Kept),
    }
}

/// Below how many held tokens a key's lease is refilled ahead of need, for a lease of
/// `size`: half of it. A lease of one is never refilled ahead (the request that
/// empties it is the key's whole traffic so far).
pub(crate) fn refill_below(size: u32) -> u32 {
    size / 2
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const LIFETIME: u64 = 1_000;

    fn seen(since_last_fetch: Option<u64>, expired: u32) -> Observed {
        Observed {
            since_last_fetch,
            expired,
        }
    }

    #[test]
    fn a_first_fetch_keeps_the_size() {
        assert_eq!(next(1, 64, LIFETIME, seen(None, 0)), (1, Resize::Kept));
    }

    #[test]
    fn fetches_within_half_a_lifetime_double_up_to_the_maximum() {
        assert_eq!(next(1, 64, LIFETIME, seen(Some(500), 0)), (2, Resize::Grew));
        assert_eq!(next(48, 64, LIFETIME, seen(Some(0), 0)), (64, Resize::Grew));
        assert_eq!(next(64, 64, LIFETIME, seen(Some(0), 0)), (64, Resize::Kept));
        assert_eq!(next(8, 64, LIFETIME, seen(Some(501), 0)), (8, Resize::Kept));
    }

    #[test]
    fn expired_tokens_halve_down_to_one() {
        assert_eq!(next(8, 64, LIFETIME, seen(Some(0), 1)), (4, Resize::Shrank));
        assert_eq!(
            next(1, 64, LIFETIME, seen(Some(5_000), 1)),
            (1, Resize::Kept)
        );
    }

    proptest! {
        #[test]
        fn the_size_stays_within_one_and_the_maximum(
            size in 0u32..=u32::MAX,
            max in 1u32..=(1 << 24) - 1,
            since in proptest::option::of(0u64..=4 * LIFETIME),
            expired in 0u32..4,
        ) {
            let (next_size, resize) = next(size, max, LIFETIME, seen(since, expired));
            prop_assert!((1..=max).contains(&next_size));
            let start = size.clamp(1, max);
            match resize {
                Resize::Grew => prop_assert!(next_size > start && expired == 0),
                Resize::Shrank => prop_assert!(next_size < start && expired > 0),
                Resize::Kept => prop_assert_eq!(next_size, start),
            }
        }
    }
}
