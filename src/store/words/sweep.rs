//! Sweeps: forgetting in the word store, a pass over its segments taken in parts.
//!
//! A sweep is a pass over the segments (`crate::evict::Pass`), taken in parts under
//! the segments' locks: each new key's insertion, while a pass is open, takes a share
//! (`sweep_share`: up to [`SHARE_GROUPS`] groups of the first segment from `hint` on
//! that no one holds and the pass has not finished, a `try_lock` each, at most
//! [`SHARE_TRIES`] tried, never a wait), and the sweeper thread walks every segment
//! the shares have not finished (`sweep_walk`, from the last, [`WALKED_AT_ONCE`]
//! groups per hold of a segment's lock, pausing between holds). A segment's place in
//! the pass (`Used::pass`, `cursor`) is kept under its lock, so a group is judged
//! once per pass whoever takes it: a drain left behind moved first, a group a step,
//! then the table's groups in order, the forgettable words removed at once; whoever
//! judges the segment's last group counts it in the pass, once (a growth meanwhile
//! starts the segment again on its new table, its count with it). So no request
//! holds a segment longer than a drain's step does, and a sweep holds one no longer
//! than a preparation's step.

use super::table::Table;
use super::{SEGMENTS, Segment, Used, WordStore, lock, try_lock};
use crate::store::{Judged, Pass};
use crate::sync::{AtomicU64, Ordering};
use sdd::Guard;
use std::hash::{BuildHasher, Hash};

/// Groups of a segment a new key's share of a sweep judges (up to 16 keys, each a load
/// of its word and for a forgettable one a compare-and-set and a tag store: about a
/// drain's step of one group): a stream of new keys needs one key forgotten per key
/// inserted, and a sweep, due at twice the keys the last one kept, visits about two
/// keys per key it forgets, so two groups (8 to 14 keys at the tables' load) keep
/// ahead of the stream whatever the sweeper thread gets of the CPU.
pub(super) const SHARE_GROUPS: usize = 2;
/// Segments a share tries (a `try_lock` each, never a wait) before it gives up: a
/// segment held (by an insertion, another share or the sweeper thread) or finished is
/// passed over for the next.
const SHARE_TRIES: usize = 4;
/// Groups the sweeper thread's walk judges per hold of a segment's lock: about a
/// preparation's hold of `growth::MOVED_AT_ONCE` groups.
pub(super) const WALKED_AT_ONCE: usize = 8;

impl<K, S> WordStore<K, S>
where
    K: Hash + Eq + Clone + 'static,
    S: BuildHasher,
{
    /// Up to `budget` groups of the open pass `generation` in the segment, judged as
    /// of the pass's instant (read here, under the lock): a drain left behind moved
    /// first, a group a step, then the table's groups judged from where the pass left
    /// them, those `judge` rejects removed. The segment is counted in `pass` once, by
    /// whoever judges its last group. Whether the segment is finished in the pass. The
    /// caller holds the segment's lock (`used`).
    #[allow(clippy::too_many_arguments)]
    fn sweep_groups(
        &self,
        segment: &Segment<K>,
        used: &mut Used,
        guard: &Guard,
        pass: &Pass,
        generation: u64,
        budget: &mut usize,
        judge: &mut impl FnMut(&AtomicU64, u64) -> Judged,
    ) -> bool {
        if used.pass != generation {
            used.pass = generation;
            used.swept = false;
            used.cursor = 0;
            used.kept = 0;
            used.kept_until = u64::MAX;
        }
        if used.swept {
            return true;
        }
        while *budget > 0 && used.next.is_some() {
            self.move_group(segment, used, guard);
            *budget -= 1;
        }
        if used.next.is_some() {
            return false;
        }
        let at = pass.at();
        let table = segment.tables(guard).0;
        let groups = table.map_or(0, Table::groups);
        let mut removed = 0;
        if let Some(table) = table {
            while *budget > 0 && used.cursor < groups {
                for (position, _, word) in table.group_entries(used.cursor) {
                    match judge(word, at) {
                        Judged::Kept(until) => {
                            used.kept += 1;
                            used.kept_until = used.kept_until.min(until);
                        }
                        Judged::Removed => {
                            table.remove(position);
                            removed += 1;
                        }
                    }
                }
                used.cursor += 1;
                *budget -= 1;
            }
        }
        if removed > 0 {
            used.keys -= removed;
            self.count(-(removed as isize));
        }
        if used.cursor < groups {
            return false;
        }
        used.swept = true;
        pass.part_done(used.kept, used.kept_until);
        true
    }

    /// Up to [`SHARE_GROUPS`] groups of the open pass, in the segments from `hint` on
    /// that are not held (a `try_lock` each, at most [`SHARE_TRIES`]) nor finished.
    pub(super) fn share(&self, pass: &Pass, mut judge: impl FnMut(&AtomicU64, u64) -> Judged) {
        let mut budget = SHARE_GROUPS;
        // Relaxed: a hint; which segment a share takes is never wrong, only slower.
        let start = self.hint.load(Ordering::Relaxed);
        for offset in 0..SHARE_TRIES {
            let index = start.wrapping_add(offset);
            let segment = &self.segments[index % SEGMENTS];
            // The guard first, then the lock (see `lock`).
            let guard = Guard::new();
            let Some(mut used) = try_lock(segment) else {
                continue;
            };
            // Under the lock: a pass that closed since the caller looked is not
            // swept, and the generation read is the one the segment is counted in.
            let Some(generation) = pass.open_generation() else {
                return;
            };
            let finished = self.sweep_groups(
                segment,
                &mut used,
                &guard,
                pass,
                generation,
                &mut budget,
                &mut judge,
            );
            drop(used);
            drop(guard);
            if !finished {
                return;
            }
            // Relaxed: as above.
            self.hint
                .fetch_max(index.wrapping_add(1), Ordering::Relaxed);
            if budget == 0 {
                return;
            }
        }
    }

    /// Every segment, from the last (shares begin at `hint`, which wraps from the
    /// first), [`WALKED_AT_ONCE`] groups per hold of its lock, `breathe` after each
    /// hold; then a preparation a sweep cut short, finished.
    pub(super) fn walk(
        &self,
        pass: &Pass,
        mut judge: impl FnMut(&AtomicU64, u64) -> Judged,
        mut breathe: impl FnMut() -> bool,
    ) -> bool {
        for segment in self.segments.iter().rev() {
            loop {
                self.advance();
                let guard = Guard::new();
                let mut used = lock(segment);
                let Some(generation) = pass.open_generation() else {
                    // Closed: the shares finished it.
                    return true;
                };
                let mut budget = WALKED_AT_ONCE;
                let finished = self.sweep_groups(
                    segment,
                    &mut used,
                    &guard,
                    pass,
                    generation,
                    &mut budget,
                    &mut judge,
                );
                drop(used);
                drop(guard);
                if !breathe() {
                    return false;
                }
                if finished {
                    break;
                }
            }
        }
        // Relaxed: a hint (see the field); set only by `prepare`.
        if self.unfinished.load(Ordering::Relaxed) {
            // A preparation a sweep (or another) cut short: finished now, breathing
            // between its steps as the walk does, rather than when sampled insertions
            // next ask for one. (`stop` is `Fn`: the `FnMut` is borrowed for each call.)
            let breathe = std::cell::RefCell::new(breathe);
            self.prepare_ahead(|| !(breathe.borrow_mut())());
        }
        true
    }
}
