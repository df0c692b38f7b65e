//! The ring: a keyed limiter's default store. Three maps ([`Map`]: papaya, or the loom
//! map) take turns as the *young* generation, where new keys go; the *old* one, which
//! a key is found in only until it is relocated into the young one or forgotten; and
//! the *spare*, empty, next in line. A rotation makes the young map old and the spare
//! young; the old map is then drained whole — each state in it relocated into the
//! young map or forgotten, and removed — and becomes the spare. Forgetting a key so
//! costs no lookup of it, and no key is removed from a map while it is young; a map
//! reused after its drain keeps that drain's tombstones until it next grows (papaya
//! 0.2.5 cannot reset a table), which lengthens the probes that miss in it
//! (`results/new-key.md`). When the
//! ring rotates and drains is `crate::evict`'s to decide; this module keeps every key
//! to one state through it.
//!
//! # The view
//! One word says which map is which: the generation number, the young and old maps'
//! places, and two flags — `OLD` (the old map may hold keys: lookups that miss the
//! young one look there) and `CLAIMS` (insertions begun before the last rotation may
//! still land in the old map). A request reads it once and looks up the young map,
//! then, on a miss and only if `OLD` is set, the old one.
//!
//! # One state per key
//! - **A key found in the old map is relocated** (`Algorithm::relocate`): its state is
//!   frozen where it is, with its value kept in the frozen word, and a copy takes its
//!   place in the young map. The freeze is a compare-and-set on the state, so a
//!   request that still holds the old state — found there before the rotation —
//!   either changed it before the freeze (and the copy has the change) or fails after
//!   it and looks again. Any thread that meets a frozen state makes the copy itself
//!   (every caller of `relocate` gets the same one; the young map stores one), so a
//!   relocation begun and not finished is finished by the next thread, and none waits.
//! - **Every insertion into a generation is registered** (`insertions.rs`), and only
//!   after registering does it check that the generation it looked the key up in is
//!   still current (else it looks again). A rotation flips the registration phase
//!   after it changes the view, so insertions begun before it — which may still land
//!   in the map that is old now — are counted apart; until they are all done the view
//!   keeps `CLAIMS` set.
//! - **While `CLAIMS` is set, a new key first claims its place in the old map**: it
//!   inserts there a fresh state already relocated, then its own state into the young
//!   map. An insertion begun before the rotation that meets the claim looks again and
//!   finds the key in the young map; one that got there first is relocated like any
//!   state of the old map (the claim fails, and the new key's request looks again).
//!   An insertion registers against the whole view it looked in: one that looked
//!   while claims were open and registers after they closed looks again, so no claim
//!   lands after the flip the drain waits for.
//! - **The old map is drained only once `CLAIMS` is clear**, and the next rotation
//!   waits for the drain to end, so nothing is inserted into a map while it is
//!   drained, and a map is empty when it becomes young again. The drain relocates
//!   every state it does not forget (and finishes the relocations it finds begun)
//!   before removing it.
//!
//! Loom models 18 to 20 check the steps on the real code, each with mutants that
//! break them (`loom-tests/tests/ring.rs`); models 6 and 16 the whole cycle's
//! forgetting (`loom-tests/tests/eviction.rs`).

use super::insertions::{Insertions, Registration};
use super::{Map, Passes, Relocation};
use crate::KeyRef;
use crate::algorithm::{Blocked, Retirement};
use crate::sync::mutants::{Mutant, active};
use crate::sync::{AtomicU64, AtomicUsize, Mutex, Ordering, Unpoisoned};
use std::borrow::Borrow;
use std::hash::Hash;
use std::marker::PhantomData;
use std::sync::Arc;

/// Which map is young and which old, the generation, and the `OLD` and `CLAIMS`
/// flags (see the module docs), in one word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct View(u64);

impl View {
    /// The young map's place, in the lowest two bits (the hot path's one mask); the
    /// old map's, at bit 2.
    const YOUNG_AT: u32 = 0;
    const OLD_AT: u32 = 2;
    /// The old map may hold keys.
    const OLD: u64 = 1 << 4;
    /// Insertions begun before the last rotation may still land in the old map.
    const CLAIMS: u64 = 1 << 5;
    /// The generation number, counted from the limiter's creation, from bit 8.
    const GENERATION_AT: u32 = 8;

