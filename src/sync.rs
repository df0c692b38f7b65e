//! The one place that names atomics (and the other primitives loom must see).
//!
//! Normal builds use `std`'s; builds with `--cfg turnstile_loom` use loom's, so the
//! model checker in `loom-tests/` sees every atomic access turnstile makes. The cfg is
//! turnstile's own (not `loom`), so dependencies such as papaya keep their std atomics.

#[cfg(not(turnstile_loom))]
pub(crate) use std::sync::atomic::{AtomicU64, Ordering, fence};
#[cfg(not(turnstile_loom))]
pub(crate) use std::sync::{Arc, Mutex, MutexGuard, RwLock};
#[cfg(not(turnstile_loom))]
pub(crate) use std::thread::yield_now;

#[cfg(turnstile_loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, Ordering, fence};
#[cfg(turnstile_loom)]
pub(crate) use loom::sync::{Arc, Mutex, MutexGuard, RwLock};
#[cfg(turnstile_loom)]
pub(crate) use loom::thread::yield_now;
