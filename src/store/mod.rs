//! The keyed store: where each key's state lives, behind a small contract.
//!
//! Limiters use only this contract, so the same limiter code runs on the normal
//! builds' stores and on a small loom-aware store under `--cfg turnstile_loom`. In
//! normal builds `map.rs` picks by the state's type: the single-word algorithms' words
//! go to the word store (`words/`, an index of our own: keys and words side by side,
//! loom model 17 restating its growth), boxed states to an `scc::HashIndex`
//! (`scc.rs`). scc is not loom-aware (it uses std atomics internally), so
//! loom checks turnstile's protocols against this contract, and the index's own
//! guarantees — insert-if-absent under a bucket lock, lock-free lookups that see
//! every completed insertion and removal (Release stores of a bucket's bitmaps,
//! Acquire loads in the lookup), removed entries kept until no reader can hold them —
//! cover the rest.

use crate::KeyRef;
use std::borrow::Borrow;
use std::hash::Hash;

#[cfg(not(turnstile_loom))]
mod count;
#[cfg(turnstile_loom)]
mod loom;
#[cfg(not(turnstile_loom))]
mod map;
#[cfg(not(turnstile_loom))]
mod scc;
#[cfg(not(turnstile_loom))]
mod stored;
#[cfg(not(turnstile_loom))]
mod words;

#[cfg(not(turnstile_loom))]
pub use stored::Stored;

/// A state type the keyed store can hold: under loom, any (the loom store keeps every
/// state in an `Arc`).
#[cfg(turnstile_loom)]
pub trait Stored {}
#[cfg(turnstile_loom)]
impl<T> Stored for T {}

/// The store limiters use under loom: the loom-aware one.
#[cfg(turnstile_loom)]
pub(crate) type KeyMap<K, V, S> = loom::LoomStore<K, V, S>;
/// The store limiters use: normally the word store for single words and the scc store
/// for anything else (`map.rs`), the loom-aware one under loom.
#[cfg(not(turnstile_loom))]
pub(crate) type KeyMap<K, V, S> = map::Map<K, V, S>;

/// A concurrent map from keys to per-key state.
///
/// # Contract
/// - **get**: `get(key, f)` calls `f` with the key's value if the key is present. It
///   takes no lock, and may miss a key whose entry a `swap` is replacing at that
///   moment (scc inserts the successor and marks the old entry removed as two steps
///   that a lock-free reader can straddle), or that is moving to a larger table (the
///   same two steps across two tables); never one present throughout.
/// - **get-locked**: `get_locked(key, f)` looks under the map's lock for the key, so
///   it never misses a present key, swapped or not; `f` runs under that lock. For the
///   cold paths where a miss means something (a peek's fresh answer, a refund's
///   no-op, a refusal at the key cap).
/// - **get-or-insert, exactly once**: `get_or_insert(key, value, first, f)` stores
///   `value` if the key is absent (under the map's lock, so it never misses a present
///   key), calling `first` on it under that lock just before, while no other thread
///   can see it, and answers what `first` did. However many threads race on an absent
///   key, exactly one value is stored; the losers' `value`s are dropped unused, and
///   the losers call `f` with the key's value instead, as of a look at or after the
///   insertion: the scc store calls it on the entry it found, under the bucket's
///   lock, and always answers `Some`; a store may instead look again without the lock
///   and answer `None` (without calling `f`) when that look finds nothing — the entry
///   gone, or hidden for a moment by a swap, as for `get` — and the caller looks again
///   (the loom store does, which permits more interleavings). In the second case the
///   key existed all along, so `value` (for per-key quotas, the user's resolver) ran
///   for nothing.
/// - **remove-if**: `remove_if(key, pred)` removes the key's entry only if `pred`
///   holds for the value stored at that moment; an entry is never replaced in place,
///   so a later insert stores a new value.
/// - **stable values**: a value is never moved, replaced or freed while an `f` that
///   received it runs — even if its entry is removed meanwhile — so a thread that
///   found a value may still use it; protocols that forget keys must account for
///   that (see `evict.rs`).
/// - **swap**: `swap(key, current, new)` stores `new` as the key's value if the value
///   stored is `current` itself (the same value, by address), in one step for every
///   locked operation (a lock-free `get` may miss the key meanwhile, see above).
/// - **retain**: `retain(keep)` calls `keep` for each entry present throughout the
///   pass, possibly more than once for one entry (scc's own docs allow it), and
///   removes the entries it rejects — not necessarily at the last call; entries
///   inserted or removed during the pass may or may not be seen.
/// - Closures may run more than once, and may see a value that is replaced or removed
///   before the call returns; `remove_if` removes only if `pred` held for the value it
///   removes. `value` and the `f` of `get` run outside any lock of the map (but
///   `value` inside the epoch guard of a `get_or_else` that calls `get_or_insert`
///   from its `missed`); `pred`, `keep`, the `f` of `get_locked` and the `first` and
///   `f` of `get_or_insert` may run under one (scc holds the bucket's lock), so they
///   must be short and must not call the store. The loom store runs every closure but `first` unlocked, which
///   permits more interleavings, not fewer; `first` runs under the lock that makes
///   the insertion one step, as the contract says.
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
    /// lookup lets go of what it holds (the scc store's epoch guard), so that a
    /// `get_or_insert` inside `missed` takes none of its own: on x86 a full barrier
    /// fewer on every new key's request (results/ANALYSIS.md). `missed` may take long
    /// (a sweep, when the map has outgrown its bound).
    fn get_or_else<Q, R>(&self, key: &Q, f: impl FnOnce(&V) -> R, missed: impl FnOnce() -> R) -> R
    where
        K: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
    {
        self.get(key, f).unwrap_or_else(missed)
    }

    /// Calls `f` with the value of `key`, if present, looking under the map's lock for
    /// the key: never misses a key that a `swap` is replacing.
    fn get_locked<Q, R>(&self, key: &Q, f: impl FnOnce(&V) -> R) -> Option<R>
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>;

    /// Calls `f` with the value of `key`, or, if the key is absent, `first` with
    /// `value(owned key)` before storing it. For a key the caller has just missed:
    /// `value` is made before the store looks again, and dropped unused if another
    /// thread stored one first.
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
    /// point where it holds no lock of the store (the word store: before each segment
    /// and between the steps of a drain it finishes; the scc store: every 1,024 keys
    /// asked about), so that the sweeper thread can give up its CPU where no request waits on it
    /// (`keyed/maintenance.rs`, `Pace`).
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
    /// fresh pages or moves its keys. The scc store has nothing to prepare: its index
    /// grows by itself. Calls `stop` between steps, holding none of the store's locks
    /// (so the sweeper thread may yield its CPU there, `keyed/maintenance.rs`), and
    /// ends early once it says so (the limiter is being dropped, or a sweep is
    /// waiting), the next call going on from there. For the sweeper thread (none under
    /// loom); safe while requests run.
    #[cfg_attr(turnstile_loom, allow(dead_code))]
    fn prepare(&self, stop: impl Fn() -> bool) {
        let _ = stop;
    }
}