    /// A new limiter's view: map 0 young, map 2 old and empty, map 1 the spare.
    pub(crate) const FIRST: View = View(2 << Self::OLD_AT);

    /// The young map's place: two bits, so that indexing [`MAPS`] needs no bounds
    /// check.
    #[inline(always)]
    fn young(self) -> usize {
        (self.0 >> Self::YOUNG_AT & 3) as usize
    }

    #[inline(always)]
    fn old(self) -> usize {
        (self.0 >> Self::OLD_AT & 3) as usize
    }

    /// The generation: how many rotations came before this view.
    pub(crate) fn generation(self) -> u64 {
        self.0 >> Self::GENERATION_AT
    }

    /// Whether the old map may hold keys.
    #[inline(always)]
    pub(crate) fn old_holds_keys(self) -> bool {
        self.0 & Self::OLD != 0
    }

    /// Whether new keys must claim their place in the old map first.
    pub(crate) fn claims(self) -> bool {
        self.0 & Self::CLAIMS != 0
    }

    /// The view after a rotation: the spare young, the young old, both flags set.
    fn rotated(self) -> View {
        let spare = 3 - self.young() - self.old();
        View(
            (self.generation() + 1) << Self::GENERATION_AT
                | (self.young() as u64) << Self::OLD_AT
                | (spare as u64) << Self::YOUNG_AT
                | Self::OLD
                | Self::CLAIMS,
        )
    }
}

/// Regions a drain splits the old map into, each drained by one thread at a time, so
/// that threads sharing the drain seldom find theirs held (a single cursor, held by
/// one thread at a time, was held two times in three when two request threads shared
/// it on two cores, and the drain fell behind the stream). A region is a residue
/// class of the entries, not a stretch of them: each region's pass walks the whole
/// map and acts on the entries of its class ([`region_of`]), so a drain opens without
/// walking the map to place its regions (placing stretches walked 3.5 times the old
/// map's entries, on the thread, before any share could begin), and regions taken in
/// turn progress alike and end close together.
#[cfg(not(turnstile_loom))]
const REGIONS: usize = 8;
/// Two regions under loom: enough for two threads draining at once.
#[cfg(turnstile_loom)]
const REGIONS: usize = 2;

/// The region of the entry whose state is at `state`: from the state's address, which
/// an entry keeps while it is in the map (the map contract, `store/mod.rs`: papaya
/// boxes entries and never moves them), so every pass of a drain sees the entry in
/// the same region, and no key is hashed again.
#[cfg(not(any(turnstile_loom, turnstile_shuttle)))]
#[inline]
fn region_of<K, V>(_: &K, state: &V) -> usize {
    const _: () = assert!(REGIONS.is_power_of_two());
    // Fibonacci hashing of the address (its low bits are the allocation's alignment):
    // the product's top bits spread neighbouring allocations over the regions.
    let address = std::ptr::from_ref(state).addr() as u64;
    (address.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - REGIONS.trailing_zeros())) as usize
}

/// Under the checkers, from the key's hash by a fixed hasher: an address differs from
/// one execution of a model to the next, and loom needs every execution to take the
/// same path given the same schedule (shuttle, to replay a failing one).
#[cfg(any(turnstile_loom, turnstile_shuttle))]
fn region_of<K: Hash, V>(key: &K, _: &V) -> usize {
    use std::hash::Hasher;
    let mut hasher = std::hash::DefaultHasher::new();
    key.hash(&mut hasher);
    (hasher.finish() % REGIONS as u64) as usize
}

/// One region of a drain: a pass over the whole old map that acts on the entries of
/// its class only, and the view the drain was opened under. A thread that takes the
/// region works on that view's maps, not on the one it read before it took the region:
/// by then that drain may be over, the ring rotated, and this region another drain's.
struct Region<P> {
    pass: P,
    class: usize,
    view: View,
}

