//! The stores of loom builds, exactly as weak as their contracts allow, so loom
//! explores every interleaving the contracts permit, not only the ones a lock around
//! each call would: `map.rs`, a [`Map`](super::Map) standing in for papaya in each
//! generation of the ring; `words.rs`, a store standing in for the word store, whose
//! lock-free lookups can miss a key being replaced.

mod map;
mod words;

pub(crate) use map::LoomMap;
pub(crate) use words::LoomWords;
