//! Algorithms whose per-key state is one `u64` word: the pure-function contract they
//! implement, and the compare-and-set loop that makes each of them an
//! [`Algorithm`](crate::Algorithm) with `AtomicU64` state.

use crate::algorithm::{Blocked, Movable, Renewal, Retirement, Rules};
use crate::settle::settle_by;
use crate::sync::mutants::{Mutant, active, choose};
use crate::sync::{AtomicU64, Ordering, fence};
use crate::{Decision, Settlement};

/// The bit that marks a *relocated* word: a state frozen where it is while a copy of it
/// takes its place elsewhere (a key promoted from the old generation to the young one,
/// `store/ring/`; a key moved to a segment's larger table, `store/words/`). The other
/// 63 bits keep the value frozen, so any thread that meets the word can make the copy
/// itself ([`relocate_word`]): a relocation one thread began is finished by the next,
/// and none waits for another. No state has this bit: every word algorithm keeps its
/// states below it.
pub const RELOCATED: u64 = 1 << 63;

/// The one word no algorithm's state ever is: it marks a key being forgotten. It is
/// also what the state `RELOCATED - 1` would be relocated as, so no algorithm has that
/// state either.
pub const RETIRED: u64 = u64::MAX;

/// The word that marks a key frozen while it moves to a new quota. Only
/// [`MovableWord`] algorithms reserve it (no state of theirs is ever `MOVED`, nor
/// `MOVED - RELOCATED`, which would be relocated as it); for the others it is the
/// relocated form of the state `RELOCATED - 2`.
pub const MOVED: u64 = u64::MAX - 1;

/// A rate-limiting algorithm whose per-key state is one `u64` word, written as pure
/// functions of that word and the time (nanoseconds since the limiter's epoch).
///
/// Every state is below [`RELOCATED`] and is not `RELOCATED - 1` (whose relocated form
/// is [`RETIRED`]); a [`MovableWord`]'s is not `RELOCATED - 2` either (relocated as
/// [`MOVED`]). [`STATE_END`] is below all three: a state below it is always one. Every
/// function returns `word` itself exactly when the state does not change, so the
/// caller writes nothing.
pub trait WordAlgorithm: Send + Sync + Sized {
    /// Whether no state is ever [`MOVED`], so the word can mark a move (the
    /// [`MovableWord`] algorithms).
    const RESERVES_MOVED: bool = false;

    /// The state of a key seen for the first time, or again after it was forgotten.
    fn fresh(&self) -> u64;

    /// One request for `cost` at `now`: the word to store, and the decision.
    fn acquire(&self, word: u64, now: u64, cost: u32) -> (u64, Decision);

    /// [`acquire`](Self::acquire) asked only whether: the word to store if the request
    /// for `cost` at `now` is allowed (`word` itself when nothing changes), `None` if it
    /// is denied, when a denial leaves the word as it was. The same verdict and word as
    /// `acquire`, without the rest of its decision; the token bucket and the GCRA
    /// override it with steps that do not divide (property-tested against `acquire`).
    #[inline]
    fn admit(&self, word: u64, now: u64, cost: u32) -> Option<u64> {
        let (new, decision) = self.acquire(word, now, cost);
        decision.is_allowed().then_some(new)
    }

    /// What a key with state `word` has left at `now`, without taking anything.
    fn available(&self, word: u64, now: u64) -> u32;

    /// `cost` given back at `now` (a refund of an earlier take, never beyond what a
    /// key can hold): the word to store.
    #[inline]
    fn refund(&self, word: u64, now: u64, cost: u32) -> u64 {
        self.give_back(word, now, cost).0
    }

    /// [`refund`](Self::refund), saying how much it gave back: the word to store, and
    /// the part of `cost` the key got back (a debt repaid first; nothing beyond what a
    /// key can hold).
    fn give_back(&self, word: u64, now: u64, cost: u32) -> (u64, u32);

    /// `extra` taken at `now` even beyond what the key has left, up to the debt cap
    /// (see [`Settlement`]): the word to store (`word` itself when nothing is
    /// charged), and how much of `extra` was charged.
    fn charge(&self, word: u64, now: u64, extra: u32) -> (u64, u32);