/// A region's place: the region while it drains, and the pass of one a request's
/// share finished, kept for the sweeper thread to release. Releasing a pass ends its
/// epoch guard, held since the drain opened, and the thread that ends it frees every
/// entry retired meanwhile that no other guard still holds: up to a margin's worth
/// of forgotten keys, hundreds of milliseconds of frees under churn (a request that
/// dropped the pass it finished took 0.25–0.67 s in one call: `results/issue-45.md`).
/// So a request never drops one; the thread ([`Ring::release_spent`]) or the next
/// opening of a drain does.
struct Slot<P> {
    region: Option<Region<P>>,
    spent: Option<P>,
}

impl<P> Slot<P> {
    const EMPTY: Self = Self {
        region: None,
        spent: None,
    };
}

/// Why a look found no state a request could use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Missed {
    /// The state found could not be used (see [`Blocked`]).
    Blocked(Blocked),
    /// The key has no state: it is new as of this view.
    Absent(View),
}

impl From<Blocked> for Missed {
    fn from(blocked: Blocked) -> Self {
        Missed::Blocked(blocked)
    }
}

/// What a step of the drain did (see [`Ring::drain`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Drained {
    /// States forgotten (retired by this step).
    pub(crate) forgotten: usize,
    /// States relocated into the young map, or whose relocation this step finished.
    pub(crate) relocated: usize,
    /// Whether the drain was over before this step (`OLD` clear): nothing to do.
    pub(crate) done: bool,
    /// Whether another thread held every region tried, so this step did nothing.
    pub(crate) busy: bool,
    /// Whether the region this step worked in has entries left to visit.
    pub(crate) open: bool,
    /// Whether this step (a request's share) finished its region and left the pass
    /// for the thread to release ([`Ring::release_spent`]).
    pub(crate) spent: bool,
}

/// Places for maps: three maps take turns, and a fourth place, never named by a view,
/// holds a second handle to the first, so that a place read from two bits of the view
/// is always in bounds.
const MAPS: usize = 4;

/// The ring's key, state and hasher types, owned by none of its fields.
type Kinds<K, V, S> = PhantomData<fn() -> (K, V, S)>;

/// Three maps in turn (see the module docs).
pub(crate) struct Ring<K, V, S, M: Passes> {
    maps: [Arc<M>; MAPS],
    view: AtomicU64,
    /// Every insertion into a map of the ring registers here; the watermark's
    /// handshake (`crate::evict`) uses it too.
    insertions: Insertions,
    /// The drain's regions of the old map, while one runs (see [`Ring::drain`]), and
    /// the passes of those requests finished (see [`Slot`]).
    regions: [Mutex<Slot<M::Pass>>; REGIONS],
    /// Regions of the drain under way not yet done.
    regions_left: AtomicUsize,
    kinds: Kinds<K, V, S>,
}

