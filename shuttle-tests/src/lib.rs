//! The whole keyed limiter under shuttle's randomized schedules, run under
//! `--cfg turnstile_shuttle`.
//!
//! Where `loom-tests/` checks each atomic protocol exhaustively against a store as
//! weak as its contract, these tests run the real thing: papaya and the word store
//! (whose segment locks and words are shuttle's under the cfg), the limiter's own
//! sweeper thread, per-key reconfiguration, with two or three request threads, on
//! many random schedules. Each test checks exact admission counts against a plain
//! sequential ledger; each mutant test switches on a deliberately broken protocol and
//! asserts that some schedule catches it, which proves the checks can fail.
//!
//! The schedules come from a fixed seed, so a run is repeatable and a failing
//! schedule replays; `SHUTTLE_SEED` sets another.

/// Runs `model` on `iterations` random schedules (from the fixed seed, or
/// `SHUTTLE_SEED`), failing any schedule that runs more than `max_steps` steps (a
/// thread spinning on a state nobody will change), then prints how long that took.
#[cfg(turnstile_shuttle)]
pub fn check<F>(name: &str, iterations: usize, max_steps: usize, model: F)
where
    F: Fn() + Send + Sync + 'static,
{
    use shuttle::scheduler::RandomScheduler;
    use shuttle::{Config, MaxSteps, Runner};
    use std::time::Instant;

    let seed = std::env::var("SHUTTLE_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or(0x7475_726e_7374_696c);
    let mut config = Config::new();
    config.max_steps = MaxSteps::FailAfter(max_steps);
    // turnstile's orderings are loom's to check; shuttle treats every one as SeqCst
    // and says so once per process, which is noise here.
    config.silence_warnings = true;
    let started = Instant::now();
    Runner::new(RandomScheduler::new_from_seed(seed, iterations), config).run(model);
    eprintln!(
        "shuttle {name}: seed {seed:#x}, {iterations} schedules, {:.2?}",
        started.elapsed()
    );
}

/// Runs `check` with `mutant` switched on, and returns the panic message of the
/// schedule that caught it; `None` if every schedule passed (the mutant survived).
/// The switch is a thread-local of this OS thread, which runs all of shuttle's
/// threads; it is switched off again however the check ends.
#[cfg(turnstile_shuttle)]
pub fn caught(mutant: turnstile::shuttle_hooks::Mutant, check: impl FnOnce()) -> Option<String> {
    use std::panic::{AssertUnwindSafe, catch_unwind};
    use turnstile::shuttle_hooks::with_mutant;

    let outcome = with_mutant(mutant, || catch_unwind(AssertUnwindSafe(check)));
    let payload = outcome.err()?;
    Some(
        payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_default(),
    )
}

/// What the keyed models share: the limiters they build and the ledger they check.
#[cfg(turnstile_shuttle)]
pub mod keyed {
    use shuttle::sync::{Condvar, Mutex};
    use shuttle::thread;
    use std::sync::Arc;
    use std::time::Duration;
    use turnstile::{Clock, ManualClock, Quota, TokenBucket};

    /// The key every model contends on.
    pub const HOT: u64 = 1;

    /// Which store a limiter keeps its states in.
    #[derive(Clone, Copy, Debug)]
    pub enum Store {
        /// papaya, the default.
        Papaya,
        /// The opt-in word store.
        Words,
    }

    /// `capacity` tokens, one a second: on a clock that never moves, no refill.
    pub fn quota(capacity: u32) -> Quota {
        Quota::new(capacity, Duration::from_secs(1)).unwrap()
    }

    /// A token bucket of `capacity` in `store`, on a frozen clock, forgetting any key
    /// that is full (margin 0) on its own sweeper thread, which the second key's
    /// insertion asks for (under the cfg, `MIN_SWEEP_KEYS` is 2).
    pub fn limiter(store: Store, capacity: u32) -> TokenBucket<u64, ManualClock> {
        let builder = TokenBucket::<u64>::builder(quota(capacity))
            .clock(ManualClock::new())
            .eviction_margin(Duration::ZERO);
        match store {
            Store::Papaya => builder.build().unwrap(),
            Store::Words => builder.word_store().build().unwrap(),
        }
    }

    /// The same, on any clock (builder's defaults otherwise as [`limiter`]).
    pub fn limiter_on<C: Clock + 'static>(
        store: Store,
        capacity: u32,
        clock: C,
    ) -> TokenBucket<u64, C> {
        let builder = TokenBucket::<u64>::builder(quota(capacity))
            .clock(clock)
            .eviction_margin(Duration::ZERO);
        match store {
            Store::Papaya => builder.build().unwrap(),
            Store::Words => builder.word_store().build().unwrap(),
        }
    }

    /// A clock that stands at 0 and tells when the limiter's sweeper thread has read
    /// it (every sweep does, as it begins), so that a test can *block* until a sweep
    /// runs: a thread that missed its request then parks for good, every other
    /// thread waits, and shuttle reports the deadlock. (A test that spun instead
    /// would not catch it: shuttle may wake a parked thread spuriously, as std may,
    /// while any other thread can run.)
    #[derive(Clone, Default)]
    pub struct SweepWatch {
        readings: Arc<(Mutex<usize>, Condvar)>,
    }

    impl SweepWatch {
        /// Blocks until the sweeper thread has read the clock.
        pub fn wait_for_a_sweep(&self) {
            let (readings, read) = &*self.readings;
            let mut seen = readings.lock().unwrap();
            while *seen == 0 {
                seen = read.wait(seen).unwrap();
            }
        }
    }

    impl Clock for SweepWatch {
        fn now(&self) -> u64 {
            // The name the limiter gives its sweeper thread.
            if thread::current().name() == Some("turnstile-sweeper") {
                let (readings, read) = &*self.readings;
                *readings.lock().unwrap() += 1;
                read.notify_all();
            }
            0
        }
    }

    /// Tokens taken and given back by one thread, as its requests were answered.
    #[derive(Clone, Copy, Debug, Default)]
    pub struct Ledger {
        /// Tokens of allowed requests.
        pub taken: u32,
        /// Tokens refunded.
        pub refunded: u32,
    }

    /// Both threads' entries.
    impl std::ops::Add for Ledger {
        type Output = Ledger;

        fn add(self, other: Ledger) -> Ledger {
            Ledger {
                taken: self.taken + other.taken,
                refunded: self.refunded + other.refunded,
            }
        }
    }
}
