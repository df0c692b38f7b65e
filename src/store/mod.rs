//! The keyed store: where each key's state lives, and the contract limiters see.
//!
//! Limiters use only this module's faces, so the same limiter code runs on the normal
//! builds' stores and on a loom-aware store under `--cfg turnstile_loom`:
//!
//! - [`Map`]: one concurrent map of keys to states, behind a small contract.
//!   **papaya** in normal builds (`papaya/`: a lock-free hash map; lookups,
//!   insertions and removals take no lock); under loom a map exactly as weak as the
//!   contract allows (`loom/`), so loom explores every interleaving it permits.
//! - **The ring** (`ring/`): the default store of a keyed limiter, three maps in
//!   turn — new keys go to the young one, a key still found in the old one is
//!   relocated into the young one, and the old one is drained whole, so forgetting
//!   keys costs no lookup of them and no key is removed from the young map.
//! - **The word store** (`words/`, opt-in with
//!   [`word_store`](crate::Builder::word_store)): single-word states beside their keys
//!   in 1,024 segmented tables, insertions and removals under segment locks; fewer
//!   bytes per key and faster churn, at the price of those locks.
//! - `built.rs`: the store a limiter was built with (the ring, or the word store), and
//!   the one face the keyed limiter calls, [`KeyedStore`].
//! - `insertions.rs`: the handshake every insertion takes part in, so that whoever
//!   changes where keys go or what a new state is dated at knows when the insertions
//!   that began before the change are done, without any of them waiting.
//!
//! Neither papaya nor the word store is loom-aware (both use std atomics inside), so
//! loom checks turnstile's protocols — the ring's included — on the loom map, and
//! each store's own guarantees cover the rest: papaya's documented ones (`papaya/`),
//! the word store's own tests, miri and loom model 17 (a restatement of its growth).

use crate::KeyRef;
use crate::algorithm::Blocked;
use std::borrow::Borrow;
use std::hash::Hash;

mod built;
pub(crate) mod insertions;
#[cfg(turnstile_loom)]
mod loom;
#[cfg(not(turnstile_loom))]
mod papaya;
mod pass;
pub(crate) mod ring;
mod striped;
#[cfg(not(turnstile_loom))]
mod words;

pub(crate) use built::KeyedStore;
pub(crate) use pass::{Judged, Pass};
/// The map of this build (papaya, or loom's stand-in), for the baselines.
#[cfg(all(not(turnstile_loom), feature = "baselines"))]
pub(crate) type BuildMap<K, V, S> = papaya::PapayaMap<K, V, S>;
#[cfg(all(turnstile_loom, feature = "baselines"))]
pub(crate) type BuildMap<K, V, S> = loom::LoomMap<K, V, S>;

/// Which store a keyed limiter keeps its states in, chosen when it is built.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum StoreKind {
    /// The ring of papaya maps: no lock on any request path.
    #[default]
    Ring,
    /// The word store, for single-word states (others stay in the ring).
    Words,
}

/// How a key's state is relocated — frozen where it is while a copy takes its place —
/// and how a new key stakes its claim in the old generation: what the ring needs to
/// know of the states it holds. Every [`Algorithm`](crate::algorithm::Algorithm)'s
/// states can be ([`Algorithm::relocate`](crate::algorithm::Algorithm::relocate)).
pub(crate) trait Relocation<V> {
    /// Freezes `state` and returns its copy (the same copy for every caller).
    fn relocate(&self, state: &V) -> Result<V, Blocked>;

    /// A copy of `fresh` (a new key's state, not yet stored) that is already
    /// relocated: relocating it gives a copy of `fresh` back.
    fn relocated_copy(&self, fresh: &V) -> V;
}