    /// A request that took `estimate` settled at `actual`, at `now`: the word to store
    /// and what the settle did — [`give_back`](Self::give_back) of the difference, or
    /// [`charge`](Self::charge) of it.
    #[inline]
    fn settle(&self, word: u64, now: u64, estimate: u32, actual: u32) -> (u64, Settlement) {
        settle_by(
            estimate,
            actual,
            word,
            |cost| self.give_back(word, now, cost),
            |extra| self.charge(word, now, extra),
        )
    }

    /// What `word` owes at `now`, in units (tokens, requests) past what it could hold
    /// with nothing left: 0 unless a settle charged it beyond that (see
    /// [`Settlement`]). What a move carries into a new quota
    /// ([`Movable::frozen_debt`]).
    fn debt(&self, word: u64, now: u64) -> u32;

    /// The earliest instant as of which `word` carries no information — for every
    /// reading at or after it, requests on it answer exactly as on
    /// [`fresh`](Self::fresh) and leave the same word — or `None` if no instant in
    /// the clock's range is one. Only keys forgettable as of a sweep's instant are
    /// forgotten; the earliest instant over the keys a sweep keeps tells when the
    /// next sweep could forget any of them.
    fn forgettable_from(&self, word: u64) -> Option<u64>;

    /// Whether `word` carries no information as of `at` (see
    /// [`forgettable_from`](Self::forgettable_from)).
    fn forgettable(&self, word: u64, at: u64) -> bool {
        self.forgettable_from(word).is_some_and(|from| from <= at)
    }
}

/// A word algorithm that holds every quota and whose keys can move between quotas.
/// None of its states is [`MOVED`]: its packing leaves that word free.
pub trait MovableWord: WordAlgorithm + PartialEq + Clone + 'static {
    /// The rules for `quota`.
    fn for_quota(quota: &crate::Quota) -> Self;

    /// The key's own latest time, as [`Movable::moment`] says.
    fn moment(&self, word: u64) -> u64;
}

/// The end of every word algorithm's states: each keeps them below this (its own
/// bound on readings sees to it), which leaves `RELOCATED - 2` and `RELOCATED - 1`
/// unused, so that no relocated state is ever [`MOVED`] or [`RETIRED`].
pub const STATE_END: u64 = RELOCATED - 2;

/// Whether `word` blocks every request: retired, frozen for a move to a new quota (for
/// algorithms that reserve it), or relocated. Every marker has the top bit, so the
/// common case is one comparison.
#[inline(always)]
fn blocked<W: WordAlgorithm>(word: u64) -> Option<Blocked> {
    if word < RELOCATED {
        None
    } else if word == RETIRED {
        Some(Blocked::Retired)
    } else if W::RESERVES_MOVED && word == MOVED {
        Some(Blocked::Moving)
    } else {
        Some(Blocked::Relocated)
    }
}

/// Freezes `word` where it is and returns the value the copy that replaces it starts
/// from: the word's last value, which no request can change any more. Called on a word
/// already relocated (by this thread or another), it returns the same value, so every
/// thread that meets a relocation can finish it. `Err` for a retired word (Acquire
/// fence, as in `update`) or one frozen for a move to a new quota.
///
/// Relaxed: the compare-and-set reads the latest value in the word's modification
/// order, so the value frozen is the last any request stored, and every later
/// compare-and-set on the word fails. The copy reaches other threads through the
/// store's publication of it (papaya's Release insertion and Acquire lookup), not
/// through this word; a thread that reads the relocated word reads the frozen value
/// with it, whatever the ordering, since the word never changes again.
pub fn relocate_word<W: WordAlgorithm>(word: &AtomicU64) -> Result<u64, Blocked> {
    // Relaxed: see above.
    let mut current = word.load(Ordering::Relaxed);
    loop {
        match blocked::<W>(current) {
            None => {}
            Some(Blocked::Relocated) => return Ok(current & !RELOCATED),
            Some(Blocked::Retired) => {
                // Acquire: as `update`'s, for the caller's next look at the key.
                fence(Ordering::Acquire);
                return Err(Blocked::Retired);
            }
            Some(blocked) => return Err(blocked),
        }
        if active(Mutant::CopyWithoutFreezing) {
            // The mutant: the copy is made but the word stays live, so a request
            // still holding it can change it after the copy was taken.
            return Ok(current);
        }
        // Relaxed on success and failure: see above.
        match word.compare_exchange_weak(
            current,
            current | RELOCATED,
            Ordering::Relaxed,
            Ordering::Relaxed,
        ) {
            Ok(_) => return Ok(current),
            Err(actual) => current = actual,
        }
    }
}

