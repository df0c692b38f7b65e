//! This process's leases: one entry per key with a lease (or a fetch, or a remembered
//! denial), in a lock-free map (papaya) whose idle entries are swept away by the
//! limiter's sweeper thread, as the keyed limiters' are (`crate::evict::sweeper`): the
//! insertion that makes a sweep due only asks for it, and sweeps itself only when there
//! is no thread to ask (the OS refused one, or a sweep panicked and ended it).

use super::hold;
use super::size::refill_below;
use crate::evict::sweeper::Sweeper;
use crate::redis::CheckError;
use crate::sync::{AtomicBool, AtomicU64, Mutex, MutexGuard, Ordering, Unpoisoned};
use papaya::HashMap;
use std::sync::Arc;
use tokio::sync::Notify;

/// One key's lease in this process.
#[derive(Debug)]
pub(super) struct KeyLease {
    /// The tokens held and their expiry ([`hold`]): what requests take from,
    /// without a lock.
    pub(super) word: AtomicU64,
    /// Below this many held tokens, a request that took starts a fetch ahead of need
    /// (half the lease size; see `size.rs`).
    pub(super) refill_below: AtomicU64,
    /// A fetch for this key is in flight: at most one at a time, so that the tokens
    /// this process holds for the key stay within one lease size.
    pub(super) fetching: AtomicBool,
    /// Woken when a fetch ends, for the requests that waited on it.
    pub(super) fetched: Notify,
    /// What fetches (one at a time) and the sweep read and write.
    slow: Mutex<Slow>,
}

/// The part of a key's lease that only fetches and the sweep touch, off the hot path.
#[derive(Debug)]
pub(super) struct Slow {
    /// The size of the next lease (see `size.rs`).
    pub(super) size: u32,
    /// When this key's last lease was fetched (nanoseconds since the limiter's epoch).
    pub(super) last_fetch: Option<u64>,
    /// Redis's last denial for the key, remembered until its wait is over.
    pub(super) denied: Option<Denial>,
    /// Why the last fetch got no answer, for the requests that waited on it; cleared by
    /// the next answer.
    pub(super) failure: Option<CheckError>,
    /// The sweep removed this entry: a fetch must look the key up again.
    pub(super) retired: bool,
    /// Settles that charged this key in Redis, counted when their reply arrives
    /// (wrapping): a fetch sized before a charge and answered after it does not
    /// remember its denial, which Redis may have decided before the charge.
    pub(super) charges: u64,
}

impl Slow {
    /// A settle charged the key in Redis: the bucket owes more than any denial
    /// remembered, or in flight, says.
    pub(super) fn charged(&mut self) {
        self.denied = None;
        self.charges = self.charges.wrapping_add(1);
    }
}

/// A denial remembered: the bucket had fewer than `cost` tokens, and none are added
/// before `until` but by refill, so a request for `cost` or more is denied locally
/// until then.
#[derive(Clone, Copy, Debug)]
pub(super) struct Denial {
    /// When Redis's `retry_after` ends, measured from the reply's arrival
    /// (nanoseconds since the limiter's epoch).
    pub(super) until: u64,
    /// The cost Redis denied.
    pub(super) cost: u32,
}

impl KeyLease {
    fn new() -> Self {
        Self {
            word: AtomicU64::new(0),
            refill_below: AtomicU64::new(u64::from(refill_below(1))),
            fetching: AtomicBool::new(false),
            fetched: Notify::new(),
            slow: Mutex::new(Slow {
                size: 1,
                last_fetch: None,
                denied: None,
                failure: None,
                retired: false,
                charges: 0,
            }),
        }
    }

    /// The slow part, even if a thread panicked holding it: each update leaves it
    /// consistent.
    pub(super) fn slow(&self) -> MutexGuard<'_, Slow> {
        self.slow.lock().unpoisoned()
    }
}

/// Every key this process holds a lease entry for.
pub(super) struct Leases {
    map: HashMap<Box<[u8]>, Arc<KeyLease>, foldhash::fast::RandomState>,
    /// Entries in the map, counted here so the sweep's trigger reads one word.
    keys: AtomicU64,
    /// Sweep when an insertion takes the count above this.
    sweep_above: AtomicU64,
    /// A sweep is running: at most one at a time, whoever runs it.
    sweeping: AtomicBool,
    /// The thread that sweeps (shared with the limiter's handles, which stop it when
    /// the last of them is dropped).
    sweeper: Arc<Sweeper>,
}

/// The fewest entries a sweep is worth walking the map for.
const MIN_SWEEP: u64 = 1024;

/// How far behind the sweeper thread may fall before requests sweep themselves: the
/// map holding this many times the keys at which a sweep became due.
const BEHIND: u64 = 4;

impl Leases {
    /// An empty map whose sweeps `sweeper` runs.
    pub(super) fn new(sweeper: Arc<Sweeper>) -> Self {
        Self {
            map: HashMap::with_hasher(foldhash::fast::RandomState::default()),
            keys: AtomicU64::new(0),
            sweep_above: AtomicU64::new(MIN_SWEEP),
            sweeping: AtomicBool::new(false),
            sweeper,
        }
    }

