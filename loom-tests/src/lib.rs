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
