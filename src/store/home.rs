//! Where the store of normal builds keeps each kind of state: single words in a slab
//! ([`super::slab`]), anything else in a box of its own.
//!
//! The index (`scc::HashIndex`) moves entries between buckets when it grows, and a
//! reader may still be using the old copy, so a state inline in an entry could be
//! split in two — a compare-and-set on the old copy lost. So an entry holds a handle,
//! and every copy of the entry finds the one state through it.

use std::sync::Mutex;
use std::sync::atomic::AtomicU64;

/// A state type the keyed store can hold, and where it keeps it.
pub trait Stored: Sized + Send + Sync {
    /// Where states of this type live in the scc store.
    #[doc(hidden)]
    type Home: Home<Self>;

    /// Whether the state is a single word, which the word store holds beside its key
    /// (`super::words`): only `AtomicU64`. Every other state lives in the scc store.
    #[doc(hidden)]
    const WORD: bool = false;

    /// The state a word of the word store is. Called only when [`WORD`](Self::WORD).
    #[doc(hidden)]
    fn of_word(word: &AtomicU64) -> &Self {
        let _ = word;
        unreachable!("turnstile: only single words live in the word store")
    }

    /// The state a word of the word store is, mutably. Called only when
    /// [`WORD`](Self::WORD).
    #[doc(hidden)]
    fn of_word_mut(word: &mut AtomicU64) -> &mut Self {
        let _ = word;
        unreachable!("turnstile: only single words live in the word store")
    }

    /// The word a state is. Called only when [`WORD`](Self::WORD).
    #[doc(hidden)]
    fn into_word(self) -> AtomicU64 {
        unreachable!("turnstile: only single words live in the word store")
    }
}

/// A home for states of type `V`: what an index entry holds to find one, and how a
/// removed entry's state is let go.
pub trait Home<V>: Send + Sync + Sized {
    /// What an index entry holds for its state.
    type Handle: Send + Sync + 'static;
    /// Handles of removed entries, gathered for one release.
    type Removed: Default;

    /// An empty home for about `expected_keys` states.
    fn new(expected_keys: usize) -> Self;

    /// Stores a new key's state; called for an entry about to be inserted.
    fn place(&self, state: V) -> Self::Handle;

    /// The state `handle` names.
    fn state<'a>(&'a self, handle: &'a Self::Handle) -> &'a V;

    /// Notes the handle of an entry the index has just removed (under its lock).
    fn removed(handle: &Self::Handle, removed: &mut Self::Removed);

    /// Lets go of the states of removed entries, once no reader can hold them: call it
    /// after the index has removed them.
    fn release(&self, removed: Self::Removed);

    /// Whether an entry's handle can be copied into another table, so that the sweeper
    /// thread can move entries to a larger one (`tables.rs`). A box cannot: it owns
    /// its state.
    const MOVABLE: bool = false;

    /// A copy of `handle`, naming the same state, for an entry moved to another table.
    /// Called only when [`MOVABLE`](Self::MOVABLE).
    fn copied(handle: &Self::Handle) -> Self::Handle;

    /// Whether the home would like its next stretch of memory prepared.
    fn wants_preparation(&self) -> bool {
        false
    }

    /// Prepares it (see [`Store::prepare`](super::Store::prepare)).
    fn prepare(&self, stopping: &dyn Fn() -> bool) {
        let _ = stopping;
    }
}

/// States in boxes of their own: the index frees a removed entry's box itself, once no
/// reader can hold the entry.
pub struct Boxes;

impl<V: Send + Sync + 'static> Home<V> for Boxes {
    type Handle = Box<V>;
    type Removed = ();

    fn new(_expected_keys: usize) -> Self {
        Boxes
    }

    #[inline]
    fn place(&self, state: V) -> Box<V> {
        Box::new(state)
    }

    #[inline(always)]
    fn state<'a>(&'a self, handle: &'a Box<V>) -> &'a V {
        handle
    }

    fn copied(_handle: &Box<V>) -> Box<V> {
        unreachable!("turnstile: boxes are never moved between tables")
    }

    fn removed(_handle: &Box<V>, _removed: &mut ()) {}

    fn release(&self, _removed: ()) {}
}

/// The sliding log's state and the mutex-per-key baseline's.
impl<T: Send + 'static> Stored for Mutex<T> {
    type Home = Boxes;
}
