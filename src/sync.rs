//! The one place that names atomics (and the other primitives a checker must see).
//!
//! Normal builds use `std`'s; builds with `--cfg turnstile_loom` use loom's, so the
//! model checker in `loom-tests/` sees every atomic access turnstile makes; builds with
//! `--cfg turnstile_shuttle` use shuttle's, so `shuttle-tests/` can run the whole
//! limiter (the real stores, the sweeper thread) under randomized schedules. The cfgs
//! are turnstile's own (not `loom`), so dependencies such as papaya keep their std
//! atomics: the checkers schedule at turnstile's own primitives only.

#[cfg(not(any(turnstile_loom, turnstile_shuttle)))]
pub(crate) use std::sync::atomic::{
    AtomicBool, AtomicIsize, AtomicU8, AtomicU64, AtomicUsize, Ordering, fence,
};
#[cfg(not(any(turnstile_loom, turnstile_shuttle)))]
pub(crate) use std::sync::{Arc, Mutex, MutexGuard, RwLock};
#[cfg(not(any(turnstile_loom, turnstile_shuttle)))]
pub(crate) use std::thread::yield_now;

#[cfg(turnstile_loom)]
pub(crate) use loom::sync::atomic::{
    AtomicBool, AtomicIsize, AtomicU8, AtomicU64, AtomicUsize, Ordering, fence,
};
#[cfg(turnstile_loom)]
pub(crate) use loom::sync::{Arc, Mutex, MutexGuard, RwLock};
#[cfg(turnstile_loom)]
pub(crate) use loom::thread::yield_now;

#[cfg(turnstile_shuttle)]
pub(crate) use shuttle::sync::atomic::{
    AtomicBool, AtomicIsize, AtomicU8, AtomicU64, AtomicUsize, Ordering, fence,
};
#[cfg(turnstile_shuttle)]
pub(crate) use shuttle::sync::{Arc, Mutex, MutexGuard, RwLock};
#[cfg(turnstile_shuttle)]
pub(crate) use shuttle::thread::yield_now;

