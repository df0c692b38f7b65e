//! Model checks of turnstile's atomic protocols, run under `--cfg turnstile_loom`.
//!
//! The models live in `tests/`, one file per protocol and one model per behaviour.
//! Each model also runs against a deliberately broken protocol (a *mutant*) that loom
//! must reject, which proves the model's assertions can fail.

/// Explores every interleaving of `model` with at most `preemptions` preemptions per
/// execution (`None`: all interleavings), then prints how many executions that took
/// and how long.
///
/// A `LOOM_MAX_PREEMPTIONS` set in the environment overrides `preemptions`.
#[cfg(turnstile_loom)]
pub fn check<F>(name: &str, preemptions: Option<usize>, model: F)
where
    F: Fn() + Sync + Send + 'static,
{
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Instant;

    let executions = Arc::new(AtomicUsize::new(0));
    let counter = executions.clone();
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = builder.preemption_bound.or(preemptions);
    let started = Instant::now();
    builder.check(move || {
        // Relaxed: a std counter outside the model, read after `check` has returned.
        counter.fetch_add(1, Ordering::Relaxed);
        model();
    });
    eprintln!(
        "loom model {name}: preemption bound {:?}, {} executions, {:.2?}",
        builder.preemption_bound,
        executions.load(Ordering::Relaxed),
        started.elapsed()
    );
}

/// What the models of the single-word algorithms share: one key behind a protocol
/// (the real limiter, or a mutant of its compare-and-set loop), the generic mutants,
/// and the frozen-clock model.
#[cfg(turnstile_loom)]
pub mod harness {
    use loom::sync::Arc;
    use loom::sync::atomic::{AtomicU64, Ordering};
    use loom::thread;
    use turnstile::loom_hooks::WordAlgorithm;
    use turnstile::{Clock, Decision, ManualClock, RateLimiter};

    /// The key every model uses.
    pub const KEY: u64 = 7;

    /// One key's state behind some protocol: turnstile's limiter, or a mutant.
    pub trait Key: Send + Sync + 'static {
        /// One request for `cost`.
        fn acquire(&self, cost: u32) -> Decision;
        /// What the key has left now.
        fn peek(&self) -> u32;
        /// The raw state word, once the model's threads have joined.
        fn word(&self) -> u64;
    }

    /// A real limiter's key [`KEY`], and how to read its raw word.
    pub struct Real<L> {
        limiter: L,
        word: fn(&L) -> Option<u64>,
    }

    impl<L: RateLimiter<u64>> Real<L> {
        /// `limiter`'s key, created by a request of cost 0 (which takes nothing), so
        /// a model of the compare-and-set loop does not also explore creation.
        pub fn new(limiter: L, word: fn(&L) -> Option<u64>) -> Self {
            assert!(limiter.acquire(&KEY, 0).is_allowed());
            Self { limiter, word }
        }
    }

    impl<L: RateLimiter<u64> + Send + Sync + 'static> Key for Real<L> {
        fn acquire(&self, cost: u32) -> Decision {
            self.limiter.acquire(&KEY, cost)
        }
        fn peek(&self) -> u32 {
            self.limiter.peek(&KEY)
        }
        fn word(&self) -> u64 {
            (self.word)(&self.limiter).expect("the key was created")
        }
    }

    /// A broken protocol: how a mutant applies one request to the word.
    pub type Protocol<A> = fn(&AtomicU64, &A, u64, u32) -> Decision;

    /// A mutant: one state word updated by a broken protocol instead of turnstile's
    /// compare-and-set loop, on the same pure step.
    pub struct Mutant<A> {
        word: AtomicU64,
        algorithm: A,
        clock: ManualClock,
        protocol: Protocol<A>,
    }

    impl<A: WordAlgorithm> Mutant<A> {
        /// A fresh key of `algorithm`, read through `clock`, stepped by `protocol`.
        pub fn new(algorithm: A, clock: &ManualClock, protocol: Protocol<A>) -> Self {
            Self {
                word: AtomicU64::new(algorithm.fresh()),
                algorithm,
                clock: clock.clone(),
                protocol,
            }
        }
    }

    impl<A: WordAlgorithm + 'static> Key for Mutant<A> {
        fn acquire(&self, cost: u32) -> Decision {
            (self.protocol)(&self.word, &self.algorithm, self.clock.now(), cost)
        }
        fn peek(&self) -> u32 {
            // Relaxed: the word guards no other memory.
            let word = self.word.load(Ordering::Relaxed);
            self.algorithm.available(word, self.clock.now())
        }
        fn word(&self) -> u64 {
            // Relaxed: read after the model's threads are joined.
            self.word.load(Ordering::Relaxed)
        }
    }

    /// Runs `f` on a new loom thread; its result is returned by `join`.
    pub fn spawn<K: Key, T: Send + 'static>(
        key: &Arc<K>,
        f: impl FnOnce(&K) -> T + Send + 'static,
    ) -> thread::JoinHandle<T> {
        let key = key.clone();
        thread::spawn(move || f(&key))
    }

    /// 1 if `decision` admitted the request, else 0.
    pub fn allowed(decision: Decision) -> u32 {
        u32::from(decision.is_allowed())
    }

    /// The frozen-clock model: three requests of 1 against a key that can admit 2
    /// (a fresh key of limit or capacity 2); exactly 2 succeed.
    pub fn frozen_clock_admits_exactly_two<K: Key>(key: K) {
        let key = Arc::new(key);
        let others = [
            spawn(&key, |k| allowed(k.acquire(1))),
            spawn(&key, |k| allowed(k.acquire(1))),
        ];
        let mine = allowed(key.acquire(1));
        let total = mine + others.map(|h| h.join().unwrap()).iter().sum::<u32>();
        assert_eq!(total, 2, "frozen clock: {total} allowed of 2");
    }

    /// Mutant: check, then store — two threads read the same state and both take.
    pub fn check_then_store<A: WordAlgorithm>(
        word: &AtomicU64,
        algorithm: &A,
        now: u64,
        cost: u32,
    ) -> Decision {
        // Relaxed: the mutant's flaw is the missing read-modify-write, not ordering.
        let current = word.load(Ordering::Relaxed);
        let (new, decision) = algorithm.acquire(current, now, cost);
        if new != current {
            // Relaxed: as above.
            word.store(new, Ordering::Relaxed);
        }
        decision
    }

    /// Mutant: a CAS loop that retries with the new word it computed from a stale
    /// value, instead of recomputing from the value it found.
    pub fn stale_retry<A: WordAlgorithm>(
        word: &AtomicU64,
        algorithm: &A,
        now: u64,
        cost: u32,
    ) -> Decision {
        // Relaxed: as in `check_then_store`.
        let mut current = word.load(Ordering::Relaxed);
        let (new, decision) = algorithm.acquire(current, now, cost);
        if new == current {
            return decision;
        }
        loop {
            // Relaxed: as above.
            match word.compare_exchange(current, new, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return decision,
                Err(actual) => current = actual,
            }
        }
    }
}
