//! The keyed store: where each key's state lives, behind a small contract.
//!
//! Limiters use only this contract, so the same limiter code runs on the normal
//! builds' stores and on a small loom-aware store under `--cfg turnstile_loom`. In
//! normal builds `built.rs` holds the store the limiter was built with: **papaya** by
//! default (`papaya.rs`: a lock-free hash map; lookups, insertions and removals take
//! no lock), or, for a limiter of single-word states built with
//! [`word_store`](crate::Builder::word_store), the **word store** (`words/`: an index
//! of our own with keys and words side by side, insertions and removals under 1,024
//! segment locks; fewer bytes per key and faster churn, at the price of those locks).
//! Neither is loom-aware (both use std atomics internally), so loom checks
//! turnstile's protocols against this contract (`loom.rs`, a store exactly as weak as
//! it), and each store's own guarantees cover the rest: papaya's documented ones
//! (`papaya.rs`), the word store's own tests, miri and loom model 17 (a restatement
//! of its growth).

use crate::KeyRef;
use std::borrow::Borrow;
use std::hash::Hash;

#[cfg(not(turnstile_loom))]
mod built;
#[cfg(not(turnstile_loom))]
mod count;
#[cfg(turnstile_loom)]
mod loom;
#[cfg(not(turnstile_loom))]
mod papaya;
#[cfg(not(turnstile_loom))]
mod words;

/// Which store a keyed limiter keeps its states in, chosen when it is built.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum StoreKind {
    /// papaya: no lock on any request path.
    #[default]
    Papaya,
    /// The word store, for single-word states (others stay in papaya).
    Words,
}

/// The store limiters use under loom: the loom-aware one, whatever the kind.
#[cfg(turnstile_loom)]
pub(crate) type KeyedStore<K, V, S> = loom::LoomStore<K, V, S>;
/// The store limiters use: papaya or the word store, as built (`built.rs`); the
/// loom-aware one under loom.
#[cfg(not(turnstile_loom))]
pub(crate) type KeyedStore<K, V, S> = built::BuiltStore<K, V, S>;

/// A concurrent store of keys and their states.
///
/// # Contract
/// - **get**: `get(key, f)` calls `f` with the key's value if the key is present. It
///   takes no lock. It never misses a key present throughout it on papaya; the word
///   store's may miss a key whose entry a `swap` is replacing, or that is moving to a
///   larger table, at that moment (two steps a lock-free reader can straddle).
/// - **get-locked**: `get_locked(key, f)` never misses a present key, swapped or not:
///   papaya's is `get`; the word store's looks under the segment's lock, and runs `f`
///   there. For the cold paths where a miss means something (a peek's fresh answer,
///   a refund's no-op, a refusal at the key cap).
/// - **get-or-insert, exactly once, applied before published**: `get_or_insert(key,
///   value, first, f)` makes `value(owned key)`, calls `first` on it while no other
///   thread can see it, then stores it if the key is still absent, and answers what
///   `first` did. However many threads race on an absent key, exactly one value is
///   stored; a loser's value, and what its `first` did to it, are dropped unused, and
///   the loser calls `f` with the key's stored value instead (the winner's, or a
///   later one) and answers that — or, on a store that looks again for it, `None`
///   (without calling `f`) when that look finds the key gone, and the caller looks
///   again. On papaya nothing here takes a lock; the word store runs `first` and a
///   loser's `f` under the segment's lock.
/// - **remove-if**: `remove_if(key, pred)` removes the key's entry only if `pred`
///   holds for the value stored at that moment; `pred` may be asked more than once
///   (again when the entry changes first). An entry is never replaced in place, so a
///   later insert stores a new value.
/// - **stable values**: a value is never moved, replaced or freed while an `f` that
///   received it runs — even if its entry is removed meanwhile — so a thread that
///   found a value may still use it; protocols that forget keys must account for
///   that (see `evict/`).
/// - **swap**: `swap(key, current, new)` stores `new` as the key's value if the value
///   stored is `current` itself (the same value, by address), in one step.
/// - **retain**: `retain(keep)` calls `keep` for each entry present throughout the
///   pass, possibly more than once for one entry, and removes the entries it rejects
///   — not necessarily at the last call; entries inserted or removed during the pass
///   may or may not be seen.
/// - Closures may see a value that is replaced or removed before the call returns.
///   None may call the store. On papaya, none runs under a lock; on the word store,
///   `pred`, `keep`, `first`, a loser's `f` and the `f` of `get_locked` may run
///   under a segment's lock. `value` runs before anything is locked or reserved. The
///   loom store runs every closure unlocked, on snapshots, which permits more
///   interleavings, not fewer.
/// - Every method may be called from any number of threads at once.
pub(crate) trait Store<K, V, S> {
    /// An empty store expecting about `expected_keys` keys.
    fn with_hasher(hasher: S, expected_keys: usize) -> Self;

