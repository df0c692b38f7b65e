//! What a store of normal builds needs to know of a state: whether it is a single
//! word, which the word store (`words/`, opt-in) can keep beside its key. papaya
//! (`papaya.rs`, the default) holds every state in its own entry.

use crate::sync::AtomicU64;
use std::sync::Mutex;

/// A state type the keyed store can hold, and which store holds it.
pub trait Stored: Sized + Send + Sync {
    /// Whether the state is a single word, which the word store can hold beside its
    /// key (`super::words`): only `AtomicU64`. Every other state lives in papaya.
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

/// The word algorithms' state: in papaya, or beside its key in the word store
/// (`map.rs`).
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

/// The sliding log's state and the mutex-per-key baseline's: always in papaya.
impl<T: Send> Stored for Mutex<T> {}
