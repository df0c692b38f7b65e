//! A pass over a papaya map that any thread can advance a few entries at a time: the
//! ring's drain of its old generation (`store/ring/`), shared between the sweeper
//! thread and requests that do a share of it.
//!
//! papaya's iterator borrows an epoch guard, and the guard borrows the map's
//! collector; a pass held between steps, by whichever thread takes the next one, must
//! own all three. So it keeps the map alive through an `Arc`, the guard in an `Arc` of
//! its own (a heap place that never moves), and the iterator beside them, with their
//! borrows' lifetimes extended to `'static` — the one `unsafe` here, and why this
//! module allows it. It is sound because:
//!
//! - the guard borrows the map's collector, which lives in the map's allocation, kept
//!   by `map` for as long as the pass;
//! - the iterator borrows the guard, at a heap address that does not change when the
//!   pass moves (an `Arc`'s contents never move, and a move of the `Arc` itself
//!   asserts nothing about them), and reads the map's tables, which the guard keeps
//!   from being freed;
//! - fields drop in declaration order: the iterator, then the guard, then the map;
//! - nothing borrowed escapes: a visit gets the entries for the call only.
//!
//! miri runs this module's tests (`.ci/test`).
#![allow(unsafe_code)]

use super::PapayaMap;
use papaya::{Iter, OwnedGuard};
use std::hash::{BuildHasher, Hash};
use std::sync::Arc;

/// A pass over a papaya map's entries (see the module docs).
pub(crate) struct Pass<K, V, S> {
    // Declared in drop order; see the module docs.
    entries: Iter<'static, K, V, OwnedGuard<'static>>,
    _guard: Arc<OwnedGuard<'static>>,
    _map: Arc<PapayaMap<K, V, S>>,
}

impl<K, V, S> Pass<K, V, S>
where
    K: Hash + Eq + 'static,
    V: 'static,
    S: BuildHasher,
{
    /// A pass over `map`, which first finishes any resize in progress (papaya's
    /// iteration does, so that it sees every entry once).
    pub(crate) fn new(map: Arc<PapayaMap<K, V, S>>) -> Self {
        // The resize finished under this thread's own guard first: its outgrown table
        // then goes into this thread's batch, which its removals fill and hand to
        // reclamation. Finished under the pass's owned guard, it would go into that
        // guard's batch, which nothing ever hands over (seize does not when an owned
        // guard drops): a table a drain, kept for good (the live heap grew by a table
        // a cycle, 2-core EPYC VM).
        let _finished = map.map().pin().iter();
        // SAFETY: the guard borrows the map's collector, which `map` keeps alive, at
        // its place, for as long as the pass holds the guard (see the module docs).
        let guard = unsafe {
            std::mem::transmute::<OwnedGuard<'_>, OwnedGuard<'static>>(map.map().owned_guard())
        };
        let guard = Arc::new(guard);
        // SAFETY: the iterator borrows the guard in its `Arc`, whose contents never
        // move and outlive the iterator (dropped after it); it reads tables the guard
        // protects.
        let entries = unsafe {
            std::mem::transmute::<
                Iter<'_, K, V, OwnedGuard<'static>>,
                Iter<'static, K, V, OwnedGuard<'static>>,
            >(map.map().iter(&*guard))
        };
        Self {
            entries,
            _guard: guard,
            _map: map,
        }
    }

    /// Visits up to `budget` more entries; `false` once every one has been.
    pub(crate) fn advance(&mut self, budget: usize, mut visit: impl FnMut(&K, &V)) -> bool {
        for _ in 0..budget {
            match self.entries.next() {
                Some((key, value)) => visit(key, value),
                None => return false,
            }
        }
        true
    }
}