/// This thread's slot among `slots`: threads take slots in turn as they first ask.
/// For spreading per-thread counts over cache lines (`store/striped.rs`); under loom
/// always 0, since a counter kept across a model's executions would make them differ.
#[inline]
pub(crate) fn thread_slot(slots: usize) -> usize {
    #[cfg(turnstile_loom)]
    {
        let _ = slots;
        0
    }
    #[cfg(not(turnstile_loom))]
    {
        // std's atomic, whatever the build: a static, which loom's and shuttle's
        // atomics cannot be, and only a spread of threads over slots, which no checker
        // needs to see.
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        thread_local! {
            // Relaxed: any spread of threads over slots will do.
            static SLOT: usize = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        SLOT.with(|slot| *slot % slots)
    }
}

/// This thread's next turn among `slots`: its slot ([`thread_slot`]) moved on by one at
/// each call, so that a thread's successive calls go round every slot, and threads'
/// rounds start apart. Under the checkers always 0: a count kept across executions
/// would make them differ (and under shuttle every thread is one OS thread).
#[inline]
pub(crate) fn next_turn(slots: usize) -> usize {
    #[cfg(any(turnstile_loom, turnstile_shuttle))]
    {
        let _ = slots;
        0
    }
    #[cfg(not(any(turnstile_loom, turnstile_shuttle)))]
    {
        thread_local! {
            static TURN: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
        }
        let turn = TURN.with(|turn| {
            let now = turn.get();
            turn.set(now.wrapping_add(1));
            now
        });
        thread_slot(slots).wrapping_add(turn) % slots
    }
}

/// A lock's guard whether or not a thread panicked while it held the lock: the one
/// way turnstile takes every lock of its own (std's, loom's and shuttle's all answer
/// with std's `LockResult`). Each critical section leaves what it guards valid at every
/// step, or runs only code that cannot panic (a step function; an allocation failure
/// aborts), so a poisoned lock still guards valid data, and a panic in one request
/// must not make every later request on the lock panic too.
pub(crate) trait Unpoisoned<G> {
    /// The guard, poisoned or not.
    fn unpoisoned(self) -> G;
}

impl<G> Unpoisoned<G> for std::sync::LockResult<G> {
    #[inline]
    fn unpoisoned(self) -> G {
        self.unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The threads turnstile starts (the limiter's sweeper thread) and how one waits:
/// std's, loom's (which starts none: its models sweep on demand) or shuttle's, whose
/// scheduler must own every thread of a test and see every park and unpark.
pub(crate) mod thread {
    #[cfg(not(any(turnstile_loom, turnstile_shuttle)))]
    pub(crate) use std::thread::{Builder, JoinHandle, Thread, park};

    #[cfg(turnstile_loom)]
    pub(crate) use loom::thread::{Thread, park};

    #[cfg(turnstile_shuttle)]
    pub(crate) use shuttle::thread::{Builder, JoinHandle, Thread, park};
}

/// Deliberately broken protocol variants (mutants) that the loom models in
/// `loom-tests/` and the shuttle tests in `shuttle-tests/` switch on, to prove that
/// their assertions can fail. The protocols ask through this shim, in every build:
/// in normal builds no mutant is ever active ([`active`] is a constant `false` the
/// compiler folds away, and [`choose`] the correct value), so the hooks cost nothing
/// and need no `cfg` of their own. Only loom and shuttle builds can switch one on
/// ([`with`]); both run a test's threads on the thread that checks it (loom's as
/// generators, shuttle's as coroutines on the caller's OS thread), so a thread-local
/// switch reaches every thread of the test, and tests running at once on other OS
/// threads keep their own.
pub mod mutants {
    #[cfg(any(turnstile_loom, turnstile_shuttle))]
    use std::cell::Cell;

    /// A broken variant of one protocol step.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Mutant {
        /// Moving a key to a new quota replaces its entry without freezing its state
        /// first, so a take on the old state can be lost.
        MoveWithoutFreezing,
        /// Moving a key reads its allowance at the mover's reading, however far that
        /// lags the key's own history.
        MoveAtRawReading,
        /// Moving a key rebuilds its state even when its rules are unchanged.
        MoveUnchangedRules,
        /// Moving a key does not first check that its entry is behind the move's
        /// configuration, so a slower mover of an earlier configuration takes a key a
        /// later one has moved back to the earlier quota.
        MoveBackward,
        /// Moving a key freezes it with the retired marker, as forgetting does, and
        /// "retired but outdated" counts as "being moved": neither a sweep nor a request
        /// removes such an entry.
        SharedMarker,
        /// The sweep retires a word with a Relaxed compare-and-set instead of Release,
        /// and raises the watermark with no fence after it (no handshake with new
        /// keys' insertions either): nothing orders the raise before the retire.
        UnorderedRetire,
        /// A request for a sweep unparks the sweeper thread before it sets what it
        /// wants, so a thread that wakes, finds nothing and parks again misses it.
        WakeFirst,
        /// A peek, a refund or a request at the key cap takes a miss of the lock-free
        /// lookup as "no state", though that lookup can miss a key whose entry a move
        /// is replacing.
        TrustFirstMiss,
        /// `try_acquire`'s loop (`admit_word`) retries a failed compare-and-set with the
        /// value it computed from the word it lost to.
        TryWithStaleValue,
        /// `try_acquire`'s loop (`admit_word`) finds a word retired and returns without
        /// the Acquire fence that pairs with the sweeper's Release, so the caller's next
        /// look can read a watermark older than the sweep that forgot the key.
        AdmitWithoutFence,
        /// A new key's first request reads the watermark before it registers its
        /// insertion, so a sweep that forgets the key in between does not wait for it.
        EarlyReading,
        /// A sweep raises the watermark and retires words without waiting for the
        /// insertions registered before it, which may have read the old watermark.
        SweepWithoutWaiting,
        /// A relocation copies a word without freezing it, so a request still holding
        /// the old word can change it after the copy was taken.
        CopyWithoutFreezing,
        /// An insertion into the ring goes on after registering without checking that
        /// the generation it looked the key up in is still current.
        StaleInsertion,
        /// A new key inserted while claims are open claims no place in the old map, so
        /// an insertion begun before the rotation can give the key a second state.
        NoClaim,
        /// The drain removes a state it keeps without copying it into the young map.
        DrainWithoutCopy,
        /// Forgetting removes forgettable states without retiring them first, so a
        /// request still holding one can take from it after it is gone.
        RemoveWithoutRetiring,
        /// A new key's share of a word store's sweep judges words as of its own
        /// request's reading, not the instant its pass raised the watermark to.
        ShareAtItsOwnReading,
        /// A sweep takes a key in debt for one it may forget (its check ignores the
        /// debt), so the debt is lost with the key.
        RetireIgnoringDebt,
    }

    #[cfg(any(turnstile_loom, turnstile_shuttle))]
    thread_local! {
        static ACTIVE: Cell<Option<Mutant>> = const { Cell::new(None) };
    }

    /// Runs `f` with `mutant` switched on.
    #[cfg(any(turnstile_loom, turnstile_shuttle))]
    pub fn with<R>(mutant: Mutant, f: impl FnOnce() -> R) -> R {
        let previous = ACTIVE.with(|active| active.replace(Some(mutant)));
        let result = f();
        ACTIVE.with(|active| active.set(previous));
        result
    }

    /// Whether `mutant` is switched on.
    #[cfg(any(turnstile_loom, turnstile_shuttle))]
    pub(crate) fn active(mutant: Mutant) -> bool {
        ACTIVE.with(|active| active.get() == Some(mutant))
    }

    /// Whether `mutant` is switched on: never, in normal builds.
    #[cfg(not(any(turnstile_loom, turnstile_shuttle)))]
    #[inline(always)]
    pub(crate) const fn active(_mutant: Mutant) -> bool {
        false
    }

    /// `correct`, or `broken` while `mutant` is switched on: a mutant that only
    /// changes a value (an ordering, a reading), with no branch at the call site.
    #[inline(always)]
    pub(crate) fn choose<T>(mutant: Mutant, correct: T, broken: T) -> T {
        if active(mutant) { broken } else { correct }
    }
}