/// A store whose keys are forgotten where they are, by sweeps that retire and remove
/// them in place: the word store (and, under loom, a store exactly as weak as it).
///
/// # Contract
/// - **get**: `get(key, f)` calls `f` with the key's value if the key is present. It
///   takes no lock. It may miss a key whose entry a `swap` is replacing, or that is
///   moving to a larger table, at that moment (two steps a lock-free reader can
///   straddle).
/// - **get-locked**: `get_locked(key, f)` never misses a present key, swapped or not:
///   the word store's looks under the segment's lock, and runs `f` there. For the cold
///   paths where a miss means something (a peek's fresh answer, a refund's no-op, a
///   refusal at the key cap).
/// - **get-or-insert, exactly once, applied before published**: `get_or_insert(key,
///   value, first, f)` makes `value(owned key)`, calls `first` on it while no other
///   thread can see it, then stores it if the key is still absent, and answers what
///   `first` did. However many threads race on an absent key, exactly one value is
///   stored; a loser's value, and what its `first` did to it, are dropped unused, and
///   the loser calls `f` with the key's stored value instead (the winner's, or a
///   later one) and answers that — or, on a store that looks again for it, `None`
///   (without calling `f`) when that look finds the key gone, and the caller looks
///   again. The word store runs `first` and a loser's `f` under the segment's lock.
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
/// - **sweeps in parts**: a pass ([`Pass`]) is taken in parts, by `sweep_share`
///   (bounded, never waiting) and `sweep_walk`; each part is finished, and counted in
///   the pass, exactly once per pass. Together they call `judge` for each entry
///   present throughout the pass, possibly more than once for one entry, and remove
///   the entries it answers `Removed` — not necessarily at the last call; entries
///   inserted or removed during the pass may or may not be seen.
/// - Closures may see a value that is replaced or removed before the call returns.
///   None may call the store. On the word store, `pred`, `judge`, `first`, a loser's
///   `f` and the `f` of `get_locked` may run under a segment's lock. `value` runs before anything is locked or reserved. The
///   loom store runs every closure unlocked, on snapshots, which permits more
///   interleavings, not fewer.
/// - Every method may be called from any number of threads at once.
pub(crate) trait InPlace<K, V, S> {
    /// An empty store expecting about `expected_keys` keys.
    fn with_hasher(hasher: S, expected_keys: usize) -> Self;

    /// Calls `f` with the value of `key`, if present.
    fn get<Q, R>(&self, key: &Q, f: impl FnOnce(&V) -> R) -> Option<R>
    where
        K: Borrow<Q>,
        Q: ?Sized + Hash + Eq;

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
    /// fresh pages or moves its keys. Calls `stop` between steps, holding none of the
    /// store's locks (so the sweeper thread may yield its CPU there,
    /// `evict/sweeper.rs`), and
    /// ends early once it says so (the limiter is being dropped, or a sweep is
    /// waiting), the next call going on from there (the word store's `sweep_walk` also
    /// finishes a preparation cut short, on whichever thread walks). For the sweeper
    /// thread (none under loom); safe while requests run.
    #[cfg_attr(turnstile_loom, allow(dead_code))]
    fn prepare(&self, stop: impl Fn() -> bool) {
        let _ = stop;
    }

    /// Parts of a sweep in parts ([`Pass`], `evict/sweep.rs`): the
    /// word store's segments.
    fn sweep_parts(&self) -> usize;

    /// A new key's share of the open pass: `judge` (as of the pass's instant, read
    /// under the part's lock) on a bounded number of entries of a part no one else
    /// holds, those it answers `Removed` removed; a part finished is counted in the
    /// pass. Never waits for a lock (it may do nothing). Not called under loom.
    #[cfg_attr(turnstile_loom, allow(dead_code))]
    fn sweep_share(&self, pass: &Pass, judge: impl FnMut(&V, u64) -> Judged);

    /// Every part of the open pass not yet finished, finished, waiting for their
    /// locks: `judge` as in [`sweep_share`](Self::sweep_share), `breathe` between holds,
    /// holding no lock of the store (its `false`: stop). Whether it walked to the end.
    fn sweep_walk(
        &self,
        pass: &Pass,
        judge: impl FnMut(&V, u64) -> Judged,
        breathe: impl FnMut() -> bool,
    ) -> bool;
}

/// The relocation of an algorithm's states ([`Relocation`] for the ring), as the
/// algorithm says (`Algorithm::relocate`, `Algorithm::relocated_copy`).
pub(crate) struct Relocator<'a, A, K>(&'a A, std::marker::PhantomData<fn(&K)>);

impl<'a, A, K> Relocator<'a, A, K> {
    /// The relocation of `algorithm`'s states.
    pub(crate) fn of(algorithm: &'a A) -> Self {
        Self(algorithm, std::marker::PhantomData)
    }
}

