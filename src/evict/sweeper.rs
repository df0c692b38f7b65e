//! The sweeper thread: the limiter's own, so that requests do as little of the
//! forgetting as they can, and the one `sweep_in_background` starts.
//!
//! The limiter's own is started lazily, by the first insertion that finds work for it
//! (or memory due for preparation: in the word store, past about 2.5 million keys);
//! named `turnstile-sweeper`; stopped and joined when the limiter is dropped (a drain
//! or sweep in progress then ends at its next step); never started for a limiter built
//! with `manual_eviction()`, nor under `--cfg turnstile_loom`, where keys are forgotten
//! only on demand (under `--cfg turnstile_shuttle` it is a shuttle thread, scheduled
//! with the requests). A request that finds work for it only asks; if the OS refuses
//! to start the thread, or a drain or sweep panicked and ended it, `request` says so
//! and requests take on what the thread would have done (`crate::evict`: the drain's
//! opening and, at the key cap, the room to make). A [`BackgroundSweeper`] is the
//! same thread, woken by a period instead of by requests.
//!
//! The thread also prepares the store's next stretch of memory when asked (in the word
//! store, a segment's table with 2,048 keys of room or more grown ahead and the
//! outgrown one drained, `store/words/`), so that requests do not pay for allocating
//! a table, first-touching its fresh pages, moving keys or freeing an outgrown table
//! either — while the thread keeps up: smaller tables, and a table that fills faster
//! than the thread can grow it, still grow on requests.
//!
//! The handshake takes no lock, so no request waits for the thread: a request sets
//! what it wants in one word and unparks the thread; the thread takes the whole word
//! (swapping in nothing) before it parks, and parks only when it took nothing. A
//! request made before the thread parks is seen by that swap, or its unpark makes the
//! park return at once (a park token is never lost), so no request is lost (loom model
//! 12, with a mutant that unparks before it sets what it wants).

use crate::sync::mutants::{Mutant, active};
use crate::sync::{Arc, AtomicBool, AtomicUsize, Mutex, Ordering, Unpoisoned};
use std::io;
use std::sync::OnceLock;

/// The thread that waits on a signal: std's, loom's or shuttle's (`crate::sync`).
use crate::sync::thread::{Thread as Waiter, park};

/// `Signal::wants` bit: a sweep is due.
const SWEEP: usize = 1;
/// `Signal::wants` bit: the store would like its next stretch of memory prepared.
const PREPARE: usize = 2;

/// What requests and the thread share.
#[derive(Default)]
pub(crate) struct Signal {
    /// What is wanted and not begun yet: [`SWEEP`] and [`PREPARE`] bits.
    wants: AtomicUsize,
    /// The thread to unpark, set once before any request can need it.
    waiter: OnceLock<Waiter>,
    /// The limiter is being dropped: end now.
    stopping: AtomicBool,
    /// The thread has ended (the limiter dropped, or a sweep panicked).
    ended: AtomicBool,
}

/// Marks the thread ended once it ends, also by a panic in a sweep.
#[cfg(not(turnstile_loom))]
struct Ending(Arc<Signal>);

#[cfg(not(turnstile_loom))]
impl Drop for Ending {
    fn drop(&mut self) {
        // Relaxed: a hint for insertions (ask the thread, or sweep themselves); a
        // stale answer costs one insertion's choice, never a decision.
        self.0.ended.store(true, Ordering::Relaxed);
    }
}

/// What the thread is asked to do.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Work {
    /// A sweep is due.
    pub(crate) sweep: bool,
    /// The store would like its next stretch of memory prepared.
    pub(crate) prepare: bool,
}

impl Signal {
    /// The thread that waits on this signal: set once, before the first request that
    /// needs to wake it.
    pub(crate) fn set_waiter(&self, waiter: Waiter) {
        let _ = self.waiter.set(waiter);
    }

    /// Sets `want` and wakes the thread.
    fn ask(&self, want: usize) {
        if active(Mutant::WakeFirst) {
            self.wake();
            // Release: as below.
            self.wants.fetch_or(want, Ordering::Release);
            return;
        }
        // Release: what the requester did before (the store's state it asks about)
        // happens before the thread's Acquire swap that takes the bit.
        self.wants.fetch_or(want, Ordering::Release);
        self.wake();
    }

