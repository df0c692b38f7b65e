//! When forgetting happens: the ring's cycle (rotate, let claims close, let the old
//! generation age, raise the watermark, drain), the word store's sweeps, and the rate
//! of sweeps asked for at the key cap. State only; the steps themselves are in
//! `cycle.rs` and `sweep.rs`.

use crate::sync::{AtomicBool, AtomicU8, AtomicU64, Mutex, MutexGuard, Ordering, Unpoisoned};

/// A store smaller than this is not forgotten from automatically, unless a request at
/// the `max_keys` cap asks for room.
#[cfg(not(turnstile_shuttle))]
pub const MIN_SWEEP_KEYS: usize = 1024;
/// A store smaller than this is not forgotten from automatically: under
/// `--cfg turnstile_shuttle` two keys, so that a shuttle test with a handful of keys
/// reaches the sweeper thread.
#[cfg(turnstile_shuttle)]
pub const MIN_SWEEP_KEYS: usize = 2;

/// Where the ring's cycle stands; on the word store, `Idle` (no pass open),
/// `Settling` (the watermark raised for a pass, its insertions not yet done) and
/// `Draining` (a pass open) only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Stage {
    /// The old generation is empty: the next rotation waits for the young one to fill.
    Idle,
    /// Rotated: claims stay open until the insertions begun before are done.
    Claims,
    /// Claims closed: the old generation ages for a margin, so that what no request
    /// touched since the rotation is forgettable when it drains.
    Aging,
    /// The watermark raised for the drain: waiting for the insertions begun before.
    Settling,
    /// The old generation drains.
    Draining,
}

impl Stage {
    fn from_u8(stage: u8) -> Stage {
        match stage {
            0 => Stage::Idle,
            1 => Stage::Claims,
            2 => Stage::Aging,
            3 => Stage::Settling,
            _ => Stage::Draining,
        }
    }
}

/// A limiter's schedule of forgetting (see the module docs).
pub(crate) struct Schedule {
    /// One step of the schedule at a time: a request tries, and leaves the step to
    /// whoever holds it; the sweeper thread and `evict_idle` wait.
    lock: Mutex<()>,
    /// The ring's [`Stage`].
    stage: AtomicU8,
    /// When the last rotation happened (ns since the epoch); on the word store, when
    /// the pass being opened began.
    rotated_at: AtomicU64,
    /// The instant the drain under way forgets as of, and when it was due to open; on
    /// the word store, the instant the pass being opened forgets as of.
    drain_at: AtomicU64,
    /// The word store: its size at which a sweep is due.
    next_sweep: AtomicU64,
    /// The word store: no automatic sweep before this instant, when one could first
    /// forget a key the last sweep kept.
    useful_from: AtomicU64,
    /// The word store: when the last sweep began; a reading no later than it means
    /// the clock stands still or stepped back, and `useful_from` is not waited for.
    last_began: AtomicU64,
    /// When a request at the key cap last asked for room.
    last_cap_sweep: AtomicU64,
    /// A request at the key cap asked for room: the next cycle comes whatever the
    /// young generation holds, and does not wait for the old one to age.
    room_wanted: AtomicBool,
}

impl Schedule {
    /// A schedule for a limiter with a `margin` (ns) that expects `expected_keys`.
    pub(crate) fn new(margin: u64, expected_keys: usize) -> Self {
        Self {
            lock: Mutex::new(()),
            stage: AtomicU8::new(Stage::Idle as u8),
            rotated_at: AtomicU64::new(0),
            drain_at: AtomicU64::new(0),
            next_sweep: AtomicU64::new((2 * expected_keys).max(MIN_SWEEP_KEYS) as u64),
            // As if a sweep had begun at the epoch and kept nothing.
            useful_from: AtomicU64::new(margin),
            last_began: AtomicU64::new(0),
            last_cap_sweep: AtomicU64::new(0),
            room_wanted: AtomicBool::new(false),
        }
    }

