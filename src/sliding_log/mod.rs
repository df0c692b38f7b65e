//! The sliding log's rules as an algorithm: exact, each key's log under its own lock.

mod log;

use crate::Decision;
use crate::Quota;
use crate::algorithm::{Algorithm, Blocked, Reconfigurable, Renewal, Retirement};
use crate::sync::Unpoisoned;
pub use log::SlidingLogRules;
use log::{Log, Status};
use std::sync::{Mutex, MutexGuard};

/// The log, if requests may still use it.
fn live(log: &mut MutexGuard<'_, Log>) -> Result<(), Blocked> {
    match log.status {
        Status::Live => Ok(()),
        Status::Retired => Err(Blocked::Retired),
        Status::Moved => Err(Blocked::Moving),
    }
}

/// Each key's log under its own lock; the lock makes freezing a log and changing it
/// mutually exclusive, as the compare-and-set does for a word.
impl<K> Algorithm<K> for SlidingLogRules {
    type State = Mutex<Log>;
    type Resolved = ();

    fn create(&self, _key: &K) -> Mutex<Log> {
        Mutex::new(Log::new())
    }

    fn acquire(&self, log: &Mutex<Log>, now: u64, cost: u32) -> Result<Decision, Blocked> {
        let mut log = log.lock().unpoisoned();
        live(&mut log)?;
        Ok(log.acquire(self, now, cost))
    }

    fn available(&self, log: &Mutex<Log>, now: u64) -> Result<u32, Blocked> {
        let mut log = log.lock().unpoisoned();
        live(&mut log)?;
        Ok(log.available(self, now))
    }

    fn refund(&self, log: &Mutex<Log>, now: u64, cost: u32) -> Result<(), Blocked> {
        let mut log = log.lock().unpoisoned();
        live(&mut log)?;
        log.refund(self, now, cost);
        Ok(())
    }

    fn fresh_available(&self, _key: impl FnOnce() -> K, now: u64) -> u32 {
        Log::new().available(self, now)
    }

    fn is_retired(&self, log: &Mutex<Log>) -> bool {
        log.lock().unpoisoned().status == Status::Retired
    }

    fn retire_if_forgettable(&self, log: &Mutex<Log>, at: u64) -> Retirement {
        let mut log = log.lock().unpoisoned();
        match log.status {
            Status::Retired => Retirement::AlreadyRetired,
            Status::Moved => Retirement::Moving,
            Status::Live => match log.forgettable_from(self) {
                Some(from) if from <= at => {
                    log.status = Status::Retired;
                    Retirement::Retired
                }
                from => Retirement::Kept(from.unwrap_or(u64::MAX)),
            },
        }
    }

    fn resolve(&self, _key: &K) {}

    /// Never asked: one quota for every key is never outdated.
    fn renew(
        &self,
        _log: &Mutex<Log>,
        _resolved: &(),
        _now: u64,
        _swap: impl FnOnce(Mutex<Log>) -> bool,
    ) -> Renewal {
        Renewal::Current
    }
}

impl Reconfigurable for SlidingLogRules {
    type Frozen = Log;

    fn for_quota(quota: &Quota) -> Self {
        SlidingLogRules::new(quota)
    }

    /// Takes the log's entries out, leaving it marked as moved.
    fn freeze(&self, log: &Mutex<Log>) -> Result<Log, Blocked> {
        let mut log = log.lock().unpoisoned();
        live(&mut log)?;
        let frozen = std::mem::take(&mut *log);
        log.status = Status::Moved;
        Ok(frozen)
    }

    fn moment(&self, frozen: &Log) -> u64 {
        frozen.newest()
    }

    fn frozen_available(&self, frozen: &Log, now: u64) -> u32 {
        frozen.available(self, now)
    }

    /// Puts the entries back: the log taken out was live.
    fn thaw(&self, log: &Mutex<Log>, frozen: Log) {
        *log.lock().unpoisoned() = frozen;
    }
}