impl<K, V, S, M> Ring<K, V, S, M>
where
    K: Hash + Eq + Clone,
    S: Clone,
    M: Map<K, V, S>,
{
    /// An empty ring; the young map sized for about `expected_keys` keys.
    pub(crate) fn with_hasher(hasher: S, expected_keys: usize) -> Self {
        let first = Arc::new(M::with_hasher(hasher.clone(), expected_keys));
        Self {
            maps: [
                Arc::clone(&first),
                Arc::new(M::with_hasher(hasher.clone(), 0)),
                Arc::new(M::with_hasher(hasher, 0)),
                first,
            ],
            view: AtomicU64::new(View::FIRST.0),
            insertions: Insertions::new(),
            regions: std::array::from_fn(|_| Mutex::new(Slot::EMPTY)),
            regions_left: AtomicUsize::new(0),
            kinds: PhantomData,
        }
    }

    /// The view now.
    #[inline(always)]
    pub(crate) fn view(&self) -> View {
        // Acquire: pairs with the Release of every change to the view, so a request
        // that sees the old map drained (`OLD` clear) or claims closed finds in the
        // young map every state the drain relocated there, and in the old map every
        // state inserted before the claims closed.
        View(self.view.load(Ordering::Acquire))
    }

    /// The registration handshake of the ring's insertions.
    pub(crate) fn insertions(&self) -> &Insertions {
        &self.insertions
    }

    /// Registers an insertion into the maps of `view`, unless the view has changed
    /// since (then `None`: the caller looks the key up again). The whole view, not only
    /// its generation: an insertion that looked while claims were open and registers
    /// after they closed would put its claim in the old map after the flip the drain
    /// waits for, and even after the drain (the map then young again two rotations
    /// on, with a frozen claim in it).
    fn register(&self, view: View) -> Option<Registration<'_>> {
        let registration = self.insertions.register();
        let stale = self.view() != view;
        (!stale || active(Mutant::StaleInsertion)).then_some(registration)
    }

    /// `f` on `key`'s state: the young map's, or (off the hot path) the old map's
    /// relocated into the young one; `Absent(view)` if neither holds one.
    #[inline(always)]
    pub(crate) fn look<Q, R>(
        &self,
        key: &Q,
        f: impl Fn(&V) -> Result<R, Blocked> + Copy,
        relocation: &impl Relocation<V>,
    ) -> Result<R, Missed>
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        let view = self.view();
        // `f` by value on the hot path, so that the step inlines into the lookup (a
        // reference to it left a call, and its register saves, in every check); and a
        // plain lookup, with the miss handled after it, so the hot path builds nothing
        // for the miss.
        match self.maps[view.young()].get(key, f) {
            Some(answer) => answer.map_err(Missed::Blocked),
            None => self.look_old(view, key, &f, relocation),
        }
    }

    /// A miss in the young map: the old map's state relocated, if it has one.
    #[cold]
    #[inline(never)]
    fn look_old<Q, R>(
        &self,
        view: View,
        key: &Q,
        f: &impl Fn(&V) -> Result<R, Blocked>,
        relocation: &impl Relocation<V>,
    ) -> Result<R, Missed>
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        if !view.old_holds_keys() || self.maps[view.old()].get(key, |_| ()).is_none() {
            return Err(Missed::Absent(view));
        }
        match self.promote(view, key, f, relocation) {
            Some(answer) => answer.map_err(Missed::Blocked),
            // Forgotten meanwhile: a new key.
            None => Err(Missed::Absent(view)),
        }
    }

    /// Relocates `key`'s state from the old map of `view` into its young map and
    /// applies `f` there; `None` if the old map holds no live state for it any more.
    fn promote<Q, R>(
        &self,
        view: View,
        key: &Q,
        f: &impl Fn(&V) -> Result<R, Blocked>,
        relocation: &impl Relocation<V>,
    ) -> Option<Result<R, Blocked>>
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        let Some(_registration) = self.register(view) else {
            return Some(Err(Blocked::Relocated));
        };
        let copy = self.maps[view.old()].get(key, |state| relocation.relocate(state));
        match copy? {
            Ok(copy) => Some(self.place(view, key.to_key(), copy, f)),
            // Being forgotten by the drain: as good as new.
            Err(Blocked::Retired) => None,
            Err(blocked) => Some(Err(blocked)),
        }
    }

    /// Stores `copy` (a relocated state, or a new key's) in the young map of `view`,
    /// `f` applied to it first, before any other thread can see it; if the young map
    /// has a state for the key already, `f` on that instead, and `copy` is dropped.
    fn place<R>(
        &self,
        view: View,
        key: K,
        copy: V,
        f: &impl Fn(&V) -> Result<R, Blocked>,
    ) -> Result<R, Blocked> {
        let answer = f(&copy);
        self.maps[view.young()]
            .insert(key, copy, f)
            .map_or_else(|stored| stored, |()| answer)
    }

    /// A new key's first request: `create` makes its state (user code, before anything
    /// is registered), `first` applies the request to it (after registering: it reads
    /// the watermark there), and the state is stored in the young map of `view` (the
    /// view the key was missed in) — after claiming the key's place in the old map, if
    /// claims are open. `f` instead on the state another thread stored first. A claim
    /// that finds the key in the old map, or a view changed since, answers `Relocated`:
    /// look again.
    pub(crate) fn insert_new<Q, R>(
        &self,
        view: View,
        key: &Q,
        create: impl FnOnce(&K) -> V,
        first: impl FnOnce(&mut V) -> Result<R, Blocked>,
        f: impl Fn(&V) -> Result<R, Blocked>,
        relocation: &impl Relocation<V>,
    ) -> Result<R, Blocked>
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        let owned = key.to_key();
        let mut state = create(&owned);
        let Some(_registration) = self.register(view) else {
            return Err(Blocked::Relocated);
        };
        let claim =
            (view.claims() && !active(Mutant::NoClaim)).then(|| relocation.relocated_copy(&state));
        let answer = first(&mut state);
        if let Some(claim) = claim {
            let claimed = self.maps[view.old()].insert(owned.clone(), claim, |_| ());
            if claimed.is_err() {
                // A state of the key reached the old map since the lookup (an
                // insertion begun before the rotation): relocate it instead.
                return Err(Blocked::Relocated);
            }
        }
        self.maps[view.young()]
            .insert(owned, state, &f)
            .map_or_else(|stored| stored, |()| answer)
    }

    /// `f` on `key`'s state where it is, in the young map or else the old one, without
    /// relocating it: for a look that changes nothing, or a caller that handles what
    /// `f` says of a relocated state. `None` only if the key has no state: a state is
    /// stored in the young map before it leaves the old one (a drain inserts its copy
    /// first; a request's relocation leaves the frozen original for the drain), so a
    /// look that missed it in the young map and then in the old one finds it on a
    /// second look in the young map — the first two alone can miss a key the drain is
    /// relocating between them (a peek would answer "full", a refund be lost). A miss
    /// across a rotation (the maps it looked in renamed meanwhile) looks again.
    pub(crate) fn get<Q, R>(&self, key: &Q, f: impl Fn(&V) -> R) -> Option<R>
    where
        K: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
    {
        loop {
            let view = self.view();
            let young = &self.maps[view.young()];
            if let Some(found) = young.get(key, &f) {
                return Some(found);
            }
            if !view.old_holds_keys() {
                return None;
            }
            if let Some(found) = self.maps[view.old()].get(key, &f) {
                return Some(found);
            }
            if let Some(found) = young.get(key, &f) {
                return Some(found);
            }
            if self.view().generation() == view.generation() {
                return None;
            }
        }
    }

    /// Stores `new` as `key`'s state if its state is `current` itself, in whichever
    /// map holds it; whether it did.
    pub(crate) fn swap(&self, key: K, current: &V, new: V) -> bool {
        let view = self.view();
        let young = &self.maps[view.young()];
        if young.get(&key, |found| std::ptr::eq(found, current)) == Some(true) {
            return young.swap(key, current, new);
        }
        view.old_holds_keys() && self.maps[view.old()].swap(key, current, new)
    }

    /// Entries held: the young map's and the old map's. A key relocated or claimed
    /// since the last rotation counts twice until the drain removes its old entry.
    pub(crate) fn len(&self) -> usize {
        let view = self.view();
        let old = if view.old_holds_keys() {
            self.maps[view.old()].len()
        } else {
            0
        };
        self.maps[view.young()].len() + old
    }

    /// Finishes a resize the old map was left in when it stopped being young, so that
    /// opening its drain later has no copy to make first (see [`Map::finish_resize`]):
    /// for the sweeper thread, while the old map ages.
    pub(crate) fn finish_old_resize(&self) {
        let view = self.view();
        if view.old_holds_keys() {
            self.maps[view.old()].finish_resize();
        }
    }

    /// Keys in the young map.
    pub(crate) fn young_len(&self) -> usize {
        self.maps[self.view().young()].len()
    }

    /// Makes the young map old and the spare young, then flips the insertion phase so
    /// that the insertions begun before are counted apart; `false`, changing nothing,
    /// unless the old map is drained and the insertions of the flip before are done.
    /// One caller at a time (`crate::evict`'s schedule).
    pub(crate) fn rotate(&self) -> bool {
        let view = self.view();
        if view.old_holds_keys() || view.claims() || !self.insertions.settled() {
            return false;
        }
        // Release: see `view`. Only the schedule's holder changes the view while the
        // old map is drained (the flags are clear), so a store does.
        self.view.store(view.rotated().0, Ordering::Release);
        let flipped = self.insertions.flip();
        debug_assert!(flipped, "settled just before, and no one else flips");
        true
    }

    /// Clears `CLAIMS` once every insertion begun before the last rotation is done;
    /// whether it is clear.
    pub(crate) fn close_claims(&self) -> bool {
        let view = self.view();
        if !view.claims() {
            return true;
        }
        if !self.insertions.settled() {
            return false;
        }
        // Release: see `view`; the insertions' stored states were acquired by
        // `settled`. The schedule's holder alone changes the view now.
        self.view
            .store(View(view.0 & !View::CLAIMS).0, Ordering::Release);
        true
    }

    /// Begins the drain of the old map: its regions, each a pass from the map's start.
    /// For the thread that may take long (the first pass finishes a resize the map was
    /// in): the sweeper thread, `evict_idle`, or a request when there is no thread or
    /// it is overdue. Nothing to drain (the old map empty: see
    /// [`finish_drain`](Self::finish_drain)), claims still open, or a drain under way:
    /// `false`. One caller at a time (the schedule's holder).
    pub(crate) fn open_drain(&self) -> bool {
        let view = self.view();
        let old = &self.maps[view.old()];
        // Relaxed: the count's own latest value for the schedule's holder, which set
        // it last; a stale nonzero one only puts the drain off.
        if !view.old_holds_keys()
            || view.claims()
            || self.regions_left.load(Ordering::Relaxed) > 0
            || old.len() == 0
        {
            return false;
        }
        // Each region a pass from the map's start (the first finishes any resize
        // left from the map's time as the young one), acting on its own class.
        let mut placed: [Option<Region<M::Pass>>; REGIONS] = std::array::from_fn(|class| {
            Some(Region {
                pass: M::pass(Arc::clone(old)),
                class,
                view,
            })
        });
        // Counted before any region is published: every region is counted down once,
        // by the thread that finishes it, and one may be taken (by a thread that saw
        // the last drain under way) as soon as it is published. Every region is empty
        // now (each is emptied before it is counted down), so a thread that sees the
        // count first finds nothing to take. Relaxed: the regions are published by
        // their locks, and `drain`'s load only spares a thread the locks when no drain
        // is under way.
        self.regions_left.store(REGIONS, Ordering::Relaxed);
        for (slot, placed) in self.regions.iter().zip(&mut placed) {
            let spent = {
                let mut slot = slot.lock().unpoisoned();
                slot.region = placed.take();
                slot.spent.take()
            };
            // Released by the opener (the sweeper thread, or the request the thread
            // left the drain to: see `open_drain`'s callers), outside the lock.
            drop(spent);
        }
        true
    }

    /// Releases the passes of regions that requests' shares finished (see [`Slot`]),
    /// each outside its region's lock: for the sweeper thread, `evict_idle`, and a
    /// limiter without a thread. A region held by a share is passed over, never waited
    /// for (the next release, or the next opening of a drain, takes its pass).
    /// Whether it released any.
    pub(crate) fn release_spent(&self) -> bool {
        let mut released = false;
        for slot in &self.regions {
            let spent = match slot.try_lock() {
                Ok(mut slot) => slot.spent.take(),
                Err(std::sync::TryLockError::Poisoned(poisoned)) => {
                    poisoned.into_inner().spent.take()
                }
                Err(std::sync::TryLockError::WouldBlock) => None,
            };
            released |= spent.is_some();
            drop(spent);
        }
        released
    }

    /// Ends the drain if it is over: every region done and the old map empty. Then the
    /// view says so (`OLD` clear), and the ring may rotate again; whether it is over.
    /// Entries left by the passes (keys moving to a new quota, or relocated by a
    /// request while a pass went by) want another pass ([`open_drain`]).
    ///
    /// Only the schedule's holder changes the view: a thread that finished the last
    /// region and then stalled must not clear `OLD` of a view that has moved on.
    ///
    /// [`open_drain`]: Self::open_drain
    pub(crate) fn finish_drain(&self) -> bool {
        let view = self.view();
        if !view.old_holds_keys() {
            return true;
        }
        // Acquire: pairs with each finished region's AcqRel count-down, so that every
        // region's removals are seen before the map's length is asked.
        if view.claims()
            || self.regions_left.load(Ordering::Acquire) > 0
            || self.maps[view.old()].len() > 0
        {
            return false;
        }
        // Release: see `view`. The schedule's holder alone changes the view.
        self.view
            .store(View(view.0 & !View::OLD).0, Ordering::Release);
        true
    }

    /// Takes up to `budget` more steps of the drain begun with
    /// [`open_drain`](Self::open_drain) (`budget` × [`REGIONS`] entries walked, about
    /// `budget` of them in the region's class; papaya's iterator also steps over empty
    /// and removed slots, which it does not count): each state of the region's class
    /// that `judge` retires is removed, every other relocated into the young map and
    /// removed (a relocation found begun is finished), and a state being moved to a
    /// new quota is left behind. In the next region in this thread's turn
    /// ([`next_turn`](crate::sync::next_turn)) that no other thread holds; if every
    /// region left is held, with `wait` (the sweeper thread, `evict_idle`) in the
    /// first of them, once its holder's steps end, and without (a request's share),
    /// none: `busy`. Once every region is done, the schedule's holder ends the drain
    /// ([`finish_drain`](Self::finish_drain)) or, with entries left, opens another
    /// pass. No drain under way: nothing done.
    pub(crate) fn drain(
        &self,
        budget: usize,
        wait: bool,
        mut judge: impl FnMut(&V) -> Retirement,
        relocation: &impl Relocation<V>,
    ) -> Drained {
        let view = self.view();
        // Relaxed: a hint (see `open_drain`); the region taken is read under its lock.
        if !view.old_holds_keys() || self.regions_left.load(Ordering::Relaxed) == 0 {
            return Drained {
                done: !view.old_holds_keys(),
                ..Drained::default()
            };
        }
        // Regions in turn, share by share, so that they progress alike and end
        // together: a region left last is drained by one thread at a time. A region
        // held is passed over; with `wait`, one is waited for only if every region
        // left is held.
        let first = crate::sync::next_turn(REGIONS);
        let mut held = None;
        let rounds: &[bool] = if wait { &[false, true] } else { &[false] };
        'rounds: for &waiting in rounds {
            for i in 0..REGIONS {
                let slot = &self.regions[(first + i) % REGIONS];
                let slot = if waiting {
                    slot.lock().unpoisoned()
                } else {
                    match slot.try_lock() {
                        Ok(slot) => slot,
                        Err(std::sync::TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
                        Err(std::sync::TryLockError::WouldBlock) => continue,
                    }
                };
                if slot.region.is_some() {
                    held = Some(slot);
                    break 'rounds;
                }
            }
        }
        let Some(mut held) = held else {
            return Drained {
                busy: !wait,
                ..Drained::default()
            };
        };
        let Some(region) = held.region.as_mut() else {
            unreachable!("turnstile: a region held is one not done")
        };
        let view = region.view;
        let (old, young) = (&self.maps[view.old()], &self.maps[view.young()]);
        let mut drained = Drained::default();
        let class = region.class;
        let more = M::advance(&mut region.pass, budget * REGIONS, |key, state| {
            if region_of(key, state) != class {
                return;
            }
            let verdict = judge(state);
            let remove = match verdict {
                Retirement::Retired => {
                    drained.forgotten += 1;
                    true
                }
                Retirement::AlreadyRetired => true,
                Retirement::Moving => false,
                Retirement::Kept(_) | Retirement::Relocated => match relocation.relocate(state) {
                    Ok(copy) => {
                        drained.relocated += 1;
                        if !active(Mutant::DrainWithoutCopy) {
                            let _ = young.insert(key.clone(), copy, |_| ());
                        }
                        true
                    }
                    Err(Blocked::Retired) => true,
                    Err(_) => false,
                },
            };
            if remove {
                old.remove_if(key, |found| std::ptr::eq(found, state));
            }
        });
        let region_done = !more;
        drained.open = !region_done;
        if region_done {
            let finished = held.region.take().map(|region| region.pass);
            if wait {
                // The sweeper thread or `evict_idle`: the pass released here (outside
                // the lock), with the frees its guard held back.
                drop(held);
                drop(finished);
            } else {
                // A request: kept for the thread (see `Slot`). The slot's spent pass
                // was taken when this drain opened, so none is overwritten.
                debug_assert!(
                    held.spent.is_none(),
                    "a spent pass left from a drain before"
                );
                held.spent = finished;
                drained.spent = true;
                drop(held);
            }
            // AcqRel: a chain of count-downs, which `finish_drain`'s Acquire reads at
            // its end, seeing every region's removals.
            self.regions_left.fetch_sub(1, Ordering::AcqRel);
        }
        drained
    }
}

