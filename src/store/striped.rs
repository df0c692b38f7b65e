//! A count that threads update at once without sharing a cache line: the key count of
//! the word store, and the insertion handshake's counts (`insertions.rs`).

use crate::sync::{AtomicIsize, Ordering};
use crossbeam_utils::CachePadded;

/// Cells a count is spread over; each thread updates one.
#[cfg(not(turnstile_loom))]
const STRIPES: usize = 16;
/// One cell under loom: stripes only spread contention, which loom does not measure,
/// and a cell chosen by a per-thread counter would differ between its executions.
#[cfg(turnstile_loom)]
const STRIPES: usize = 1;

/// A count spread over [`STRIPES`] cache-padded cells: each thread adds to its own, so
/// two threads counting at once do not contend on one line (a single shared counter
/// cost churn more than the map's own insertion on two cores). Reading sums the cells:
/// exact when no update is in flight.
pub(crate) struct Striped {
    cells: [CachePadded<AtomicIsize>; STRIPES],
}

impl Striped {
    pub(crate) fn new() -> Self {
        Self {
            cells: std::array::from_fn(|_| CachePadded::new(AtomicIsize::new(0))),
        }
    }

    /// This thread's cell.
    #[inline]
    pub(crate) fn cell(&self) -> &AtomicIsize {
        &self.cells[stripe()]
    }

    /// Adds `n` (negative: removes) on this thread's cell.
    #[cfg_attr(turnstile_loom, allow(dead_code))]
    #[inline]
    pub(crate) fn add(&self, n: isize) {
        // Relaxed: a statistic and a heuristic threshold; it guards no other memory.
        self.cell().fetch_add(n, Ordering::Relaxed);
    }

    #[cfg_attr(turnstile_loom, allow(dead_code))]
    /// The count now: the sum of the cells (never below zero, though a removal
    /// counted on one cell may be summed before the insertion counted on another).
    pub(crate) fn sum(&self) -> usize {
        // Relaxed: as in `add`.
        self.sum_with(Ordering::Relaxed).max(0) as usize
    }

    /// The sum of the cells, each loaded with `order`.
    pub(crate) fn sum_with(&self, order: Ordering) -> isize {
        self.cells.iter().map(|cell| cell.load(order)).sum()
    }
}

/// This thread's stripe.
#[inline]
fn stripe() -> usize {
    crate::sync::thread_slot(STRIPES)
}

#[cfg(all(test, not(turnstile_loom)))]
mod tests {
    use super::Striped;

    #[test]
    fn counts_what_threads_add_and_remove() {
        let count = Striped::new();
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
        assert_eq!(count.sum(), 8 * 1000 - 4 * 300);
    }

    #[test]
    fn never_reads_below_zero() {
        let count = Striped::new();
        // A removal counted before the insertion it undoes.
        count.add(-1);
        assert_eq!(count.sum(), 0);
        count.add(1);
        assert_eq!(count.sum(), 0);
        count.add(1);
        assert_eq!(count.sum(), 1);
    }
}
