//! Lock-based limiters to measure [`TokenBucket`](crate::TokenBucket) against — never
//! to recommend.
//!
//! Both apply the same pure step function as `TokenBucket`, so they make exactly the
//! same decisions; only the synchronisation differs. They pass the same semantic tests.

mod global_lock;
mod mutex_per_key;

pub use global_lock::GlobalLock;
pub use mutex_per_key::MutexPerKey;
