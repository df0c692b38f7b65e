//! The watermark: every key forgotten so far was forgettable as of it, and a request
//! whose clock reading is older counts as taken at it instead (see `crate::evict`,
//! "Why forgetting is exact").

use crate::sync::{AtomicU64, Ordering};

/// The instant (ns since the epoch) every forgotten key was forgettable as of.
pub(crate) struct Watermark {
    instant: AtomicU64,
}

impl Watermark {
    /// At the epoch: nothing forgotten yet.
    pub(crate) fn new() -> Self {
        Self {
            instant: AtomicU64::new(0),
        }
    }

    /// `now` raised to the watermark: a reading older than the latest forgetting is
    /// replaced by the watermark, a later (and still past) instant.
    #[inline]
    pub(crate) fn reading(&self, now: u64) -> u64 {
        // Relaxed: callers load it after finding the key's state — through the
        // store's Acquire lookup, or the Acquire fence taken on seeing RETIRED — or,
        // for a new key's first request, after registering its insertion (the SeqCst
        // fence in `Insertions::register`): a forgetting whose raise that load misses
        // waits for the insertion to be done before it retires anything. Each orders it
        // after the raise (sequenced before the phase flip's Release, and before every
        // Release retire). Any older value is a watermark no fresh state depends on.
        now.max(self.instant.load(Ordering::Relaxed))
    }

    /// Raises the watermark to `at` (it never goes back). The caller then flips the
    /// insertion phase, and retires nothing until the insertions registered before
    /// are done (`crate::store::insertions`).
    pub(crate) fn raise(&self, at: u64) {
        // Relaxed: sequenced before the phase flip (Release), which publishes it to
        // new insertions, and before every retire compare-and-set (Release), which
        // publishes it to whoever meets the retired state; see `reading`.
        self.instant.fetch_max(at, Ordering::Relaxed);
    }
}
