//! What a keyed limiter reports of its memory.

/// A keyed limiter's memory at a glance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyStats {
    /// Keys with state now.
    pub keys: usize,
    /// Keys forgotten so far.
    pub evicted: u64,
    /// New keys answered by the [`Overflow`](crate::Overflow) policy (or charged
    /// nothing by a settle, its charge forgiven) because the store
    /// held `max_keys` keys (forgettable ones among them, perhaps: the cap asks for
    /// room and answers at once).
    pub overflowed: u64,
}
