//! The word store's growth (`src/store/words/`), model-checked: requests that
//! compare-and-set a key's word while its segment grows and its key moves to the new
//! table lose no update, and the key keeps one state.
//!
//! The store runs on `sdd` pointers and std atomics, neither loom-aware, so this file
//! restates the protocol on loom primitives: a segment is a lock, two tables (the one
//! before the growth, which then drains, and the new one), the index of the table new
//! keys go to and whether the old one drains; a table holds the one key of the model,
//! present or not, and its word. The growth publishes the new table under the lock and
//! lets go of it; the key moves in a second hold of the lock, as a drain's step does.
//! Each step carries the name of what it restates. Two mutants, each a step left out,
//! must be rejected.
#![cfg(turnstile_loom)]

use loom::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use loom::sync::{Arc, Mutex};
use loom::thread;
use loom_tests::check;
use turnstile::loom_hooks::RETIRED;

/// A step of the protocol left out.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mutant {
    None,
    /// `grow` copies each word with a load instead of swapping `RETIRED` in.
    CopyWithoutFreezing,
    /// `move_group` runs without the segment's lock, so that a request's locked
    /// removal of a retired word can run between the freeze and the copy.
    MoveWithoutLock,
}

/// One table of the segment, holding the model's one key.
#[derive(Default)]
struct Table {
    present: AtomicBool,
    word: AtomicU64,
}

struct Segment {
    lock: Mutex<()>,
    tables: [Table; 2],
    /// Which table new keys go to (`segment.table`).
    current: AtomicUsize,
    /// Whether the first table drains (`segment.draining`).
    draining: AtomicBool,
    mutant: Mutant,
}

impl Segment {
    /// The key stored with word 0 in the first table.
    fn new(mutant: Mutant) -> Self {
        let segment = Segment {
            lock: Mutex::new(()),
            tables: Default::default(),
            current: AtomicUsize::new(0),
            draining: AtomicBool::new(false),
            mutant,
        };
        segment.tables[0].present.store(true, Ordering::Relaxed);
        segment
    }

    /// The table holding the key, if any: the current one, then the draining one
    /// (`Segment::tables` and `locate`, or `get_or_else` without the lock).
    fn find(&self) -> Option<&Table> {
        // Acquire, both: as the loads of the segment's two pointers.
        let current = &self.tables[self.current.load(Ordering::Acquire)];
        // Acquire: as a lookup's load of a group's tags.
        if current.present.load(Ordering::Acquire) {
            return Some(current);
        }
        let old = &self.tables[0];
        (self.draining.load(Ordering::Acquire) && old.present.load(Ordering::Acquire))
            .then_some(old)
    }

    /// One request: the compare-and-set loop (`word.rs`'s `update`) on the word found
    /// without the lock; a retired word sends it to `remove_retired`, then to a new
    /// look; a missing key to the locked insertion (`get_or_insert`).
    fn acquire(&self) {
        loop {
            let Some(table) = self.find() else {
                return self.insert();
            };
            let mut current = table.word.load(Ordering::Relaxed);
            loop {
                if current == RETIRED {
                    break;
                }
                match table.word.compare_exchange_weak(
                    current,
                    current + 1,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => return,
                    Err(actual) => current = actual,
                }
            }
            self.remove_retired();
        }
    }

    /// `remove_if(key, is_retired)`: under the lock, where `locate` finds the key.
    fn remove_retired(&self) {
        let _held = self.lock.lock().unwrap();
        if let Some(table) = self.find()
            && table.word.load(Ordering::Relaxed) == RETIRED
        {
            // Release: as the store of a removed slot's tag.
            table.present.store(false, Ordering::Release);
        }
    }

    /// `get_or_insert`: under the lock, the request applied to the stored word if the
    /// key is there, else stored fresh with the request applied (`first`).
    fn insert(&self) {
        let _held = self.lock.lock().unwrap();
        match self.find() {
            // Under the lock no word is frozen: a move holds the lock throughout.
            Some(table) => {
                table.word.fetch_add(1, Ordering::Relaxed);
            }
            None => {
                let table = &self.tables[self.current.load(Ordering::Relaxed)];
                table.word.store(1, Ordering::Relaxed);
                // Release: as the store that publishes a slot's tag.
                table.present.store(true, Ordering::Release);
            }
        }
    }

    /// `grow`, then `move_group`: the new table published under the lock, the old one
    /// kept draining; then, in a second hold of the lock, the key's word frozen with
    /// `RETIRED`, its last value copied into the new table and the old slot removed,
    /// and the old table unpublished.
    fn grow_and_move(&self) {
        {
            let _held = self.lock.lock().unwrap();
            // Release, both: `draining` before `table`.
            self.draining.store(true, Ordering::Release);
            self.current.store(1, Ordering::Release);
        }
        let held = (self.mutant != Mutant::MoveWithoutLock).then(|| self.lock.lock().unwrap());
        let (old, new) = (&self.tables[0], &self.tables[1]);
        if old.present.load(Ordering::Relaxed) {
            let last = if self.mutant == Mutant::CopyWithoutFreezing {
                old.word.load(Ordering::Acquire)
            } else {
                old.word.swap(RETIRED, Ordering::Acquire)
            };
            new.word.store(last, Ordering::Relaxed);
            // Release: as the store that publishes a slot's tag.
            new.present.store(true, Ordering::Release);
            old.present.store(false, Ordering::Release);
        }
        // Release: the moved key before the old table's unpublication.
        self.draining.store(false, Ordering::Release);
        drop(held);
    }
}

/// Two requests race with a growth: both land on the key's one word.
fn no_update_lost(mutant: Mutant) {
    let segment = Arc::new(Segment::new(mutant));
    let requests: Vec<_> = (0..2)
        .map(|_| {
            let segment = Arc::clone(&segment);
            thread::spawn(move || segment.acquire())
        })
        .collect();
    segment.grow_and_move();
    for request in requests {
        request.join().unwrap();
    }
    let table = segment.find().expect("segments: the key was lost");
    assert!(
        !segment.tables[0].present.load(Ordering::Relaxed),
        "segments: the key is in both tables"
    );
    assert_eq!(
        table.word.load(Ordering::Relaxed),
        2,
        "segments: a request was lost to the growth"
    );
}

#[test]
fn model_17_a_growth_loses_no_update() {
    check("17 growth racing two requests", Some(3), || {
        no_update_lost(Mutant::None)
    });
}

#[test]
#[should_panic(expected = "segments:")]
fn mutant_17_copying_without_freezing_is_rejected() {
    check("17 mutant: copy without freezing", Some(3), || {
        no_update_lost(Mutant::CopyWithoutFreezing)
    });
}

#[test]
#[should_panic(expected = "segments:")]
fn mutant_17_moving_without_the_lock_is_rejected() {
    check("17 mutant: move without the lock", Some(3), || {
        no_update_lost(Mutant::MoveWithoutLock)
    });
}