/// `step` applied to `word` by compare-and-set until it sticks, recomputed from each
/// value found; `Err` once the word is retired or frozen for a move.
///
/// Relaxed throughout: the word guards no other memory — it *is* the state — and exact
/// counting needs only what every atomic read-modify-write gives at any ordering: all
/// writes to one word form a single modification order, and a successful CAS replaces
/// exactly the value it compared against. So no two requests can both take the same
/// token, and a refill is applied once. The one exception is a word found `RETIRED`,
/// after which an Acquire fence pairs with the sweeper's Release (see `evict/`).
/// loom checks all of it in `loom-tests/`.
#[inline(always)]
fn update<W: WordAlgorithm, T>(
    word: &AtomicU64,
    mut step: impl FnMut(u64) -> (u64, T),
) -> Result<T, Blocked> {
    // Relaxed: see above. A stale value makes the CAS fail and retry; where no CAS
    // follows (nothing to change) the answer is one a request ordered just before the
    // newer writes would have had — coherence gives a value no older than any this
    // thread has already seen for the word.
    let mut current = word.load(Ordering::Relaxed);
    loop {
        if let Some(blocked) = blocked::<W>(current) {
            if blocked == Blocked::Retired {
                // Acquire: the sweeper's watermark, raised before it retired this
                // word with Release, is visible to the caller's next look at the key.
                fence(Ordering::Acquire);
            }
            return Err(blocked);
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
#[inline(always)]
pub fn acquire_word<W: WordAlgorithm>(
    algorithm: &W,
    word: &AtomicU64,
    now: u64,
    cost: u32,
) -> Result<Decision, Blocked> {
    update::<W, _>(word, |current| algorithm.acquire(current, now, cost))
}

/// One request applied to a key's word, asked only whether
/// ([`WordAlgorithm::admit`]): `update`'s protocol for a step that answers only
/// whether, the one loop behind every `try_acquire` on a single-word algorithm, keyed
/// or direct.
///
/// Relaxed throughout, as in `update`: the word guards no other memory — it *is* the
/// state — and exact counting needs only what every atomic read-modify-write gives at
/// any ordering (one modification order for the word; a successful CAS replaces
/// exactly the value it compared against). The one exception, as there, is a word
/// found `RETIRED`: a keyed limiter's key being forgotten.
#[inline(always)]
pub fn admit_word<W: WordAlgorithm>(
    algorithm: &W,
    word: &AtomicU64,
    now: u64,
    cost: u32,
) -> Result<bool, Blocked> {
    // Relaxed: see above. A stale value makes the CAS fail and retry; where no CAS
    // follows (a denial, or nothing to change) the answer is one a request ordered
    // just before the newer writes would have had — coherence gives a value no older
    // than any this thread has already seen for the word.
    let mut current = word.load(Ordering::Relaxed);
    loop {
        if let Some(blocked) = blocked::<W>(current) {
            if blocked == Blocked::Retired && !active(Mutant::AdmitWithoutFence) {
                // Acquire: pairs with the sweeper's Release retire CAS (and the SeqCst
                // fence after its raise), as `update`'s fence does: the watermark the
                // sweep raised before retiring this word is visible to the caller's
                // next look at the key, whose fresh state then starts no earlier than
                // the forgotten one was known to be full (loom model 11t).
                fence(Ordering::Acquire);
            }
            return Err(blocked);
        }
        let Some(new) = WordAlgorithm::admit(algorithm, current, now, cost) else {
            // Denied: nothing written, so under attack the key's cache line stays
            // shared between cores.
            return Ok(false);
        };
        if new == current {
            // Allowed with nothing to change (a step that leaves the word as it
            // was): no write.
            return Ok(true);
        }
        // Relaxed on success and failure: see above.
        match word.compare_exchange_weak(current, new, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return Ok(true),
            Err(actual) => current = actual,
        }
        if active(Mutant::TryWithStaleValue) {
            // The mutant: retry with the value computed from the word it lost to.
            // Relaxed: as above.
            if word
                .compare_exchange(current, new, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
            {
                return Ok(true);
            }
        }
    }
}

impl<W: WordAlgorithm, K> Rules<K> for W {
    type State = AtomicU64;
    type Resolved = ();

    fn create(&self, _key: &K) -> AtomicU64 {
        AtomicU64::new(self.fresh())
    }

    // Always: left to itself the compiler keeps this a call, and its register saves
    // and restores cost instructions on every check (results/ANALYSIS.md, "The
    // limiting step").
    #[inline(always)]
    fn acquire(&self, word: &AtomicU64, now: u64, cost: u32) -> Result<Decision, Blocked> {
        acquire_word(self, word, now, cost)
    }

    // Always, as `acquire`: the hot path of every `try_acquire`.
    #[inline(always)]
    fn admit(&self, word: &AtomicU64, now: u64, cost: u32) -> Result<bool, Blocked> {
        admit_word(self, word, now, cost)
    }

    #[inline]
    fn acquire_unshared(
        &self,
        word: &mut AtomicU64,
        now: u64,
        cost: u32,
    ) -> Result<Decision, Blocked> {
        // Relaxed: no other thread can see this word yet (`&mut`); a plain load and
        // store, with no compare-and-set.
        let current = word.load(Ordering::Relaxed);
        if let Some(blocked) = blocked::<W>(current) {
            // No Acquire fence, unlike `update`: a word no other thread has seen was
            // retired by no sweep, so there is no watermark to pair with.
            return Err(blocked);
        }
        let (new, decision) = WordAlgorithm::acquire(self, current, now, cost);
        *word = AtomicU64::new(new);
        Ok(decision)
    }

    #[inline]
    fn available(&self, word: &AtomicU64, now: u64) -> Result<u32, Blocked> {
        // Relaxed: a snapshot of the word itself; it guards no other memory.
        let current = word.load(Ordering::Relaxed);
        match blocked::<W>(current) {
            Some(blocked) => Err(blocked),
            None => Ok(WordAlgorithm::available(self, current, now)),
        }
    }

    fn refund(&self, word: &AtomicU64, now: u64, cost: u32) -> Result<(), Blocked> {
        update::<W, _>(word, |current| {
            (WordAlgorithm::refund(self, current, now, cost), ())
        })
    }

    /// One compare-and-set, as every step on a word: a settle racing a request or a
    /// sweep either lands on the value it was computed from or is computed again.
    #[inline]
    fn settle(
        &self,
        word: &AtomicU64,
        now: u64,
        estimate: u32,
        actual: u32,
    ) -> Result<Settlement, Blocked> {
        update::<W, _>(word, |current| {
            WordAlgorithm::settle(self, current, now, estimate, actual)
        })
    }

    fn fresh_available(&self, _key: impl FnOnce() -> K, now: u64) -> u32 {
        WordAlgorithm::available(self, self.fresh(), now)
    }

    fn relocate(&self, word: &AtomicU64) -> Result<AtomicU64, Blocked> {
        relocate_word::<W>(word).map(AtomicU64::new)
    }

    fn relocated_copy(&self, word: &AtomicU64) -> AtomicU64 {
        // Relaxed: an unstored word, this thread's alone.
        AtomicU64::new(word.load(Ordering::Relaxed) | RELOCATED)
    }

    fn is_retired(&self, word: &AtomicU64) -> bool {
        // Relaxed: a retired word never changes again.
        word.load(Ordering::Relaxed) == RETIRED
    }

    fn retire_if_forgettable(&self, word: &AtomicU64, at: u64) -> Retirement {
        // Relaxed: the value is only compared; the CAS below decides.
        let current = word.load(Ordering::Relaxed);
        match blocked::<W>(current) {
            Some(Blocked::Retired) => return Retirement::AlreadyRetired,
            Some(Blocked::Relocated) => return Retirement::Relocated,
            Some(_) => return Retirement::Moving,
            None => {}
        }
        match self.forgettable_from(current) {
            Some(from) if from <= at => {}
            // The mutant: a key in debt taken for one with nothing to remember.
            _ if active(Mutant::RetireIgnoringDebt) && self.debt(current, at) > 0 => {}
            from => return Retirement::Kept(from.unwrap_or(u64::MAX)),
        }
        if active(Mutant::RemoveWithoutRetiring) {
            return Retirement::Retired;
        }
        // Release: publishes the sweep's watermark to whoever sees RETIRED (so does the
        // SeqCst fence the sweep took after raising it, in `Insertions::flip_and_wait`:
        // either alone suffices, loom model 11). Relaxed on failure: the word changed
        // since it was checked, so it is in use; keep it.
        let retire = choose(
            Mutant::UnorderedRetire,
            Ordering::Release,
            Ordering::Relaxed,
        );
        match word.compare_exchange(current, RETIRED, retire, Ordering::Relaxed) {
            Ok(_) => Retirement::Retired,
            // Changed since it was checked: in use, and forgettable no one knows when.
            Err(_) => Retirement::Kept(at),
        }
    }

    fn resolve(&self, _key: &K) {}

    /// Never asked: one quota for every key is never outdated.
    fn renew(
        &self,
        _word: &AtomicU64,
        _resolved: &(),
        _now: u64,
        _swap: impl FnOnce(AtomicU64) -> bool,
    ) -> Renewal {
        Renewal::Current
    }
}

impl<W: MovableWord> Movable for W {
    type Frozen = u64;

    fn for_quota(quota: &crate::Quota) -> Self {
        MovableWord::for_quota(quota)
    }

    fn freeze(&self, word: &AtomicU64) -> Result<u64, Blocked> {
        // Through `update`, Relaxed: the CAS reads the latest value in the word's
        // modification order (every read-modify-write does), so the value frozen is
        // the last any request stored, and none can store after it. The successor
        // reaches other threads through the map's own publication of the new entry
        // (the index's Release store of a bucket's bitmap and the Acquire load of a
        // lookup), not through this word.
        if active(Mutant::MoveWithoutFreezing) {
            return update::<W, _>(word, |current| (current, current));
        }
        let marker = choose(Mutant::SharedMarker, MOVED, RETIRED);
        update::<W, _>(word, |current| (marker, current))
    }

    fn moment(&self, frozen: &u64) -> u64 {
        MovableWord::moment(self, *frozen)
    }

    fn frozen_available(&self, frozen: &u64, now: u64) -> u32 {
        WordAlgorithm::available(self, *frozen, now)
    }

    fn frozen_debt(&self, frozen: &u64, now: u64) -> u32 {
        WordAlgorithm::debt(self, *frozen, now)
    }

    fn thaw(&self, word: &AtomicU64, frozen: u64) {
        // Relaxed: the word guards no other memory, and while it is MOVED only this
        // thread writes it; a request that met MOVED looks again and finds this.
        word.store(frozen, Ordering::Relaxed);
    }

    fn restored(&self, frozen: &u64) -> AtomicU64 {
        AtomicU64::new(*frozen)
    }
}

/// Property-test inputs shared by the word algorithms' unit tests.
#[cfg(all(test, not(turnstile_loom)))]
pub(crate) mod strategies {
    use crate::Quota;
    use proptest::prelude::*;
    use std::time::Duration;

    /// Capacities and intervals from the whole range, small ones as likely as large.
    pub(crate) fn any_quota() -> impl Strategy<Value = Quota> {
        let capacity = prop_oneof![1..=16u32, any::<u32>().prop_map(|c| c.max(1))];
        let interval = prop_oneof![1..=1_000u64, any::<u64>().prop_map(|i| i.max(1))];
        (capacity, interval).prop_map(|(c, i)| Quota::new(c, Duration::from_nanos(i)).unwrap())
    }

    /// Readings to probe a state at: `random`, and just around `from` (the instant a
    /// predicate should turn at).
    pub(crate) fn readings(from: Option<u64>, random: u64) -> [u64; 4] {
        let from = from.unwrap_or(random);
        [random, from.saturating_sub(1), from, from.saturating_add(1)]
    }
}