#[cfg(all(test, not(any(turnstile_loom, turnstile_shuttle))))]
mod tests {
    use super::{REGIONS, Ring};
    use crate::algorithm::{Blocked, Retirement};
    use crate::store::Relocation;
    use crate::store::papaya::PapayaMap;
    use crate::sync::{AtomicU64, Ordering};

    type Words = Ring<
        u64,
        AtomicU64,
        foldhash::fast::RandomState,
        PapayaMap<u64, AtomicU64, foldhash::fast::RandomState>,
    >;

    /// A copy of the word, as a relocation of the test's plain words.
    struct Copying;

    impl Relocation<AtomicU64> for Copying {
        fn relocate(&self, state: &AtomicU64) -> Result<AtomicU64, Blocked> {
            Ok(AtomicU64::new(state.load(Ordering::Relaxed)))
        }

        fn relocated_copy(&self, fresh: &AtomicU64) -> AtomicU64 {
            AtomicU64::new(fresh.load(Ordering::Relaxed))
        }
    }

    /// `keys` inserted as new keys of the view current.
    fn insert(ring: &Words, keys: std::ops::Range<u64>) {
        for key in keys {
            let stored = ring.insert_new(
                ring.view(),
                &key,
                |_| AtomicU64::new(0),
                |_| Ok(()),
                |_| Ok(()),
                &Copying,
            );
            assert!(stored.is_ok());
        }
    }