    /// Holds the schedule, waiting for whoever holds it.
    pub(crate) fn lock(&self) -> MutexGuard<'_, ()> {
        self.lock.lock().unpoisoned()
    }

    /// Holds the schedule if no one else does.
    pub(crate) fn try_lock(&self) -> Option<MutexGuard<'_, ()>> {
        match self.lock.try_lock() {
            Ok(held) => Some(held),
            Err(std::sync::TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }

    /// The ring's stage. Read without the lock, it may be a step behind.
    #[inline]
    pub(crate) fn stage(&self) -> Stage {
        // Relaxed: a hint for requests (whether to share the drain); the holder of the
        // lock reads its own writes.
        Stage::from_u8(self.stage.load(Ordering::Relaxed))
    }

    /// Moves the ring to `stage`; for the holder of the lock.
    pub(crate) fn set_stage(&self, stage: Stage) {
        // Relaxed: see `stage`; what the stage stands for is published by the ring's
        // view and the insertion handshake.
        self.stage.store(stage as u8, Ordering::Relaxed);
    }

    /// Records a rotation at `now`.
    pub(crate) fn rotated(&self, now: u64) {
        // Relaxed: the lock's holder's bookkeeping.
        self.rotated_at.store(now, Ordering::Relaxed);
    }

    /// When the last rotation happened.
    pub(crate) fn rotated_at(&self) -> u64 {
        // Relaxed: as in `rotated`.
        self.rotated_at.load(Ordering::Relaxed)
    }

    /// Records the instant the drain forgets as of.
    pub(crate) fn drain_from(&self, at: u64) {
        // Relaxed: read by the drain's steps after they see the stage, under the
        // drain's own lock, which the opener released after this.
        self.drain_at.store(at, Ordering::Relaxed);
    }

    /// The instant the drain under way forgets as of.
    pub(crate) fn drain_at(&self) -> u64 {
        // Relaxed: see `drain_from`.
        self.drain_at.load(Ordering::Relaxed)
    }

    /// Whether a word store of `len` keys is due for a sweep at `now`: at least twice
    /// the keys the last sweep kept, and a margin past the first instant at which one
    /// of them could be forgotten (unless the clock stands still or stepped back).
    pub(crate) fn sweep_due(&self, len: usize, now: u64) -> bool {
        // Relaxed: thresholds of the lock's holder; a stale one only delays a sweep.
        let clock_moved = now > self.last_began.load(Ordering::Relaxed);
        if clock_moved && now < self.useful_from.load(Ordering::Relaxed) {
            return false;
        }
        len as u64 >= self.next_sweep.load(Ordering::Relaxed)
    }

    /// Records a word store's sweep that began at `began` and kept `kept` keys, none
    /// of which is forgettable before `kept_until`: the next is due at twice the keys
    /// kept, and useful no earlier than a margin after `kept_until` or `began`,
    /// whichever is first.
    pub(crate) fn swept(&self, margin: u64, kept: usize, began: u64, kept_until: u64) {
        // Relaxed: see `sweep_due`.
        self.useful_from.store(
            kept_until.min(began).saturating_add(margin),
            Ordering::Relaxed,
        );
        self.last_began.store(began, Ordering::Relaxed);
        self.next_sweep
            .store((2 * kept).max(MIN_SWEEP_KEYS) as u64, Ordering::Relaxed);
    }

    /// Whether a new key at the cap may ask for room now (at most once per `period`,
    /// so an attack at the cap cannot keep the sweeper busy).
    pub(crate) fn cap_sweep_allowed(&self, now: u64, period: u64) -> bool {
        // Relaxed: a rate limit on asking; it guards no other memory.
        let last = self.last_cap_sweep.load(Ordering::Relaxed);
        now.saturating_sub(last) >= period
            && self
                .last_cap_sweep
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }

    /// Records that a request at the cap asked for room.
    pub(crate) fn want_room(&self) {
        // Relaxed: read by the sweeper thread after the wake-up that follows (the
        // signal's Release and Acquire order it).
        self.room_wanted.store(true, Ordering::Relaxed);
    }

    /// Whether a request at the cap asked for room since the last cycle ended.
    pub(crate) fn room_wanted(&self) -> bool {
        // Relaxed: see `want_room`.
        self.room_wanted.load(Ordering::Relaxed)
    }

    /// The cycle that made room ended.
    pub(crate) fn room_made(&self) {
        // Relaxed: see `want_room`.
        self.room_wanted.store(false, Ordering::Relaxed);
    }

    /// The wait until a request at the cap may ask for room again: `Decision::Overflow`'s
    /// hint.
    pub(crate) fn next_cap_sweep_in(&self, now: u64, period: u64) -> std::time::Duration {
        // Relaxed: as in `cap_sweep_allowed`.
        let last = self.last_cap_sweep.load(Ordering::Relaxed);
        // Saturating: near the end of the clock the next one is at its end.
        std::time::Duration::from_nanos(last.saturating_add(period).saturating_sub(now).max(1))
    }
}
