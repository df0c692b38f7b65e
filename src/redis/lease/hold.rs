//! A leased key's hold: the tokens a process holds for one key of a Redis bucket and
//! when they stop counting, in one `AtomicU64` taken by a compare-and-set loop.
//!
//! Used by the leased Redis limiter (`redis::RedisLeasedTokenBucket`); under
//! `--cfg turnstile_loom` it is compiled alone, without the `redis` feature, so the
//! loom models in `loom-tests/` check it without Redis (see `lib.rs`).
//!
//! # Layout
//! The lower [`TOKEN_BITS`] (24) bits hold the tokens held, at most [`MAX_HELD`]; the
//! upper 40 bits the **expiry tick**: the first tick, in units of 2^20 ns (about
//! 1.05 ms) of the limiter's clock since its epoch, at which the tokens no longer
//! count. 40 bits of such ticks last 36 years. A word whose expiry tick is at or
//! before now holds nothing, whatever its token bits say.
//!
//! # Protocol
//! - [`take`]: requests take their cost from unexpired tokens, all or nothing, in a
//!   compare-and-set loop; many threads at once, no lock.
//! - [`add`]: the one fetch in flight for the key (the limiter keeps it one) adds what
//!   Redis granted, with a new expiry; tokens found expired are dropped and reported,
//!   never merged into the new lease.
//! - [`drop_expired`]: the sweep zeroes an expired word, reporting what it dropped.
//!
//! Each token that enters the word by [`add`] leaves it exactly once: taken by one
//! request, or reported expired by one [`add`] or [`drop_expired`]. That is what the
//! loom model checks (`loom-tests/tests/lease.rs`), and what the limiter's exact
//! accounting (leased = served + expired + held) rests on.
//!
//! Every access is `Relaxed`: the word is a count and an expiry that guard no other
//! memory; each change is one read-modify-write of the word, so the changes form one
//! total order (the word's modification order) and none is lost. Where the limiter
//! needs more (a new fetcher seeing the last fetch's grant), it orders that with its
//! own flag.

use crate::sync::{AtomicU64, Ordering};

/// Bits of the word that hold the token count.
pub const TOKEN_BITS: u32 = 24;

/// The most tokens a word holds: 2^24 - 1. The limiter's largest lease is capped here.
pub const MAX_HELD: u32 = (1 << TOKEN_BITS) - 1;

/// A tick is 2^TICK_SHIFT nanoseconds (about 1.05 ms): a shift, not a division, on
/// the hot path.
pub const TICK_SHIFT: u32 = 20;

/// The largest expiry tick the word holds: 2^40 - 1.
const MAX_TICK: u64 = (1 << (64 - TOKEN_BITS)) - 1;

/// The tick of `nanos` (since the limiter's epoch), rounded down, saturating.
#[inline]
pub fn tick(nanos: u64) -> u64 {
    (nanos >> TICK_SHIFT).min(MAX_TICK)
}

/// The word holding `tokens` until `expiry` (a tick).
#[inline]
pub fn pack(tokens: u32, expiry: u64) -> u64 {
    debug_assert!(tokens <= MAX_HELD);
    (expiry.min(MAX_TICK) << TOKEN_BITS) | u64::from(tokens.min(MAX_HELD))
}

/// The token bits of `word`, expired or not.
#[inline]
fn token_bits(word: u64) -> u32 {
    // In range: masked to 24 bits.
    (word & u64::from(MAX_HELD)) as u32
}

/// The expiry tick of `word`.
#[inline]
fn expiry(word: u64) -> u64 {
    word >> TOKEN_BITS
}

/// The tokens `word` holds at tick `now`: none once expired.
#[inline]
pub fn held(word: u64, now: u64) -> u32 {
    if now >= expiry(word) {
        0
    } else {
        token_bits(word)
    }
}

/// Takes `cost` tokens at tick `now` if the word holds that many unexpired: the
/// tokens left (`Ok`), or, changing nothing, the tokens held (`Err`, fewer than
/// `cost`). A cost of zero takes nothing and succeeds.
#[inline]
pub fn take(word: &AtomicU64, cost: u32, now: u64) -> Result<u32, u32> {
    // Relaxed: see the module docs; the word guards no other memory.
    let mut current = word.load(Ordering::Relaxed);
    loop {
        let have = held(current, now);
        if have < cost {
            return Err(have);
        }
        let left = have - cost;
        if cost == 0 {
            return Ok(left);
        }
        // Taking keeps the expiry: the tokens left die when the lease does.
        let new = pack(left, expiry(current));
        // Relaxed: as above; on failure, retry from the word found.
        match word.compare_exchange_weak(current, new, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return Ok(left),
            Err(found) => current = found,
        }
    }
}

/// What [`add`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Added {
    /// Tokens the word held after the add.
    pub held: u32,
    /// Tokens the word held that had expired, dropped (not merged).
    pub expired: u32,
    /// Granted tokens that did not fit under [`MAX_HELD`] and were dropped (never, when
    /// the limiter's leases are within it; reported rather than hidden).
    pub overflow: u32,
}

/// Adds `granted` tokens at tick `now`, all held until tick `until` (the later of it
/// and the word's own expiry: tokens still held are not cut short). Tokens already
/// expired are dropped, not revived, and reported in [`Added::expired`].
pub fn add(word: &AtomicU64, granted: u32, until: u64, now: u64) -> Added {
    // Relaxed: see the module docs.
    let mut current = word.load(Ordering::Relaxed);
    loop {
        let have = held(current, now);
        let expired = token_bits(current) - have;
        let total = u64::from(have) + u64::from(granted);
        let kept = total.min(u64::from(MAX_HELD)) as u32;
        let new = pack(kept, until.max(expiry(current)));
        // Relaxed: as above; on failure, retry from the word found.
        match word.compare_exchange_weak(current, new, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => {
                return Added {
                    held: kept,
                    expired,
                    // In range: total - kept <= granted.
                    overflow: (total - u64::from(kept)) as u32,
                };
            }
            Err(found) => current = found,
        }
    }
}

