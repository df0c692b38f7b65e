//! A count of keys that threads inserting at once update without sharing a cache line.

use crossbeam_utils::CachePadded;
use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering};

/// Cells a count is spread over; each thread updates one.
const STRIPES: usize = 16;

/// A key count spread over [`STRIPES`] cache-padded cells: an insertion adds one to
/// its thread's cell, so two threads inserting new keys do not contend on one line
/// (a single shared counter cost churn more than the map's own insertion on two
/// cores). Reading sums the cells: exact when no update is in flight.
pub(crate) struct KeyCount {
    cells: [CachePadded<AtomicIsize>; STRIPES],
}

impl KeyCount {
    pub(crate) fn new() -> Self {
        Self {
            cells: std::array::from_fn(|_| CachePadded::new(AtomicIsize::new(0))),
        }
    }

    /// Adds `n` (negative: removes) on this thread's cell.
    #[inline]
    pub(crate) fn add(&self, n: isize) {
        // Relaxed: a statistic and a heuristic threshold; it guards no other memory.
        self.cells[stripe()].fetch_add(n, Ordering::Relaxed);
    }

    /// The count now: the sum of the cells (never below zero, though a removal
    /// counted on one cell may be summed before the insertion counted on another).
    pub(crate) fn get(&self) -> usize {
        let sum: isize = self
            .cells
            .iter()
            // Relaxed: as in `add`.
            .map(|cell| cell.load(Ordering::Relaxed))
            .sum();
        sum.max(0) as usize
    }
}

/// This thread's cell: threads take cells in turn as they first count.
#[inline]
fn stripe() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        // Relaxed: any distinct-enough spread of threads over cells will do.
        static STRIPE: usize = NEXT.fetch_add(1, Ordering::Relaxed) % STRIPES;
    }
    STRIPE.with(|stripe| *stripe)
}

#[cfg(test)]
mod tests {
    use super::KeyCount;

    #[test]
    fn counts_what_threads_add_and_remove() {
        let count = KeyCount::new();
        std::thread::scope(|s| {
            for t in 0..8 {
                let count = &count;
                s.spawn(move || {
                    for _ in 0..1000 {
                        count.add(1);
                    }
                    // Half the threads remove some of what others added.
                    if t % 2 == 0 {
                        count.add(-300);
                    }
                });
            }
        });
        assert_eq!(count.get(), 8 * 1000 - 4 * 300);
    }

    #[test]
    fn never_reads_below_zero() {
        let count = KeyCount::new();
        // A removal counted before the insertion it undoes.
        count.add(-1);
        assert_eq!(count.get(), 0);
        count.add(1);
        assert_eq!(count.get(), 0);
        count.add(1);
        assert_eq!(count.get(), 1);
    }
}
