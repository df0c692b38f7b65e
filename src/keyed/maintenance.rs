//! The limiter's own sweeper thread, so that no request pays for a sweep.
//!
//! Started lazily, by the first insertion that finds a sweep due (or memory due for
//! preparation: in the word store, past about 2.5 million keys); named
//! `turnstile-sweeper`; stopped and joined when the limiter is dropped (a sweep in
//! progress then passes over the remaining keys without looking at them); never
//! started for a limiter built with `manual_eviction()`, nor under
//! `--cfg turnstile_loom`, where sweeps happen only on demand. A request that finds a
//! sweep due only asks for one — it visits no key. If the OS refuses to start the
//! thread, or a sweep panicked and ended it, `request` says so and the caller sweeps
//! itself.
//!
//! The thread also prepares the store's next stretch of memory when asked (in the word
//! store, a segment's table with 2,048 keys of room or more grown ahead and the
//! outgrown one drained, `store/words/`), so that requests do not pay for allocating
//! a table, first-touching its fresh pages, moving keys or freeing an outgrown table
//! either — while the thread keeps up: smaller tables, and a table that fills faster
//! than the thread can grow it, still grow on requests.
//!
//! The handshake: a request sets what it wants under the mutex and notifies; the
//! thread checks under the same mutex before it waits, so a request made before it
//! waits is seen, not lost (loom model 12, with a mutant that waits first).

use crate::sync::{Arc, AtomicBool, Condvar, Mutex, MutexGuard, Ordering};
use std::io;

/// What requests and the thread share.
#[derive(Default)]
pub(crate) struct Signal {
    /// What is wanted and not begun yet.
    requested: Mutex<Wants>,
    wake: Condvar,
    /// The limiter is being dropped: end now.
    stopping: AtomicBool,
    /// The thread is running (started, and not ended by the limiter's drop or a
    /// panic): read without a lock by insertions that find it behind.
    running: AtomicBool,
}

/// Marks the thread running while it lives, and not running once it ends, also by a
/// panic in a sweep.
#[cfg(not(turnstile_loom))]
struct Running(Arc<Signal>);

#[cfg(not(turnstile_loom))]
impl Running {
    fn new(signal: Arc<Signal>) -> Self {
        // Relaxed: a hint for insertions (help the sweep, or sweep themselves); a
        // stale answer costs one insertion's choice, never a decision.
        signal.running.store(true, Ordering::Relaxed);
        Self(signal)
    }
}

#[cfg(not(turnstile_loom))]
impl Drop for Running {
    fn drop(&mut self) {
        // Relaxed: as in `new`.
        self.0.running.store(false, Ordering::Relaxed);
    }
}

/// What the thread is asked to do.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Wants {
    /// A sweep is due.
    pub(crate) sweep: bool,
    /// The store would like its next stretch of memory prepared.
    pub(crate) prepare: bool,
}

impl Wants {
    fn any(self) -> bool {
        self.sweep || self.prepare
    }
}

impl Signal {
    fn requested(&self) -> MutexGuard<'_, Wants> {
        self.requested
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Asks for a sweep.
    pub(crate) fn request(&self) {
        self.requested().sweep = true;
        self.wake.notify_one();
    }

    /// Asks for the store's next stretch of memory to be prepared.
    pub(crate) fn request_preparation(&self) {
        self.requested().prepare = true;
        self.wake.notify_one();
    }

    /// Waits for a request, and takes it (everything asked for since the last);
    /// `None` once the limiter is being dropped.
    pub(crate) fn wait(&self) -> Option<Wants> {
        let mut requested = self.requested();
        #[cfg(turnstile_loom)]
        if crate::sync::mutants::active(crate::sync::mutants::Mutant::WaitFirst) {
            requested = self
                .wake
                .wait(requested)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
        while !requested.any() && !self.stopping() {
            requested = self
                .wake
                .wait(requested)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
        let wants = std::mem::take(&mut *requested);
        (!self.stopping()).then_some(wants)
    }

    /// Whether a sweep has been asked for and not begun: a long preparation gives way
    /// to it. (No thread under loom: unused there.)
    #[cfg_attr(turnstile_loom, allow(dead_code))]
    pub(crate) fn sweep_requested(&self) -> bool {
        self.requested().sweep
    }

    /// Whether the limiter is being dropped, so that a running sweep can stop early.
    pub(crate) fn stopping(&self) -> bool {
        // Relaxed: a hint to end a sweep early; the handshake itself is under the
        // mutex (`stop` takes it before notifying).
        self.stopping.load(Ordering::Relaxed)
    }

    /// Tells the thread to end.
    pub(crate) fn stop(&self) {
        // Relaxed: see `stopping`; taking the mutex below orders it before the waiter's
        // next check.
        self.stopping.store(true, Ordering::Relaxed);
        drop(self.requested());
        self.wake.notify_all();
    }
}

/// How the sweeper thread shares a CPU with requests: at points where it holds no lock
/// of the store, it hands its CPU to a waiting thread once [`Pace::TURN`] has passed
/// since it last did. (It may hold the limiter's sweep lock there, which requests
/// wait on only when the thread has fallen far behind and they sweep themselves; and
/// the turn is wall time, so after the OS has taken the CPU from it the thread yields
/// again at its next point, which costs a system call and nothing more.)
///
/// Why: with more busy threads than cores (two requests and the sweeper on two), the OS
/// takes a CPU from the sweeper at a timer tick, wherever it is; in a drain it almost
/// always holds a segment's lock (it takes the next hold at once), and a request for
/// that segment then sleeps until the sweeper runs again, a time slice later (about
/// 4 ms on this kernel's 250 Hz tick). A thread that yields every millisecond is
/// mostly switched out at a yield, where it holds nothing, rather than at a tick: at 2
/// request threads on 2 cores the slowest churn call was within 10 ms in 8 runs of 10,
/// against 3 of 10 without (results/ANALYSIS.md, "The sweeper's turn"). Shorter turns
/// (50 or 200 µs) cut those sleeps further but switched so often that p99.9 at 4
/// request threads doubled.
#[cfg(not(turnstile_loom))]
pub(crate) struct Pace {
    since: std::cell::Cell<std::time::Instant>,
}

#[cfg(not(turnstile_loom))]
impl Pace {
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
            std::thread::yield_now();
            self.since.set(std::time::Instant::now());
        }
    }
}

