//! Which store of normal builds holds each kind of state: single words the word store
//! (`words/`), beside their keys; anything else the scc store (`scc.rs`), in a box of
//! its own.

use std::sync::Mutex;
use std::sync::atomic::AtomicU64;

/// A state type the keyed store can hold, and which store holds it.
pub trait Stored: Sized + Send + Sync {
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

/// The word algorithms' state: the word store keeps it beside its key (`map.rs`).
impl Stored for AtomicU64 {
    const WORD: bool = true;

    #[inline(always)]
    fn of_word(word: &AtomicU64) -> &Self {
        word
    }

    #[inline(always)]
    fn of_word_mut(word: &mut AtomicU64) -> &mut Self {
        word
    }

    #[inline(always)]
    fn into_word(self) -> AtomicU64 {
        self
    }
}

/// The sliding log's state and the mutex-per-key baseline's: boxed in the scc store.
impl<T: Send> Stored for Mutex<T> {}
