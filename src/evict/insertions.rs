//! A new key's first request against a sweep: the handshake that keeps the watermark
//! exact when the key's state is stored without a lock.
//!
//! A new key's first request is applied to its state before the state is published
//! (`Store::get_or_insert`), at a reading raised to the watermark as it reads it then.
//! If a sweep raised the watermark and forgot an earlier state of the same key after
//! that read but before the insertion, the new state would be dated before a
//! forgetting it follows: a lagging reading meeting a fresh state, which the watermark
//! exists to prevent (`evict`, "The protocol"). On a store with locks the key's lock
//! ordered the two; here a handshake does:
//!
//! - an insertion *registers* (adds one to a count of the current phase), then, after
//!   a `SeqCst` fence, checks the phase is still the one it registered in (else it
//!   registers again), reads the watermark, applies the request, inserts, and
//!   deregisters;
//! - a sweep, after raising the watermark and before retiring anything, flips the
//!   phase and, after a `SeqCst` fence, waits until the old phase's count is zero.
//!
//! So every insertion that read the watermark before the raise has published its
//! state before the sweep retires a word: a state of the key forgotten by that sweep
//! was present at the insertion, which then lost the race and went to it. Insertions
//! that register after the flip read the raised watermark. The sweep waits for at
//! most the insertions in flight when it flipped, each one papaya insertion; no
//! request ever waits for it. Loom model 16 checks the handshake on the real limiter,
//! with one mutant that reads the watermark before registering and one whose sweep
//! does not wait; loom rejects both.

use crate::sync::mutants::{Mutant, active};
use crate::sync::{AtomicUsize, Ordering, fence, yield_now};
use crossbeam_utils::CachePadded;

/// Cells each phase's count is spread over; each thread registers in one.
#[cfg(not(turnstile_loom))]
const STRIPES: usize = 16;
/// One cell under loom: stripes only spread contention, which loom does not measure.
#[cfg(turnstile_loom)]
const STRIPES: usize = 1;

/// Insertions in flight, counted per phase (see the module docs).
pub(crate) struct Insertions {
    /// The phase new insertions register in: 0 or 1.
    phase: AtomicUsize,
    /// Insertions registered in each phase and not yet done, spread over stripes so
    /// that threads inserting at once do not share a cache line.
    counts: [[CachePadded<AtomicUsize>; STRIPES]; 2],
}

/// An insertion in flight: deregisters when dropped, also when the insertion panics
/// (a key's `Hash` or `Eq` may), so that no sweep waits for it forever.
#[must_use = "an insertion is registered only while its registration lives"]
pub(crate) struct Registration<'a> {
    count: &'a AtomicUsize,
}

impl Insertions {
    pub(crate) fn new() -> Self {
        Self {
            phase: AtomicUsize::new(0),
            counts: std::array::from_fn(|_| {
                std::array::from_fn(|_| CachePadded::new(AtomicUsize::new(0)))
            }),
        }
    }

    /// Registers an insertion about to read the watermark. The watermark read after
    /// this returns is at least that of every sweep that does not wait for the
    /// registration.
    #[inline]
    pub(crate) fn register(&self) -> Registration<'_> {
        let stripe = stripe();
        loop {
            // Relaxed: the check after the fence decides which phase counts.
            let phase = self.phase.load(Ordering::Relaxed);
            let count = &self.counts[phase][stripe];
            // Relaxed: ordered before the phase check and the watermark read by the
            // fence below.
            count.fetch_add(1, Ordering::Relaxed);
            // SeqCst fence: pairs with the sweep's fence after its flip (`flip_and_wait`).
            // Either the sweep's loads of the counts see this registration, or this
            // thread's loads below see the sweep's flip and its raised watermark.
            fence(Ordering::SeqCst);
            // Acquire: a phase flipped by a sweep carries the watermark raised before
            // the flip (Release there), so an insertion that sees the flip reads it.
            if self.phase.load(Ordering::Acquire) == phase {
                return Registration { count };
            }
            // The phase flipped meanwhile: the sweep may not wait for this count.
            // Release: as in `Registration::drop`.
            count.fetch_sub(1, Ordering::Release);
        }
    }

    /// Flips the phase and waits until every insertion registered in the old one is
    /// done. Called by a sweep after it raises the watermark, before it retires
    /// anything; sweeps are one at a time (the sweep lock).
    pub(crate) fn flip_and_wait(&self) {
        if active(Mutant::UnorderedRetire) {
            return;
        }
        // Release: the raised watermark, sequenced before, reaches every insertion
        // whose phase check sees the flip (Acquire there). Relaxed would do for the
        // read half: only the sweep lock's holder flips.
        let old = self.phase.fetch_xor(1, Ordering::Release);
        // SeqCst fence: pairs with the fence in `register`.
        fence(Ordering::SeqCst);
        if active(Mutant::SweepWithoutWaiting) {
            return;
        }
        // Acquire: reading a count an insertion lowered (Release) makes that
        // insertion's published state visible before this sweep retires anything.
        while self.counts[old]
            .iter()
            .any(|count| count.load(Ordering::Acquire) != 0)
        {
            yield_now();
        }
    }
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        // Release: the insertion's published state happens before the sweep that
        // reads this count (Acquire in `flip_and_wait`).
        self.count.fetch_sub(1, Ordering::Release);
    }
}

/// This thread's stripe: threads take stripes in turn as they first insert.
#[cfg(not(turnstile_loom))]
#[inline]
fn stripe() -> usize {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    thread_local! {
        // Relaxed: any spread of threads over stripes will do.
        static STRIPE: usize = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % STRIPES;
    }
    STRIPE.with(|stripe| *stripe)
}

/// The one stripe under loom.
#[cfg(turnstile_loom)]
#[inline]
fn stripe() -> usize {
    0
}

#[cfg(all(test, not(turnstile_loom)))]
mod tests {
    use super::Insertions;
    use std::sync::atomic::{AtomicBool, Ordering};

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