/// The sweeper thread's handle.
#[cfg(not(turnstile_loom))]
type Thread = std::thread::JoinHandle<()>;
/// No thread under loom.
#[cfg(turnstile_loom)]
type Thread = ();

/// Starts the thread.
type Start = Box<dyn FnOnce(Arc<Signal>) -> io::Result<Thread> + Send>;

/// A limiter's sweeper thread, not started until it is first needed.
pub(crate) struct Maintenance {
    signal: Arc<Signal>,
    /// How to start the thread; taken when it starts. `None` when sweeps are manual.
    start: Mutex<Option<Start>>,
    thread: Mutex<Option<Thread>>,
}

impl Maintenance {
    /// Sweeps only on demand: no thread, ever.
    pub(crate) fn manual() -> Self {
        Self {
            signal: Arc::default(),
            start: Mutex::new(None),
            thread: Mutex::new(None),
        }
    }

    /// A thread that runs `work` with what is wanted whenever something is requested,
    /// until `work` returns `false` (the limiter is gone).
    #[cfg(not(turnstile_loom))]
    pub(crate) fn on_thread(mut work: impl FnMut(Wants) -> bool + Send + 'static) -> Self {
        let start: Start = Box::new(move |signal: Arc<Signal>| {
            std::thread::Builder::new()
                .name("turnstile-sweeper".into())
                .spawn(move || {
                    let _running = Running::new(Arc::clone(&signal));
                    while signal.wait().is_some_and(&mut work) {}
                })
        });
        Self {
            start: Mutex::new(Some(start)),
            ..Self::manual()
        }
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

    /// Starts the thread if it has not been, then makes the request `ask`.
    fn ask(&self, ask: fn(&Signal)) -> bool {
        let mut thread = self
            .thread
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        #[cfg(not(turnstile_loom))]
        if thread.as_ref().is_some_and(|t| t.is_finished()) {
            return false; // ended by a panic in a sweep: nobody to ask any more
        }
        if thread.is_none() {
            let start = self
                .start
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .take();
            match start.map(|start| start(Arc::clone(&self.signal))) {
                Some(Ok(started)) => *thread = Some(started),
                Some(Err(_)) | None => return false,
            }
        }
        drop(thread);
        ask(&self.signal);
        true
    }

    /// Whether the limiter is being dropped.
    pub(crate) fn stopping(&self) -> bool {
        self.signal.stopping()
    }

    /// Whether the thread is running, asked without a lock.
    pub(crate) fn running(&self) -> bool {
        // Relaxed: see `Running::new`.
        self.signal.running.load(Ordering::Relaxed)
    }

    /// Whether a sweep has been asked for and not begun.
    #[cfg_attr(turnstile_loom, allow(dead_code))]
    pub(crate) fn sweep_requested(&self) -> bool {
        self.signal.sweep_requested()
    }

    /// Stops the thread and waits for it.
    pub(crate) fn stop(&self) {
        self.signal.stop();
        let thread = self
            .thread
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        #[cfg(not(turnstile_loom))]
        if let Some(thread) = thread {
            // A panic on the thread was a sweep's; the limiter is going anyway.
            let _ = thread.join();
        }
        #[cfg(turnstile_loom)]
        let _ = thread;
    }
}

#[cfg(all(test, not(turnstile_loom)))]
mod tests {
    use super::Maintenance;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

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
        let maintenance = Maintenance::on_thread(move |_| {
            let _guard = &guard;
            let _ = started.send(());
            // Busy when told to stop: the stop must wait for this to finish.
            std::thread::sleep(std::time::Duration::from_millis(200));
            true
        });
        assert!(maintenance.request());
        busy.recv().unwrap();
        maintenance.stop();
        assert!(
            ended.load(Ordering::SeqCst),
            "stop returned while its thread still ran"
        );
    }
}