impl<A: crate::algorithm::Algorithm<K>, K> Relocation<A::State> for Relocator<'_, A, K> {
    #[inline]
    fn relocate(&self, state: &A::State) -> Result<A::State, Blocked> {
        self.0.relocate(state)
    }

    fn relocated_copy(&self, fresh: &A::State) -> A::State {
        self.0.relocated_copy(fresh)
    }
}

/// The type of a map's pass ([`Map::pass`]), named apart from [`Map`] so that a type
/// holding a pass (the ring) puts no bounds on its keys where it is declared.
pub(crate) trait Passes {
    /// A pass over the map's entries, held between the steps that advance it.
    type Pass;
}

/// A concurrent map of keys to states: one generation of the ring, or a baseline's map.
///
/// # Contract
/// - **get**: `get(key, f)` calls `f` with the key's value if the key is present. It
///   takes no lock and never misses a key present throughout it.
/// - **insert, exactly once**: `insert(key, value, f)` stores `value` if the key is
///   absent (`Ok`), else calls `f` on the value stored and answers `Err` of that,
///   dropping `value`. However many threads race on an absent key, exactly one value is
///   stored.
/// - **remove-if**: `remove_if(key, pred)` removes the key's entry only if `pred` holds
///   for the value stored at that moment; `pred` may be asked more than once (again
///   when the entry changes first). An entry is never replaced in place, so a later
///   insert stores a new value.
/// - **stable values**: a value is never moved, replaced or freed while an `f` that
///   received it runs — even if its entry is removed meanwhile — so a thread that
///   found a value may still use it; protocols that forget or relocate keys account
///   for that (see `crate::evict` and `ring/`). A value stays at one address for as
///   long as it is stored (the ring's drain tells entries apart by it).
/// - **swap**: `swap(key, current, new)` stores `new` as the key's value if the value
///   stored is `current` itself (the same value, by address), in one step.
/// - **passes**: a [`Pass`](Passes::Pass) visits each entry present throughout it once,
///   entries inserted or removed meanwhile perhaps; it may be advanced by any thread,
///   a few entries at a time, and an entry it visits may be removed during the visit.
/// - Closures may see a value that is replaced or removed before the call returns.
///   None may call the map, but a pass's visit, which may remove and insert. None runs
///   under a lock (the loom map runs every closure unlocked, on snapshots, which
///   permits more interleavings, not fewer).
/// - Every method may be called from any number of threads at once.
pub(crate) trait Map<K, V, S>: Passes + Sized + Send + Sync {
    /// An empty map expecting about `expected_keys` keys.
    fn with_hasher(hasher: S, expected_keys: usize) -> Self;

    /// Calls `f` with the value of `key`, if present.
    fn get<Q, R>(&self, key: &Q, f: impl FnOnce(&V) -> R) -> Option<R>
    where
        K: Borrow<Q>,
        Q: ?Sized + Hash + Eq;

    /// Stores `value` under `key` if the key is absent; else `Err(f(stored value))`.
    fn insert<R>(&self, key: K, value: V, f: impl FnOnce(&V) -> R) -> Result<(), R>;

    /// Removes `key`'s entry if `pred` holds for its value; whether it did.
    fn remove_if<Q>(&self, key: &Q, pred: impl FnMut(&V) -> bool) -> bool
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>;

    /// Stores `new` as `key`'s value if its value is `current` itself; whether it did.
    fn swap(&self, key: K, current: &V, new: V) -> bool;

    /// Number of keys stored.
    fn len(&self) -> usize;

    /// A pass over `map`'s entries, which keeps `map` alive. On papaya it first
    /// finishes a resize the map was in (papaya's iteration does), which can take a
    /// while: for the sweeper thread, not a request.
    fn pass(map: std::sync::Arc<Self>) -> Self::Pass;

    /// Finishes a resize the map is in, if any (papaya grows a table incrementally, by
    /// the writes that follow, and a map no longer written to keeps a resize begun):
    /// the copy [`pass`](Map::pass) would otherwise make first. Nothing on a map
    /// that does not grow in steps.
    fn finish_resize(&self) {}

    /// Visits up to `budget` more entries of the pass; `false` once it has visited
    /// them all.
    fn advance(pass: &mut Self::Pass, budget: usize, visit: impl FnMut(&K, &V)) -> bool;
}