    /// Unparks the thread, if it has started: a park that follows returns at once.
    fn wake(&self) {
        if let Some(waiter) = self.waiter.get() {
            waiter.unpark();
        }
    }

    /// Asks for a sweep.
    pub(crate) fn request(&self) {
        self.ask(SWEEP);
    }

    /// Asks for the store's next stretch of memory to be prepared.
    pub(crate) fn request_preparation(&self) {
        self.ask(PREPARE);
    }

    /// Waits for a request, and takes it (everything asked for since the last);
    /// `None` once the limiter is being dropped.
    pub(crate) fn wait(&self) -> Option<Work> {
        loop {
            if self.stopping() {
                return None;
            }
            // Acquire: pairs with the requests' Release (`ask`).
            let wants = self.wants.swap(0, Ordering::Acquire);
            if wants != 0 {
                return Some(Work {
                    sweep: wants & SWEEP != 0,
                    prepare: wants & PREPARE != 0,
                });
            }
            // Parks only when it took nothing: a request since the swap unparks it.
            park();
        }
    }

    /// Whether a sweep has been asked for and not begun: a long preparation gives way
    /// to it. (No thread under loom: unused there.)
    #[cfg_attr(turnstile_loom, allow(dead_code))]
    pub(crate) fn sweep_requested(&self) -> bool {
        // Relaxed: a hint to cut a preparation short; the bit is taken by the swap.
        self.wants.load(Ordering::Relaxed) & SWEEP != 0
    }

    /// Whether the limiter is being dropped, so that a running sweep can stop early.
    pub(crate) fn stopping(&self) -> bool {
        // Acquire: pairs with `stop`'s Release, so a thread woken by the stop sees it.
        self.stopping.load(Ordering::Acquire)
    }

    /// Tells the thread to end.
    pub(crate) fn stop(&self) {
        // Release: see `stopping`; the unpark after it wakes a parked thread to look.
        self.stopping.store(true, Ordering::Release);
        self.wake();
    }
}

/// How the sweeper thread shares a CPU with requests: at points where it holds no lock
/// of the store, it hands its CPU to a waiting thread once [`TurnTimer::TURN`] has passed
/// since it last did. (The turn is wall time, so after the OS has taken the CPU from
/// it the thread yields again at its next point, which costs a system call and
/// nothing more.) On the ring, between chunks of a drain it holds no region, whose
/// locks requests only try; the reason below is the word store's.
///
/// Why: with more busy threads than cores (two requests and the sweeper on two), the OS
/// takes a CPU from the sweeper at a timer tick, wherever it is; in a drain it almost
/// always holds a segment's lock (it takes the next hold at once), and a request for
/// that segment then sleeps until the sweeper runs again, a time slice later (about
/// 4 ms on this kernel's 250 Hz tick). A thread that yields every millisecond is
/// mostly switched out at a yield, where it holds nothing, rather than at a tick, and
/// the slowest churn calls at 2 request threads on 2 cores fell; shorter turns cut
/// those sleeps further but switched so often that the p99.9 at 4 request threads
/// rose (results/ANALYSIS.md, "The word store").
#[cfg(not(any(turnstile_loom, turnstile_shuttle)))]
pub(crate) struct TurnTimer {
    since: std::cell::Cell<std::time::Instant>,
}

#[cfg(not(any(turnstile_loom, turnstile_shuttle)))]
impl TurnTimer {
    /// Work between two yields, at most (give or take one step of the caller's).
    const TURN: std::time::Duration = std::time::Duration::from_millis(1);

    /// A pace whose first turn starts now.
    pub(crate) fn new() -> Self {
        Self {
            since: std::cell::Cell::new(std::time::Instant::now()),
        }
    }

    /// A point where the thread holds no lock of the store: yields if its turn is
    /// over.
    pub(crate) fn breathe(&self) {
        let now = std::time::Instant::now();
        if now.duration_since(self.since.get()) >= Self::TURN {
            crate::sync::yield_now();
            self.since.set(std::time::Instant::now());
        }
    }
}

/// Under shuttle every point where the thread holds no lock of the store is a yield:
/// shuttle does not model time, and a yield there is a point where the scheduler may
/// run a request against the half-swept store (deterministically, unlike a turn of
/// wall time, so that a failing schedule replays).
#[cfg(turnstile_shuttle)]
pub(crate) struct TurnTimer;