/// Gives back up to `cost` tokens taken from the word (by a request that did not go
/// ahead) at tick `now`, keeping the expiry, so the word holds at most `cap`: the
/// tokens put back. An expired word takes none: they would not count.
pub fn give_back(word: &AtomicU64, cost: u32, cap: u32, now: u64) -> u32 {
    // Relaxed: see the module docs.
    let mut current = word.load(Ordering::Relaxed);
    loop {
        if now >= expiry(current) {
            return 0;
        }
        let have = token_bits(current);
        let back = cost.min(cap.min(MAX_HELD).saturating_sub(have));
        if back == 0 {
            return 0;
        }
        let new = pack(have + back, expiry(current));
        // Relaxed: as above; on failure, retry from the word found.
        match word.compare_exchange_weak(current, new, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return back,
            Err(found) => current = found,
        }
    }
}

/// Zeroes the word if it expired by tick `now` holding tokens; the tokens dropped
/// (0 if it had not expired or held none).
pub fn drop_expired(word: &AtomicU64, now: u64) -> u32 {
    // Relaxed: see the module docs.
    let mut current = word.load(Ordering::Relaxed);
    loop {
        if held(current, now) > 0 || token_bits(current) == 0 {
            return 0;
        }
        // Relaxed: as above.
        match word.compare_exchange_weak(current, 0, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return token_bits(current),
            Err(found) => current = found,
        }
    }
}

/// The tokens the word holds at tick `now`.
#[inline]
pub fn load(word: &AtomicU64, now: u64) -> u32 {
    // Relaxed: see the module docs.
    held(word.load(Ordering::Relaxed), now)
}

#[cfg(all(test, not(turnstile_loom)))]
mod tests {
    use super::*;

    #[test]
    fn takes_are_all_or_nothing_and_leave_the_expiry() {
        let word = AtomicU64::new(pack(5, 10));
        assert_eq!(take(&word, 3, 0), Ok(2));
        assert_eq!(take(&word, 3, 0), Err(2));
        assert_eq!(take(&word, 0, 0), Ok(2));
        assert_eq!(take(&word, 2, 9), Ok(0));
        assert_eq!(word.load(Ordering::Relaxed), pack(0, 10));
    }

    #[test]
    fn a_give_back_keeps_the_expiry_stays_under_the_cap_and_skips_expired_words() {
        let word = AtomicU64::new(pack(2, 10));
        assert_eq!(give_back(&word, 3, 8, 0), 3);
        assert_eq!(word.load(Ordering::Relaxed), pack(5, 10));
        // Room for 3 more under a cap of 8.
        assert_eq!(give_back(&word, 5, 8, 0), 3);
        assert_eq!(load(&word, 0), 8);
        assert_eq!(give_back(&word, 1, 8, 0), 0);
        // Expired: nothing goes back, the word is left to the sweep.
        assert_eq!(give_back(&word, 1, 100, 10), 0);
        assert_eq!(word.load(Ordering::Relaxed), pack(8, 10));
    }

    #[test]
    fn tokens_stop_counting_at_their_expiry_tick() {
        let word = AtomicU64::new(pack(5, 10));
        assert_eq!(load(&word, 9), 5);
        assert_eq!(load(&word, 10), 0);
        assert_eq!(take(&word, 1, 10), Err(0));
        assert_eq!(drop_expired(&word, 9), 0);
        assert_eq!(drop_expired(&word, 10), 5);
        assert_eq!(drop_expired(&word, 10), 0);
        assert_eq!(word.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn an_add_merges_live_tokens_and_drops_expired_ones() {
        let word = AtomicU64::new(pack(4, 10));
        let live = add(&word, 3, 20, 5);
        assert_eq!(
            live,
            Added {
                held: 7,
                expired: 0,
                overflow: 0
            }
        );
        assert_eq!(load(&word, 19), 7);
        let late = add(&word, 2, 40, 25);
        assert_eq!(
            late,
            Added {
                held: 2,
                expired: 7,
                overflow: 0
            }
        );
        // A grant with an earlier expiry does not cut the held tokens short.
        add(&word, 1, 30, 25);
        assert_eq!(load(&word, 39), 3);
    }

    #[test]
    fn an_add_beyond_the_word_reports_the_overflow() {
        let word = AtomicU64::new(pack(MAX_HELD - 1, 10));
        let added = add(&word, 3, 10, 0);
        assert_eq!(added.held, MAX_HELD);
        assert_eq!(added.overflow, 2);
    }

    #[test]
    fn ticks_are_rounded_down_and_saturate() {
        assert_eq!(tick((1 << TICK_SHIFT) - 1), 0);
        assert_eq!(tick(1 << TICK_SHIFT), 1);
        assert_eq!(tick(u64::MAX), MAX_TICK);
        assert_eq!(expiry(pack(1, u64::MAX)), MAX_TICK);
    }

    /// Threads taking from one word serve exactly what was added, never more.
    #[test]
    fn concurrent_takes_serve_exactly_the_tokens_added() {
        let word = std::sync::Arc::new(AtomicU64::new(0));
        add(&word, 10_000, 100, 0);
        let served: u32 = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..4)
                .map(|_| {
                    let word = &word;
                    scope.spawn(move || (0..5_000).filter(|_| take(word, 1, 0).is_ok()).count())
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap() as u32).sum()
        });
        assert_eq!(served, 10_000);
    }
}