    /// The thread that sweeps this map.
    pub(super) fn sweeper(&self) -> &Arc<Sweeper> {
        &self.sweeper
    }

    /// `f` on `key`'s lease, if it has an entry: a lock-free lookup, no allocation.
    #[inline]
    pub(super) fn with<R>(&self, key: &[u8], f: impl FnOnce(&Arc<KeyLease>) -> R) -> Option<R> {
        self.map.pin().get(key).map(f)
    }

    /// `key`'s entry, made if it has none. A new entry may make a sweep due: the
    /// sweeper thread is asked for it. This request sweeps itself (deciding each entry
    /// with `sweep`, unless a sweep is running) only when there is no thread to ask,
    /// or when the thread has fallen so far behind that the map holds
    /// [`BEHIND`] times the keys a sweep was due at: so the map stays bounded
    /// whatever CPU the thread gets.
    pub(super) fn entry(
        &self,
        key: &[u8],
        sweep: impl FnMut(&KeyLease, &Slow) -> bool,
    ) -> Arc<KeyLease> {
        if let Some(lease) = self.with(key, Arc::clone) {
            return lease;
        }
        // A new entry, dropped unused if another thread stored one first.
        let (lease, inserted) = match self
            .map
            .pin()
            .try_insert(key.into(), Arc::new(KeyLease::new()))
        {
            Ok(lease) => (Arc::clone(lease), true),
            Err(occupied) => (Arc::clone(occupied.current), false),
        };
        if inserted {
            // Relaxed: a count for deciding when to sweep; it guards no memory.
            let keys = self.keys.fetch_add(1, Ordering::Relaxed) + 1;
            // Relaxed: as above.
            let due = self.sweep_above.load(Ordering::Relaxed);
            if keys > due && (!self.sweeper.request() || keys > due.saturating_mul(BEHIND)) {
                self.sweep(sweep);
            }
        }
        lease
    }

    /// The sweeper thread's sweep: only if one is still due when the thread comes to
    /// it (the requests that asked for it while the last one ran ask again, and the
    /// last one may have made room for them already).
    pub(super) fn sweep_if_due(&self, removable: impl FnMut(&KeyLease, &Slow) -> bool) {
        // Relaxed: as in `entry`.
        if self.keys.load(Ordering::Relaxed) > self.sweep_above.load(Ordering::Relaxed) {
            self.sweep(removable);
        }
    }

    /// Removes the entries `removable` says are idle, after marking each retired under
    /// its lock (so a fetch that started on it meanwhile looks the key up again); does
    /// nothing while another sweep runs. Sweeping when the map has doubled since the
    /// last sweep keeps the work per insertion constant and the map within about twice
    /// the live keys while the thread keeps up ([`BEHIND`] times when it does not).
    /// Once the limiter is being dropped, the rest of the map is kept: its memory goes
    /// with it.
    pub(super) fn sweep(&self, mut removable: impl FnMut(&KeyLease, &Slow) -> bool) {
        // Acquire: the last sweep's count and threshold (below) are seen before this
        // one begins; the swap makes sweeps one at a time.
        if self.sweeping.swap(true, Ordering::Acquire) {
            return;
        }
        let mut removed = 0u64;
        self.map.pin().retain(|_, lease| {
            let mut slow = lease.slow();
            // papaya may ask again about an entry it failed to remove (one a resize
            // was copying): retired once, counted once, and removed.
            if slow.retired {
                return false;
            }
            if self.sweeper.stopping() {
                return true;
            }
            // Relaxed: the lock orders this read after any fetch that locked the entry
            // before, and a fetch that locks it later sees `retired`.
            if lease.fetching.load(Ordering::Relaxed) || !removable(lease, &slow) {
                return true;
            }
            slow.retired = true;
            removed += 1;
            false
        });
        // Relaxed: as in `entry`.
        let keys = self.keys.fetch_sub(removed, Ordering::Relaxed) - removed;
        // Relaxed: as in `entry`.
        self.sweep_above
            .store((2 * keys).max(MIN_SWEEP), Ordering::Relaxed);
        // Release: pairs with the next sweep's Acquire swap.
        self.sweeping.store(false, Ordering::Release);
    }

    /// Entries in the map.
    pub(super) fn len(&self) -> u64 {
        // Relaxed: as in `entry`.
        self.keys.load(Ordering::Relaxed)
    }
}

/// The tokens `lease` holds at `now` (nanoseconds since the limiter's epoch).
#[inline]
pub(super) fn held(lease: &KeyLease, now: u64) -> u32 {
    hold::load(&lease.word, hold::tick(now))
}

#[cfg(all(test, not(turnstile_loom)))]
mod tests {
    use super::*;

    #[test]
    fn an_entry_stays_small() {
        // The docs say about 200 bytes a key with its map slot, Arc header and key.
        let size = std::mem::size_of::<KeyLease>();
        println!("KeyLease: {size} bytes");
        assert!(size <= 160, "{size}");
    }
}
