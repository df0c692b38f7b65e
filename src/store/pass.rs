//! A pass of forgetting over a store taken in parts (the word store's sweeps): its
//! number, its instant and its bookkeeping, shared by whoever takes a part (new keys'
//! shares, the sweeper thread's walk) and by the schedule's holder, which opens and
//! closes it (`crate::evict`, "The word store's sweeps").

use crate::sync::{AtomicU64, AtomicUsize, Ordering};

/// What a part of a pass made of one word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Judged {
    /// Kept: not forgettable before this instant, unless a request changes it.
    Kept(u64),
    /// Retired (now or before): the store removes it.
    Removed,
}

/// One pass of forgetting over the word store, taken in parts (see the module docs
/// of `crate::evict`): opened by the schedule's holder once the watermark is raised
/// and the insertions begun before are waited out; each of the store's parts (a
/// segment) is then finished exactly once, by whoever holds its lock when its last
/// group is judged, and counted then; the schedule's holder closes the pass once
/// every part is done.
pub(crate) struct Pass {
    /// Twice the passes opened so far, plus one while one is open: a part records
    /// the pass it was finished in by this number, under its lock.
    generation: AtomicU64,
    /// The instant the open pass forgets as of: never above the watermark, raised
    /// with every insertion begun before waited out.
    at: AtomicU64,
    /// When the open pass began (the clock reading it was opened at).
    began: AtomicU64,
    /// Parts not yet finished in the open pass.
    left: AtomicUsize,
    /// Words the finished parts kept.
    kept: AtomicUsize,
    /// The earliest instant at which a word a finished part kept could be forgotten.
    kept_until: AtomicU64,
}

/// A closed pass's bookkeeping: what `Schedule::swept` needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Closed {
    pub(crate) kept: usize,
    pub(crate) began: u64,
    pub(crate) kept_until: u64,
}

impl Pass {
    pub(crate) fn new() -> Self {
        Self {
            generation: AtomicU64::new(0),
            at: AtomicU64::new(0),
            began: AtomicU64::new(0),
            left: AtomicUsize::new(0),
            kept: AtomicUsize::new(0),
            kept_until: AtomicU64::new(u64::MAX),
        }
    }

    /// The open pass's number, if one is open. Its instant ([`at`](Self::at)) and its
    /// parts are published with it.
    #[inline]
    pub(crate) fn open_generation(&self) -> Option<u64> {
        // Acquire: pairs with the Release in `open`, so that whoever sees the pass
        // open reads its instant and its count of parts (and, through the opener's
        // wait for the insertions, every state stored before).
        let generation = self.generation.load(Ordering::Acquire);
        (generation % 2 == 1).then_some(generation)
    }

    /// Whether a pass is open; a hint for new keys' insertions (a share checks again
    /// under the part's lock).
    #[inline]
    pub(crate) fn is_open(&self) -> bool {
        // Relaxed: a hint; `open_generation`, under a part's lock, decides.
        self.generation.load(Ordering::Relaxed) % 2 == 1
    }

    /// The instant the open pass forgets as of: read after `open_generation`, so that
    /// it is at least the instant it was opened with (or a later refresh).
    #[inline]
    pub(crate) fn at(&self) -> u64 {
        // Acquire: pairs with the Release of a refresh (`refresh`), which follows its
        // wait for the insertions begun before its raise; the opening instant is
        // ordered by `open_generation`'s Acquire.
        self.at.load(Ordering::Acquire)
    }

    /// A part finished in the open pass, having kept `kept` words, none forgettable
    /// before `kept_until`. Called once per part and pass, by whoever holds the part's
    /// lock when it finishes it; the pass cannot close before.
    pub(crate) fn part_done(&self, kept: usize, kept_until: u64) {
        // Relaxed, both: published by the Release decrement of `left` below, which
        // the closer reads with Acquire (`done`).
        self.kept.fetch_add(kept, Ordering::Relaxed);
        self.kept_until.fetch_min(kept_until, Ordering::Relaxed);
        // Release: the counts above happen before the closer's Acquire load of `left`.
        self.left.fetch_sub(1, Ordering::Release);
    }

    /// Whether every part of the open pass is finished.
    pub(crate) fn done(&self) -> bool {
        // Acquire: pairs with `part_done`'s Release, so that the counts are complete.
        self.left.load(Ordering::Acquire) == 0
    }

    /// Opens a pass of `parts` parts forgetting as of `at`, begun at `began`. For the
    /// schedule's holder, once the watermark is raised to `at` and the insertions
    /// begun before are done.
    pub(crate) fn open(&self, at: u64, began: u64, parts: usize) {
        // Relaxed, all: published by the Release store of the generation below.
        self.at.store(at, Ordering::Relaxed);
        self.began.store(began, Ordering::Relaxed);
        self.left.store(parts, Ordering::Relaxed);
        self.kept.store(0, Ordering::Relaxed);
        self.kept_until.store(u64::MAX, Ordering::Relaxed);
        // Relaxed: only the schedule's holder writes the generation.
        let generation = self.generation.load(Ordering::Relaxed);
        debug_assert!(
            generation.is_multiple_of(2),
            "a pass opened over an open one"
        );
        // Release: see `open_generation`.
        self.generation.store(generation + 1, Ordering::Release);
    }

    /// Moves the open pass's instant to `at`, for the schedule's holder once the
    /// watermark is raised to it and the insertions begun before are done.
    pub(crate) fn refresh(&self, at: u64) {
        // Release: see `at`.
        self.at.store(at, Ordering::Release);
    }

    /// Closes the open pass, whose parts are all done; its bookkeeping. For the
    /// schedule's holder.
    pub(crate) fn close(&self) -> Closed {
        // Relaxed: only the schedule's holder writes it; parts that load it under
        // their lock and find it even do nothing.
        let generation = self.generation.load(Ordering::Relaxed);
        debug_assert!(generation % 2 == 1, "no pass open to close");
        self.generation.store(generation + 1, Ordering::Relaxed);
        // Relaxed, all: `done`'s Acquire ordered the parts' counts before these.
        Closed {
            kept: self.kept.load(Ordering::Relaxed),
            began: self.began.load(Ordering::Relaxed),
            kept_until: self.kept_until.load(Ordering::Relaxed),
        }
    }
}

/// For the word store's tests (compiled out under loom).
#[cfg(all(test, not(turnstile_loom)))]
impl Pass {
    /// A pass numbered `number`, open, forgetting as of `at` over `parts` parts: as the
    /// schedule's holder would open it, for the stores' tests.
    pub(crate) fn opened(number: u64, at: u64, parts: usize) -> Self {
        let pass = Self::new();
        pass.generation.store(2 * number, Ordering::Relaxed);
        pass.open(at, at, parts);
        pass
    }

    /// The pass closed, if every part is done: its bookkeeping.
    pub(crate) fn close_if_done(&self) -> Option<Closed> {
        self.done().then(|| self.close())
    }
}