    /// Calls `f` with the value of `key`, if present.
    fn get<Q, R>(&self, key: &Q, f: impl FnOnce(&V) -> R) -> Option<R>
    where
        K: Borrow<Q>,
        Q: ?Sized + Hash + Eq;

    /// `f` on the value of `key` if present, else `missed()`, called before the
    /// lookup lets go of what it holds (an epoch guard), so that a `get_or_insert`
    /// inside `missed` pins a nested guard, with no barrier of its own
    /// (results/ANALYSIS.md). `missed` may take long (a sweep, when the store has
    /// outgrown its bound).
    fn get_or_else<Q, R>(&self, key: &Q, f: impl FnOnce(&V) -> R, missed: impl FnOnce() -> R) -> R
    where
        K: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
    {
        self.get(key, f).unwrap_or_else(missed)
    }

    /// Calls `f` with the value of `key`, if present: never misses a key that a `swap`
    /// is replacing (the word store looks under the segment's lock).
    fn get_locked<Q, R>(&self, key: &Q, f: impl FnOnce(&V) -> R) -> Option<R>
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>;

    /// Calls `first` on `value(owned key)` and stores it if `key` is absent, else `f`
    /// on the value stored (see the contract). For a key the caller has just missed:
    /// `value` is made and `first` applied before the store looks again, and both
    /// dropped unused if another thread stored one first.
    fn get_or_insert<Q, R>(
        &self,
        key: &Q,
        value: impl FnOnce(&K) -> V,
        first: impl FnOnce(&mut V) -> R,
        f: impl FnOnce(&V) -> R,
    ) -> Option<R>
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>;

    /// Removes `key`'s entry if `pred` holds for its value; whether it did.
    fn remove_if<Q>(&self, key: &Q, pred: impl FnMut(&V) -> bool) -> bool
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>;

    /// Removes every entry whose value `keep` rejects. Calls `pause` now and then at a
    /// point where it holds no lock of the store (papaya: every 1,024 keys asked
    /// about; the word store: before each segment, between its holds of a segment's
    /// lock, 64 removals each, and between the steps of a drain or a preparation it
    /// finishes), so that the sweeper thread can give up its CPU where no request
    /// waits on it (`evict/maintenance.rs`, `TurnTimer`).
    fn retain(&self, keep: impl FnMut(&V) -> bool, pause: impl FnMut());

    /// Stores `new` as `key`'s value if its value is `current` itself; whether it did.
    fn swap(&self, key: K, current: &V, new: V) -> bool;

    /// Number of keys stored.
    fn len(&self) -> usize;

    /// Whether the store's next stretch of memory should be prepared before requests
    /// reach it (see [`prepare`](Self::prepare)). Cheap: for an occasional insertion.
    fn wants_preparation(&self) -> bool {
        false
    }

    /// Prepares the store's next stretch of memory: in the word store, the segments'
    /// tables due grown ahead (allocated and their pages touched) and their outgrown
    /// tables drained (`words/`), so that no request allocates a large table, meets its
    /// fresh pages or moves its keys. papaya has nothing to prepare: it grows by
    /// itself, each insertion copying a chunk of 8 slots while it does. Calls `stop` between steps, holding none of the store's locks
    /// (so the sweeper thread may yield its CPU there, `evict/maintenance.rs`), and
    /// ends early once it says so (the limiter is being dropped, or a sweep is
    /// waiting), the next call going on from there (the word store's `retain` also
    /// finishes a preparation cut short, on whichever thread sweeps). For the sweeper
    /// thread (none under loom); safe while requests run.
    #[cfg_attr(turnstile_loom, allow(dead_code))]
    fn prepare(&self, stop: impl Fn() -> bool) {
        let _ = stop;
    }
}
