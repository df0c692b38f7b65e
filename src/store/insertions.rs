//! Insertions in flight, counted per phase: the handshake that lets a thread that
//! changes where keys go (a rotation of the ring's generations, `ring/`) or what a new
//! state may be dated at (a sweep's watermark, `crate::evict`) know when every
//! insertion that began before the change is done — without any insertion waiting.
//!
//! - an insertion *registers* (adds one to the count of the current phase), then, after
//!   a `SeqCst` fence, checks the phase is still the one it registered in (else it
//!   registers again), and only then reads what it depends on (the ring's view, the
//!   watermark); it deregisters once its state is stored or its insertion lost;
//! - a change is made first (the view rotated, the watermark raised), then the phase
//!   is *flipped* and, after a `SeqCst` fence, the change's maker (or anyone later)
//!   checks whether the old phase's count is zero: [`settled`](Insertions::settled).
//!
//! So every insertion that read the state before the change has finished once the old
//! phase is settled, and insertions that register after the flip read the changed
//! state. A sweep that forgets keys waits for that before it retires anything (a new
//! key's state dated before the watermark it raised must be published first, to lose
//! its race to the state being forgotten); a rotation lets requests go on at once and
//! keeps claims in the old generation until it is settled (`ring/`). No insertion ever
//! waits: only [`flip_and_wait`](Insertions::flip_and_wait) does, in the word store's
//! sweep (on the sweeper thread, in `evict_idle`, or on a request when there is no
//! thread). Loom model 16 checks the handshake on the real limiter (the
//! ring, and the word store as 16w), with a mutant whose sweep does not wait, and on
//! the word store one that reads the watermark before registering (on the ring a
//! rotation between the look and the registration already sends the insertion back
//! to look again); loom rejects them.

use super::striped::Striped;
use crate::sync::mutants::{Mutant, active};
use crate::sync::{AtomicIsize, AtomicUsize, Ordering, fence, yield_now};

/// Insertions in flight, counted per phase (see the module docs).
pub(crate) struct Insertions {
    /// The phase new insertions register in: 0 or 1.
    phase: AtomicUsize,
    /// Insertions registered in each phase and not yet done, spread over stripes so
    /// that threads inserting at once do not share a cache line.
    counts: [Striped; 2],
}

/// An insertion in flight: deregisters when dropped, also when the insertion panics
/// (a key's `Hash` or `Eq` may), so that nothing waits for it forever.
#[must_use = "an insertion is registered only while its registration lives"]
pub(crate) struct Registration<'a> {
    count: &'a AtomicIsize,
}

impl Insertions {
    pub(crate) fn new() -> Self {
        Self {
            phase: AtomicUsize::new(0),
            counts: [Striped::new(), Striped::new()],
        }
    }