    /// A ring holding `keys` keys in its old map, its drain opened.
    fn draining(keys: u64) -> Words {
        let ring = Words::with_hasher(Default::default(), 0);
        insert(&ring, 0..keys);
        assert!(ring.rotate());
        assert!(ring.close_claims());
        assert!(ring.insertions().flip());
        assert!(ring.insertions().settled());
        assert!(ring.open_drain());
        ring
    }

    #[test]
    fn a_share_that_finishes_a_region_leaves_its_pass_for_the_thread() {
        let ring = draining(1_000);
        let mut spent = 0;
        while !ring.finish_drain() {
            let drained = ring.drain(64, false, |_| Retirement::Retired, &Copying);
            assert!(!drained.busy, "one thread: no region is held by another");
            spent += usize::from(drained.spent);
        }
        // Every region finished by a share, each pass kept until released, once.
        assert_eq!(spent, REGIONS);
        assert_eq!(ring.len(), 0);
        assert!(ring.release_spent());
        assert!(!ring.release_spent());
    }

    #[test]
    fn the_thread_releases_the_passes_of_the_regions_it_finishes_itself() {
        let ring = draining(1_000);
        while !ring.finish_drain() {
            let drained = ring.drain(64, true, |_| Retirement::Retired, &Copying);
            assert!(!drained.spent);
        }
        assert!(!ring.release_spent());
    }

    #[test]
    fn opening_a_drain_releases_the_passes_left_from_the_last() {
        let ring = draining(100);
        while !ring.finish_drain() {
            ring.drain(64, false, |_| Retirement::Retired, &Copying);
        }
        // The next cycle, its drain opened with the spent passes still in place.
        insert(&ring, 100..200);
        assert!(ring.rotate());
        assert!(ring.close_claims());
        assert!(ring.insertions().flip());
        assert!(ring.open_drain());
        assert!(!ring.release_spent(), "released as the drain opened");
    }
}