#[cfg(turnstile_shuttle)]
impl TurnTimer {
    /// A pace with nothing to measure.
    pub(crate) fn new() -> Self {
        Self
    }

    /// A point where the thread holds no lock of the store: always yields.
    pub(crate) fn breathe(&self) {
        crate::sync::yield_now();
    }
}

/// The sweeper thread's handle.
#[cfg(not(turnstile_loom))]
type Thread = crate::sync::thread::JoinHandle<()>;
/// No thread under loom.
#[cfg(turnstile_loom)]
type Thread = ();

/// Starts the thread.
type Start = Box<dyn FnOnce(Arc<Signal>) -> io::Result<Thread> + Send>;

/// `Sweeper::state`: no thread yet (or none ever, for manual sweeps).
const NOT_STARTED: usize = 0;
/// `Sweeper::state`: one request is starting the thread.
const STARTING: usize = 1;
/// `Sweeper::state`: the thread runs (or has ended: `Signal::ended`).
const STARTED: usize = 2;
/// `Sweeper::state`: there is no thread to ask (manual, or the OS refused one).
const NO_THREAD: usize = 3;

/// What a keyed limiter's sweeper thread works on: the limiter's state, which the
/// thread holds weakly ([`for_limiter`]).
#[cfg_attr(turnstile_loom, allow(dead_code))]
pub(crate) trait Forgetting: Send + Sync + 'static {
    /// The limiter's sweeper: the thread's signals.
    fn sweeper(&self) -> &Sweeper;
    /// One wake-up's forgetting (`Eviction::work`), `breathe` between its steps;
    /// `None` once the limiter is being dropped.
    fn forget(&self, breathe: impl FnMut()) -> Option<()>;
    /// The store's next stretch of memory prepared (the word store), `stop` asked
    /// between its steps.
    fn prepare(&self, stop: impl Fn() -> bool);
}

/// The sweeper thread of a limiter whose forgetting is `automatic` (else a manual
/// sweeper): it holds the limiter weakly, so it ends when the limiter is gone. On
/// each wake-up it prepares memory if asked, at once giving way to forgetting if that
/// is wanted too (it bounds memory), then forgets, then resumes the preparation.
#[cfg(not(turnstile_loom))]
pub(crate) fn for_limiter<T: Forgetting>(automatic: bool, limiter: std::sync::Weak<T>) -> Sweeper {
    if !automatic {
        return Sweeper::manual();
    }
    Sweeper::on_thread("turnstile-sweeper", move |wants| {
        let Some(limiter) = limiter.upgrade() else {
            return false;
        };
        let sweeper = limiter.sweeper();
        // Called between steps of the store's work, holding none of its locks: the
        // thread's turn may end there (see `TurnTimer`); and whether to stop: the
        // limiter is being dropped, or forgetting is wanted (it bounds memory).
        let pace = TurnTimer::new();
        let stop = |forgetting_wanted: bool| {
            pace.breathe();
            sweeper.stopping() || forgetting_wanted || sweeper.sweep_requested()
        };
        if wants.prepare {
            limiter.prepare(|| stop(wants.sweep));
        }
        if !wants.sweep {
            return true;
        }
        if limiter.forget(|| pace.breathe()).is_none() {
            return false;
        }
        if wants.prepare {
            limiter.prepare(|| stop(false));
        }
        true
    })
}

/// No thread under loom: keys are forgotten on demand.
#[cfg(turnstile_loom)]
pub(crate) fn for_limiter<T>(_: bool, _: std::sync::Weak<T>) -> Sweeper {
    Sweeper::manual()
}

/// A sweeper thread, not started until it is first needed.
pub(crate) struct Sweeper {
    signal: Arc<Signal>,
    /// Whether the thread is started; moved on by compare-and-set, so that exactly one
    /// request starts it and no request waits for another.
    state: AtomicUsize,
    /// How to start the thread; taken, once, by the request that starts it.
    start: Mutex<Option<Start>>,
    /// The thread, for `stop` to join; set once by the request that started it.
    thread: Mutex<Option<Thread>>,
}

impl Sweeper {
    /// Sweeps only on demand: no thread, ever.
    pub(crate) fn manual() -> Self {
        Self {
            signal: Arc::default(),
            state: AtomicUsize::new(NO_THREAD),
            start: Mutex::new(None),
            thread: Mutex::new(None),
        }
    }

