//! The one place that names atomics.
//!
//! Normal builds use `std`'s; builds with `--cfg turnstile_loom` use loom's, so the
//! model checker in `loom-tests/` sees every atomic access turnstile makes. The cfg is
//! turnstile's own (not `loom`), so dependencies such as papaya keep their std atomics.

#[cfg(not(turnstile_loom))]
pub(crate) use std::sync::atomic::{AtomicU64, Ordering, fence};
#[cfg(not(turnstile_loom))]
pub(crate) use std::sync::{Arc, Mutex, MutexGuard};

#[cfg(turnstile_loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, Ordering, fence};
#[cfg(turnstile_loom)]
pub(crate) use loom::sync::{Arc, Mutex, MutexGuard};
