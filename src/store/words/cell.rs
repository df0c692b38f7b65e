//! A cell written once, before any other thread can reach it, and read by any number
//! of threads after: the key of a slot in a table of words.
//!
//! The crate's `unsafe` is here and in `table.rs`, which uses it. Safe Rust has no
//! write-once cell without a state word of its own (`OnceLock` adds one to every slot:
//! 8 more bytes per `u64` key, a third of what a key costs in the table); here the
//! slot's tag, published with a Release store after the write and loaded with Acquire
//! before a read, is that state. miri runs this module's tests and the table's in CI.

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;

/// A key slot: uninitialised until [`write`](Self::write), then immutable until the
/// table that holds it is dropped.
pub(super) struct KeyCell<K>(UnsafeCell<MaybeUninit<K>>);

// SAFETY: the cell is written once, by the only thread that can reach it (the holder
// of its segment's lock, before the tag that makes the slot visible is published),
// and only read after that publication (`get`'s contract), so threads share `&K`
// and nothing else: what `K: Sync` allows. `K: Send` because the table, and with it
// the key, may be dropped on another thread.
unsafe impl<K: Send + Sync> Sync for KeyCell<K> {}

impl<K> KeyCell<K> {
    /// An empty cell (tables of normal builds are zeroed instead, which is the same).
    #[cfg(turnstile_shuttle)]
    pub(super) fn empty() -> Self {
        Self(UnsafeCell::new(MaybeUninit::uninit()))
    }

    /// Stores `key`.
    ///
    /// # Safety
    /// The cell is empty, and no other thread reads or writes it until the caller
    /// publishes it (with a Release store that readers load with Acquire before
    /// [`get`](Self::get)).
    pub(super) unsafe fn write(&self, key: K) {
        // SAFETY: by the caller's contract no other reference into the cell exists.
        unsafe { (*self.0.get()).write(key) };
    }

    /// The key.
    ///
    /// # Safety
    /// [`write`](Self::write) has stored a key, and that write happens before this
    /// call (its publication was loaded with Acquire, or this thread wrote it).
    pub(super) unsafe fn get(&self) -> &K {
        // SAFETY: initialised (the caller's contract) and never written again while
        // `&self` lives.
        unsafe { (*self.0.get()).assume_init_ref() }
    }

    /// Drops the key.
    ///
    /// # Safety
    /// [`write`](Self::write) has stored a key, and no reference to it remains: the
    /// table is being dropped.
    pub(super) unsafe fn drop_key(&mut self) {
        // SAFETY: initialised, and `&mut self` excludes every other reference.
        unsafe { self.0.get_mut().assume_init_drop() };
    }
}