    /// A thread named `name` that runs `work` with what is wanted whenever something
    /// is requested, until `work` returns `false` (what it forgets for is gone).
    #[cfg(not(turnstile_loom))]
    pub(crate) fn on_thread(
        name: &'static str,
        mut work: impl FnMut(Work) -> bool + Send + 'static,
    ) -> Self {
        let start: Start = Box::new(move |signal: Arc<Signal>| {
            crate::sync::thread::Builder::new()
                .name(name.into())
                .spawn(move || {
                    let _ending = Ending(Arc::clone(&signal));
                    while signal.wait().is_some_and(&mut work) {}
                })
        });
        Self {
            state: AtomicUsize::new(NOT_STARTED),
            start: Mutex::new(Some(start)),
            ..Self::manual()
        }
    }

    /// A thread, started now, that runs `work` every `period` until `work` returns
    /// `false` (the limiter is gone) or the sweeper is stopped. Not under the checkers:
    /// it is woken by wall time, which neither models.
    #[cfg(not(any(turnstile_loom, turnstile_shuttle)))]
    pub(crate) fn every(
        period: std::time::Duration,
        mut work: impl FnMut() -> bool + Send + 'static,
    ) -> io::Result<Self> {
        let signal = Arc::new(Signal::default());
        let thread = {
            let signal = Arc::clone(&signal);
            std::thread::Builder::new()
                .name("turnstile-sweeper".into())
                .spawn(move || {
                    let _ending = Ending(Arc::clone(&signal));
                    loop {
                        let due = std::time::Instant::now() + period;
                        loop {
                            if signal.stopping() {
                                return;
                            }
                            let now = std::time::Instant::now();
                            if now >= due {
                                break;
                            }
                            // Woken early by `stop`, or spuriously: looks again.
                            std::thread::park_timeout(due - now);
                        }
                        if !work() {
                            return;
                        }
                    }
                })?
        };
        signal.set_waiter(thread.thread().clone());
        Ok(Self {
            signal,
            state: AtomicUsize::new(STARTED),
            start: Mutex::new(None),
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Asks the thread for a sweep, starting it first if this is the first request.
    /// `false` when there is no thread to ask: sweeps are manual, or the OS refused
    /// to start one.
    pub(crate) fn request(&self) -> bool {
        self.ask(Signal::request)
    }

    /// Asks the thread to prepare the store's next stretch of memory, starting it
    /// first if this is the first request; `false` when there is no thread to ask.
    pub(crate) fn request_preparation(&self) -> bool {
        self.ask(Signal::request_preparation)
    }

    /// Starts the thread if it has not been, then makes the request `ask`. No lock is
    /// taken but by the one request that starts the thread (for the start and the
    /// handle, which nobody else takes meanwhile): a request that finds the thread
    /// starting leaves its request for the thread to find when it first looks.
    fn ask(&self, ask: fn(&Signal)) -> bool {
        // Acquire: a thread seen started has its waiter set (Release below).
        match self.state.load(Ordering::Acquire) {
            STARTED if !self.signal.ended.load(Ordering::Relaxed) => {}
            // Ended by a panic in a sweep (or the limiter is going): nobody to ask.
            STARTED | NO_THREAD => return false,
            STARTING => {}
            _ => {
                // Relaxed on failure: another request won, and its state is read next.
                let won = self
                    .state
                    .compare_exchange(NOT_STARTED, STARTING, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok();
                if won && !self.start_thread() {
                    return false;
                }
                if !won && self.state.load(Ordering::Acquire) == NO_THREAD {
                    return false;
                }
            }
        }
        ask(&self.signal);
        true
    }

    /// Starts the thread, for the one request that moved `state` to `STARTING`;
    /// whether it started.
    fn start_thread(&self) -> bool {
        let start = self.start.lock().unpoisoned().take();
        match start.map(|start| start(Arc::clone(&self.signal))) {
            Some(Ok(started)) => {
                #[cfg(not(turnstile_loom))]
                self.signal.set_waiter(started.thread().clone());
                *self.thread.lock().unpoisoned() = Some(started);
                // Release: the waiter is set before anyone sees the thread started.
                self.state.store(STARTED, Ordering::Release);
                true
            }
            Some(Err(_)) | None => {
                // Release: as above (there is no waiter to see).
                self.state.store(NO_THREAD, Ordering::Release);
                false
            }
        }
    }

    /// Whether the limiter is being dropped.
    pub(crate) fn stopping(&self) -> bool {
        self.signal.stopping()
    }

    /// Whether the thread is running, asked without a lock.
    #[cfg(not(any(turnstile_loom, turnstile_shuttle)))]
    pub(crate) fn running(&self) -> bool {
        // Relaxed: see `Ending`.
        self.state.load(Ordering::Relaxed) == STARTED && !self.signal.ended.load(Ordering::Relaxed)
    }

    /// Whether there is no thread to ask, and will be none: sweeps are manual, the OS
    /// refused to start one, or it ended (a sweep panicked). A thread not yet started
    /// is not absent: the next request starts it. Asked without a lock.
    pub(crate) fn absent(&self) -> bool {
        // Relaxed: see `Ending`.
        match self.state.load(Ordering::Relaxed) {
            NO_THREAD => true,
            STARTED => self.signal.ended.load(Ordering::Relaxed),
            _ => false,
        }
    }

    /// Whether a sweep has been asked for and not begun.
    #[cfg_attr(turnstile_loom, allow(dead_code))]
    pub(crate) fn sweep_requested(&self) -> bool {
        self.signal.sweep_requested()
    }

    /// Stops the thread and waits for it.
    pub(crate) fn stop(&self) {
        self.signal.stop();
        let thread = self.thread.lock().unpoisoned().take();
        #[cfg(not(turnstile_loom))]
        if let Some(thread) = thread {
            // A panic on the thread was a sweep's; the limiter is going anyway.
            let _ = thread.join();
        }
        #[cfg(turnstile_loom)]
        let _ = thread;
    }
}

/// A thread that forgets a limiter's idle keys on a fixed period, from
/// [`KeyedLimiter::sweep_in_background`](crate::KeyedLimiter::sweep_in_background): the
/// sweeper thread, woken by the period instead of by requests. Dropping the handle
/// stops the thread (and waits for it); so does dropping the limiter.
// Not under the checkers: a thread woken by wall time, which neither models (their
// tests drive forgetting through the limiter's own sweeper thread).
#[cfg(not(any(turnstile_loom, turnstile_shuttle)))]
pub struct BackgroundSweeper {
    sweeper: Sweeper,
}

#[cfg(not(any(turnstile_loom, turnstile_shuttle)))]
impl BackgroundSweeper {
    /// Runs `sweep` every `period` until stopped, or until `sweep` returns false.
    pub(crate) fn spawn(
        period: std::time::Duration,
        sweep: impl FnMut() -> bool + Send + 'static,
    ) -> io::Result<Self> {
        Sweeper::every(period, sweep).map(|sweeper| Self { sweeper })
    }
}

#[cfg(not(any(turnstile_loom, turnstile_shuttle)))]
impl std::fmt::Debug for BackgroundSweeper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackgroundSweeper")
            .field("running", &self.sweeper.running())
            .finish()
    }
}

#[cfg(not(any(turnstile_loom, turnstile_shuttle)))]
impl Drop for BackgroundSweeper {
    fn drop(&mut self) {
        self.sweeper.stop();
    }
}

#[cfg(all(test, not(turnstile_loom)))]
mod tests {
    use super::Sweeper;
    use crate::sync::{AtomicBool, Ordering};
    use std::sync::Arc;

    /// Sets its flag when dropped: with the thread's closure, as the thread ends.
    struct Ended(Arc<AtomicBool>);

    impl Drop for Ended {
        fn drop(&mut self) {
            // SeqCst: a test's flag; ordering is not under test.
            self.0.store(true, Ordering::SeqCst);
        }
    }

    #[test]
    fn stopping_waits_for_the_thread_to_end() {
        let ended = Arc::new(AtomicBool::new(false));
        let guard = Ended(Arc::clone(&ended));
        let (started, busy) = std::sync::mpsc::channel();
        let sweeper = Sweeper::on_thread("turnstile-sweeper", move |_| {
            let _guard = &guard;
            let _ = started.send(());
            // Busy when told to stop: the stop must wait for this to finish.
            std::thread::sleep(std::time::Duration::from_millis(200));
            true
        });
        assert!(sweeper.request());
        busy.recv().unwrap();
        sweeper.stop();
        assert!(
            ended.load(Ordering::SeqCst),
            "stop returned while its thread still ran"
        );
    }
}