    /// Registers an insertion about to read what a change may change (the ring's
    /// view, the watermark): what it reads after this returns is at least what every
    /// change it is not waited for made.
    #[inline]
    pub(crate) fn register(&self) -> Registration<'_> {
        loop {
            // Relaxed: the check after the fence decides which phase counts.
            let phase = self.phase.load(Ordering::Relaxed);
            let count = self.counts[phase].cell();
            // Relaxed: ordered before the phase check and the reads after it by the
            // fence below.
            count.fetch_add(1, Ordering::Relaxed);
            // SeqCst fence: pairs with the fence after a flip (`flip`). Either the
            // flipper's loads of the counts see this registration, or this thread's
            // loads below see the flip and the change made before it.
            fence(Ordering::SeqCst);
            // Acquire: a flip carries the change made before it (Release there), so an
            // insertion that sees the flip reads the change.
            if self.phase.load(Ordering::Acquire) == phase {
                return Registration { count };
            }
            // The phase flipped meanwhile: nothing may wait for this count.
            // Release: as in `Registration::drop`.
            count.fetch_sub(1, Ordering::Release);
        }
    }

    /// Flips the phase, after a change that insertions registered before must be
    /// waited out for (see [`settled`](Self::settled)); `false`, without flipping,
    /// while the insertions of the flip before are not all done (their phase is the
    /// one new insertions would register in). One thread flips at a time (the
    /// caller's schedule).
    pub(crate) fn flip(&self) -> bool {
        // Relaxed: only the schedule's holder flips; the counts' loads below order
        // what matters.
        let current = self.phase.load(Ordering::Relaxed);
        if !self.done(1 - current) {
            return false;
        }
        // Release: the change, sequenced before, reaches every insertion whose phase
        // check sees the flip (Acquire there).
        self.phase.store(1 - current, Ordering::Release);
        // SeqCst fence: pairs with the fence in `register`.
        fence(Ordering::SeqCst);
        true
    }

    /// Whether every insertion registered before the last flip is done: those that
    /// may have read what the change replaced.
    pub(crate) fn settled(&self) -> bool {
        if active(Mutant::SweepWithoutWaiting) {
            return true;
        }
        // Relaxed: only the schedule's holder flips, so the phase is its own write.
        let current = self.phase.load(Ordering::Relaxed);
        self.done(1 - current)
    }

    /// Whether no insertion registered in `phase` is in flight.
    fn done(&self, phase: usize) -> bool {
        // Acquire: reading a count an insertion lowered (Release) makes that
        // insertion's stored state visible to what the caller does next.
        self.counts[phase].sum_with(Ordering::Acquire) == 0
    }

    /// Flips the phase and waits until every insertion registered before is done
    /// (and first, if the flip before is not settled, until it is): for callers that
    /// may wait: the word store's sweep (the sweeper thread, `evict_idle`, or a request
    /// only when there is no thread to ask).
    pub(crate) fn flip_and_wait(&self) {
        if active(Mutant::UnorderedRetire) {
            return;
        }
        while !self.flip() {
            yield_now();
        }
        while !self.settled() {
            yield_now();
        }
    }
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        // Release: the insertion's stored state happens before whoever reads this
        // count lowered (Acquire in `done`).
        self.count.fetch_sub(1, Ordering::Release);
    }
}

#[cfg(all(test, not(turnstile_loom)))]
mod tests {
    use super::Insertions;
    use crate::sync::{AtomicBool, Ordering};

    /// A sweep flipping on another thread must not finish its wait while
    /// `registration` lives; once it is dropped, it does.
    fn waits_for(insertions: &Insertions, registration: super::Registration<'_>) {
        let flipped = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                insertions.flip_and_wait();
                // SeqCst: a flag the test reads; its ordering is not under test.
                flipped.store(true, Ordering::SeqCst);
            });
            // However long the sweep runs meanwhile, it cannot be done.
            std::thread::sleep(std::time::Duration::from_millis(20));
            assert!(
                !flipped.load(Ordering::SeqCst),
                "the sweep went on while an insertion it must wait for was in flight"
            );
            drop(registration);
        });
        assert!(flipped.load(Ordering::SeqCst));
    }

    #[test]
    fn a_sweep_waits_for_an_insertion_registered_before_it() {
        let insertions = Insertions::new();
        let registration = insertions.register();
        waits_for(&insertions, registration);
    }

    #[test]
    fn the_next_sweep_waits_for_an_insertion_registered_after_a_flip() {
        let insertions = Insertions::new();
        insertions.flip_and_wait();
        let registration = insertions.register();
        waits_for(&insertions, registration);
    }

    #[test]
    fn a_flip_waits_for_the_flip_before_it_to_settle() {
        let insertions = Insertions::new();
        let early = insertions.register();
        assert!(insertions.flip(), "nothing registered in the other phase");
        assert!(
            !insertions.settled(),
            "an insertion from before the flip is in flight"
        );
        // A second flip would count `early` as registered after it.
        assert!(!insertions.flip());
        drop(early);
        assert!(insertions.settled());
        let late = insertions.register();
        assert!(insertions.flip());
        assert!(!insertions.settled());
        drop(late);
        assert!(insertions.settled());
    }

    #[test]
    fn finished_and_panicked_insertions_are_not_waited_for() {
        let insertions = Insertions::new();
        drop(insertions.register());
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _registration = insertions.register();
            panic!("a key's Hash panicked mid-insertion");
        }));
        assert!(panicked.is_err());
        // Both counts are back at zero: these return at once (were either still
        // counted, they would wait forever).
        insertions.flip_and_wait();
        insertions.flip_and_wait();
    }
}
