//! The limiter's own sweeper thread, so that no request pays for a sweep.
//!
//! Started lazily, by the first insertion that finds a sweep due; named
//! `turnstile-sweeper`; stopped and joined when the limiter is dropped (a sweep in
//! progress then passes over the remaining keys without looking at them); never
//! started for a limiter built with `manual_eviction()`, nor under
//! `--cfg turnstile_loom`, where sweeps happen only on demand. A request that finds a
//! sweep due only asks for one — it visits no key. If the OS refuses to start the
//! thread, or a sweep panicked and ended it, `request` says so and the caller sweeps
//! itself.
//!
//! The handshake: a request sets `requested` under the mutex and notifies; the thread
//! checks the flag under the same mutex before it waits, so a request made before it
//! waits is seen, not lost (loom model 12, with a mutant that waits first).

use crate::sync::{Arc, AtomicBool, Condvar, Mutex, MutexGuard, Ordering};
use std::io;

/// What requests and the thread share.
#[derive(Default)]
pub(crate) struct Signal {
    /// A sweep is due and not begun yet.
    requested: Mutex<bool>,
    wake: Condvar,
    /// The limiter is being dropped: end now.
    stopping: AtomicBool,
}

impl Signal {
    fn requested(&self) -> MutexGuard<'_, bool> {
        self.requested
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Asks for a sweep.
    pub(crate) fn request(&self) {
        *self.requested() = true;
        self.wake.notify_one();
    }

    /// Waits for a request, and takes it; `false` once the limiter is being dropped.
    pub(crate) fn wait(&self) -> bool {
        let mut requested = self.requested();
        #[cfg(turnstile_loom)]
        if crate::sync::mutants::active(crate::sync::mutants::Mutant::WaitFirst) {
            requested = self
                .wake
                .wait(requested)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
        while !*requested && !self.stopping() {
            requested = self
                .wake
                .wait(requested)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
        *requested = false;
        !self.stopping()
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

    /// A thread that runs `sweep` whenever a sweep is requested, until `sweep` returns
    /// `false` (the limiter is gone).
    #[cfg(not(turnstile_loom))]
    pub(crate) fn on_thread(mut sweep: impl FnMut() -> bool + Send + 'static) -> Self {
        let start: Start = Box::new(move |signal: Arc<Signal>| {
            std::thread::Builder::new()
                .name("turnstile-sweeper".into())
                .spawn(move || while signal.wait() && sweep() {})
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
        self.signal.request();
        true
    }

    /// Whether the limiter is being dropped.
    pub(crate) fn stopping(&self) -> bool {
        self.signal.stopping()
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
