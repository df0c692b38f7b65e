//! The sweeper thread's move to a larger table (`src/store/tables.rs`), model-checked:
//! however requests race with the move, a key is given one state, never two, and the
//! move ends with every key in the new table.
//!
//! The protocol runs on an `scc::HashIndex` and `sdd`'s grace periods, neither of which
//! is loom-aware, so this file restates it step by step on loom primitives: a table is
//! a loom mutex around a map (one lock per table stands for the key's bucket lock; a
//! `BTreeMap`, so that every execution iterates alike), and a grace period is a
//! two-epoch count of operations in flight (what `sdd` guarantees: it ends once every
//! operation that began before it has ended). Each step carries the name of the step
//! it restates in `tables.rs`. Three mutants, each a step of the protocol left out,
//! must be rejected.
#![cfg(turnstile_loom)]

use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use loom::sync::{Arc, Condvar, Mutex, MutexGuard};
use loom::thread;
use loom_tests::check;
use std::collections::BTreeMap;
use std::ops::{Deref, DerefMut};

/// A key present before the move.
const OLD_KEY: u64 = 1;
/// A key first asked for while the move runs.
const NEW_KEY: u64 = 2;
/// The state the old key was given before the move.
const OLD_STATE: usize = 100;

/// A step of the protocol left out.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mutant {
    None,
    /// `grow` seals the old table without waiting for the operations that saw it alone.
    SealAtOnce,
    /// `locate` sends a new key to the new table before the old one is sealed.
    InsertIntoNewUnsealed,
    /// `move_entries` removes the entry from the old table and lets go of it before
    /// it takes the new table to insert it there.
    RemoveFirst,
}

/// One table: its entries (key to state) under its lock, and whether it is sealed.
#[derive(Default)]
struct Table {
    /// Whether the table's lock is held: a flag under a mutex, with a condition
    /// variable to wait on, so that `try_lock` is modelled exactly (a loom mutex's own
    /// `try_lock` can be reported as a deadlock when another thread takes the mutex
    /// first).
    locked: Mutex<bool>,
    unlocked: Condvar,
    /// Only ever taken by the holder of the lock, so never contended.
    entries: Mutex<BTreeMap<u64, usize>>,
    sealed: AtomicBool,
}

/// A table's entries, its lock held until this is dropped.
struct Held<'a> {
    entries: Option<MutexGuard<'a, BTreeMap<u64, usize>>>,
    table: &'a Table,
}

impl Table {
    fn lock(&self) -> Held<'_> {
        let mut locked = self.locked.lock().unwrap();
        while *locked {
            locked = self.unlocked.wait(locked).unwrap();
        }
        *locked = true;
        drop(locked);
        self.held()
    }

    fn try_lock(&self) -> Option<Held<'_>> {
        let mut locked = self.locked.lock().unwrap();
        if *locked {
            return None;
        }
        *locked = true;
        drop(locked);
        Some(self.held())
    }

    fn held(&self) -> Held<'_> {
        Held {
            entries: Some(self.entries.lock().unwrap()),
            table: self,
        }
    }
}

impl Deref for Held<'_> {
    type Target = BTreeMap<u64, usize>;
    fn deref(&self) -> &Self::Target {
        self.entries.as_ref().unwrap()
    }
}

impl DerefMut for Held<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        self.entries.as_mut().unwrap()
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.entries = None;
        *self.table.locked.lock().unwrap() = false;
        self.table.unlocked.notify_all();
    }
}

/// `sdd`'s grace period, as the protocol uses it: `wait` returns once every operation
/// that began before it has ended. Counted under a mutex: loom treats `SeqCst` as
/// acquire-release, too weak for a count read against an epoch (`sdd` itself uses
/// `SeqCst` fences, which loom cannot check).
#[derive(Default)]
struct Grace {
    /// The epoch, and the operations in flight that began in an even and odd one.
    state: Mutex<(usize, [usize; 2])>,
}

impl Grace {
    /// Begins an operation: the parity it counts under.
    fn enter(&self) -> usize {
        let mut state = self.state.lock().unwrap();
        let parity = state.0 % 2;
        state.1[parity] += 1;
        parity
    }

    fn leave(&self, parity: usize) {
        self.state.lock().unwrap().1[parity] -= 1;
    }

    fn wait(&self) {
        let parity = {
            let mut state = self.state.lock().unwrap();
            state.0 += 1;
            (state.0 - 1) % 2
        };
        while self.state.lock().unwrap().1[parity] != 0 {
            thread::yield_now();
        }
    }
}

/// The two tables: `current` and (while a move runs) `draining`, as indices.
struct Tables {
    tables: [Table; 2],
    current: AtomicUsize,
    /// The draining table's index plus one; 0 when none.
    draining: AtomicUsize,
    grace: Grace,
    /// States handed out to new keys.
    next_state: AtomicUsize,
    mutant: Mutant,
}

impl Tables {
    /// Table 0 current, holding the old key.
    fn new(mutant: Mutant) -> Self {
        let tables = [Table::default(), Table::default()];
        tables[0].lock().insert(OLD_KEY, OLD_STATE);
        Self {
            tables,
            current: AtomicUsize::new(0),
            draining: AtomicUsize::new(0),
            grace: Grace::default(),
            next_state: AtomicUsize::new(0),
            mutant,
        }
    }

    /// `both`: `current` first, then `draining` (a draining table that is the current
    /// one counts as none).
    fn both(&self) -> (usize, Option<usize>) {
        let current = self.current.load(Ordering::Acquire);
        let draining = self.draining.load(Ordering::Acquire);
        let old = draining.checked_sub(1).filter(|&old| old != current);
        (current, old)
    }

