//! Algorithms whose per-key state is one `u64` word: the pure-function contract they
//! implement, and the compare-and-set loop that makes each of them a keyed
//! [`Algorithm`](crate::keyed::Algorithm) with `AtomicU64` state.

use crate::Decision;
use crate::keyed::{Algorithm, Retired, Retirement};
use crate::sync::{AtomicU64, Ordering, fence};

/// The one word no algorithm's state ever is: it marks a key being forgotten.
pub const RETIRED: u64 = u64::MAX;

/// A rate-limiting algorithm whose per-key state is one `u64` word, written as pure
/// functions of that word and the time (nanoseconds since the limiter's epoch).
///
/// No state is ever [`RETIRED`]. Every function returns `word` itself exactly when the
/// state does not change, so the caller writes nothing.
pub trait WordAlgorithm: Send + Sync + Sized {
    /// The state of a key seen for the first time, or again after it was forgotten.
    fn fresh(&self) -> u64;

    /// One request for `cost` at `now`: the word to store, and the decision.
    fn acquire(&self, word: u64, now: u64, cost: u32) -> (u64, Decision);

    /// What a key with state `word` has left at `now`, without taking anything.
    fn available(&self, word: u64, now: u64) -> u32;

    /// `cost` given back at `now` (a refund of an earlier take, never beyond what a
    /// key can hold): the word to store.
    fn refund(&self, word: u64, now: u64, cost: u32) -> u64;

    /// Whether `word` carries no information as of `at`: for every reading at or
    /// after `at`, requests on it answer exactly as on [`fresh`](Self::fresh) and
    /// leave the same word. Only such keys are forgotten.
    fn forgettable(&self, word: u64, at: u64) -> bool;
}

/// `new` applied to `word` by compare-and-set until it sticks, `new` recomputed from
/// each value found; `Err(Retired)` once the word is retired.
///
/// Relaxed throughout: the word guards no other memory — it *is* the state — and exact
/// counting needs only what every atomic read-modify-write gives at any ordering: all
/// writes to one word form a single modification order, and a successful CAS replaces
/// exactly the value it compared against. So no two requests can both take the same
/// token, and a refill is applied once. The one exception is a word found `RETIRED`,
/// after which an Acquire fence pairs with the sweeper's Release (see `evict.rs`).
/// loom checks all of it in `loom-tests/`.
#[inline]
fn update<T>(word: &AtomicU64, mut step: impl FnMut(u64) -> (u64, T)) -> Result<T, Retired> {
    // Relaxed: see above; a stale value only makes the CAS fail and retry.
    let mut current = word.load(Ordering::Relaxed);
    loop {
        if current == RETIRED {
            // Acquire: the sweeper's watermark, raised before it retired this word, is
            // visible to the caller's next look at the key.
            fence(Ordering::Acquire);
            return Err(Retired);
        }
        let (new, answer) = step(current);
        if new == current {
            // Nothing changed (a denial without refill, a cost over capacity): no write,
            // so under attack the key's cache line stays shared between cores.
            return Ok(answer);
        }
        // Relaxed on success and failure: see above.
        match word.compare_exchange_weak(current, new, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return Ok(answer),
            Err(actual) => current = actual,
        }
    }
}

/// One request applied to a key's word: the thin CAS loop around the algorithm's step.
#[inline]
pub fn acquire_word<W: WordAlgorithm>(
    algorithm: &W,
    word: &AtomicU64,
    now: u64,
    cost: u32,
) -> Result<Decision, Retired> {
    update(word, |current| algorithm.acquire(current, now, cost))
}

impl<W: WordAlgorithm> Algorithm for W {
    type State = AtomicU64;

    fn fresh(&self) -> AtomicU64 {
        AtomicU64::new(WordAlgorithm::fresh(self))
    }

    // Always: left to itself the compiler keeps this a call, and its register saves
    // and restores cost about 17 instructions per check (callgrind).
    #[inline(always)]
    fn acquire(&self, word: &AtomicU64, now: u64, cost: u32) -> Result<Decision, Retired> {
        acquire_word(self, word, now, cost)
    }

    #[inline]
    fn available(&self, word: &AtomicU64, now: u64) -> Option<u32> {
        // Relaxed: a snapshot of the word itself; it guards no other memory.
        let current = word.load(Ordering::Relaxed);
        (current != RETIRED).then(|| WordAlgorithm::available(self, current, now))
    }

    fn is_retired(&self, word: &AtomicU64) -> bool {
        // Relaxed: a retired word never changes again.
        word.load(Ordering::Relaxed) == RETIRED
    }

    fn refund(&self, word: &AtomicU64, now: u64, cost: u32) {
        // A retired word was full: there is nothing to give back.
        let _ = update(word, |current| {
            (WordAlgorithm::refund(self, current, now, cost), ())
        });
    }

    fn freeze(&self, word: &AtomicU64, now: u64) -> Option<u32> {
        // Release on success: as when the sweeper retires; the value frozen is the one
        // the CAS replaced, so no request's change can slip in after it.
        update(word, |current| {
            (RETIRED, WordAlgorithm::available(self, current, now))
        })
        .ok()
    }

    fn retire_if_forgettable(&self, word: &AtomicU64, at: u64) -> Retirement {
        // Relaxed: the value is only compared; the CAS below decides.
        let current = word.load(Ordering::Relaxed);
        if current == RETIRED {
            return Retirement::AlreadyRetired;
        }
        if !self.forgettable(current, at) {
            return Retirement::Kept;
        }
        // Release: publishes the sweep's watermark to whoever sees RETIRED. Relaxed on
        // failure: the word changed since it was checked, so it is in use; keep it.
        match word.compare_exchange(current, RETIRED, Ordering::Release, Ordering::Relaxed) {
            Ok(_) => Retirement::Retired,
            Err(_) => Retirement::Kept,
        }
    }
}