    fn fresh(&self) -> usize {
        self.next_state.fetch_add(1, Ordering::Relaxed)
    }

    /// `get_or_insert` through `locate`: the key's state, a fresh one if it had none.
    fn get_or_insert(&self, key: u64) -> usize {
        let parity = self.grace.enter();
        let (current, old) = self.both();
        // The new table's lock first, held throughout.
        let mut new_entries = self.tables[current].lock();
        let state = match (new_entries.get(&key), old) {
            (Some(&state), _) => state,
            (None, None) => *new_entries.entry(key).or_insert_with(|| self.fresh()),
            (None, Some(old)) => {
                let mut old_entries = self.tables[old].lock();
                let sealed = self.tables[old].sealed.load(Ordering::Acquire);
                match old_entries.get(&key) {
                    Some(&state) => state,
                    None if sealed || self.mutant == Mutant::InsertIntoNewUnsealed => {
                        *new_entries.entry(key).or_insert_with(|| self.fresh())
                    }
                    None => *old_entries.entry(key).or_insert_with(|| self.fresh()),
                }
            }
        };
        drop(new_entries);
        self.grace.leave(parity);
        state
    }

    /// `peek`, lock-free in `tables.rs` (here under each table's lock in turn): the new
    /// table, then the old one.
    fn peek(&self, key: u64) -> Option<usize> {
        let parity = self.grace.enter();
        let (current, old) = self.both();
        let found = self.tables[current]
            .entries
            .lock()
            .unwrap()
            .get(&key)
            .copied()
            .or_else(|| old.and_then(|old| self.tables[old].lock().get(&key).copied()));
        self.grace.leave(parity);
        found
    }

    /// `grow`: publish, wait, seal, wait, move every entry, unpublish.
    fn grow(&self) {
        let old = self.current.load(Ordering::Acquire);
        let new = 1 - old;
        // `publish`: `draining` before `current`.
        self.draining.store(old + 1, Ordering::Release);
        self.current.store(new, Ordering::Release);
        if self.mutant != Mutant::SealAtOnce {
            self.grace.wait();
        }
        self.tables[old].sealed.store(true, Ordering::Release);
        self.grace.wait();
        // `move_entries`: holding the old table, the new one taken without waiting (a
        // request holding it may wait for the old one; the entry then waits for the
        // next try), the entry inserted into the new table, then removed from the old.
        loop {
            let mut old_entries = self.tables[old].lock();
            let Some((&key, &state)) = old_entries.iter().next() else {
                break;
            };
            if self.mutant == Mutant::RemoveFirst {
                old_entries.remove(&key);
                drop(old_entries);
                let mut new_entries = self.tables[new].lock();
                new_entries.entry(key).or_insert(state);
                continue;
            }
            let Some(mut new_entries) = self.tables[new].try_lock() else {
                drop(old_entries);
                thread::yield_now();
                continue;
            };
            let previous = new_entries.insert(key, state);
            assert_eq!(previous, None, "growth: key {key} in both tables");
            old_entries.remove(&key);
        }
        self.draining.store(0, Ordering::Release);
    }
}

/// The move races with two requests for a new key and one for a key stored before:
/// both requests for the new key get one state, the old key keeps its own, and at the
/// end each key is in the new table alone.
fn one_state_per_key(mutant: Mutant) {
    let tables = Arc::new(Tables::new(mutant));
    let requests = [NEW_KEY, NEW_KEY, OLD_KEY].map(|key| {
        let tables = tables.clone();
        thread::spawn(move || (key, tables.get_or_insert(key)))
    });
    tables.grow();
    let answers = requests.map(|request| request.join().unwrap());
    let new_states: Vec<usize> = answers
        .iter()
        .filter(|(key, _)| *key == NEW_KEY)
        .map(|&(_, state)| state)
        .collect();
    assert_eq!(
        new_states[0], new_states[1],
        "growth: a new key was given two states"
    );
    assert_eq!(
        answers[2].1, OLD_STATE,
        "growth: the old key lost its state"
    );
    assert_eq!(
        tables.peek(NEW_KEY),
        Some(new_states[0]),
        "growth: the new key lost"
    );
    assert_eq!(
        tables.peek(OLD_KEY),
        Some(OLD_STATE),
        "growth: the old key lost"
    );
    let (current, old) = tables.both();
    assert_eq!((current, old), (1, None));
    assert!(tables.tables[0].lock().is_empty(), "growth: left behind");
}

#[test]
fn model_15_a_move_gives_each_key_one_state() {
    check("15 move racing three requests", Some(2), || {
        one_state_per_key(Mutant::None)
    });
}

#[test]
#[should_panic(expected = "growth:")]
fn mutant_15_sealing_at_once_is_rejected() {
    check("15 mutant: seal at once", Some(2), || {
        one_state_per_key(Mutant::SealAtOnce)
    });
}

#[test]
#[should_panic(expected = "growth:")]
fn mutant_15_inserting_into_the_new_table_unsealed_is_rejected() {
    check(
        "15 mutant: insert into the new table unsealed",
        Some(2),
        || one_state_per_key(Mutant::InsertIntoNewUnsealed),
    );
}

#[test]
#[should_panic(expected = "growth:")]
fn mutant_15_removing_before_holding_the_new_table_is_rejected() {
    check(
        "15 mutant: remove before holding the new table",
        Some(2),
        || one_state_per_key(Mutant::RemoveFirst),
    );
}
