//! The sliding log's rules as an algorithm: exact, each key's log under its own lock.

mod log;

use crate::algorithm::{Blocked, Movable, Renewal, Retirement, Rules};
use crate::sync::Unpoisoned;
use crate::{Decision, Quota, Settlement};
pub use log::SlidingLogRules;
use log::{Log, Status};
use std::sync::{Mutex, MutexGuard};

/// The log, if requests may still use it.
fn live(log: &mut MutexGuard<'_, Log>) -> Result<(), Blocked> {
    match log.status {
        Status::Live => Ok(()),
        Status::Retired => Err(Blocked::Retired),
        Status::Moved => Err(Blocked::Moving),
        Status::Relocated => Err(Blocked::Relocated),
    }
}

/// Each key's log under its own lock; the lock makes freezing a log and changing it
/// mutually exclusive, as the compare-and-set does for a word.
impl<K> Rules<K> for SlidingLogRules {
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

    /// Under the log's lock, as every change to it: a charge records extra entries at
    /// the reading (see [`Log::charge`]). A settle below the estimate gives nothing
    /// back: the log cannot tell which entries the estimate recorded, and dropping
    /// others (a later request's) would free its room before its window is over,
    /// admitting more than the limit in a window. (A [`refund`](Rules::refund) right
    /// after the take, a policy's, still drops the oldest entries.)
    fn settle(
        &self,
        log: &Mutex<Log>,
        now: u64,
        estimate: u32,
        actual: u32,
    ) -> Result<Settlement, Blocked> {
        let mut log = log.lock().unpoisoned();
        live(&mut log)?;
        Ok(if actual <= estimate {
            // Nothing given back (see above), nothing charged.
            Settlement::default()
        } else {
            let extra = actual - estimate;
            Settlement::of_charge(extra, log.charge(self, now, extra))
        })
    }

    fn fresh_available(&self, _key: impl FnOnce() -> K, now: u64) -> u32 {
        Log::new().available(self, now)
    }

    /// Under the log's lock, as every change to it: marks it relocated, keeping its
    /// entries for any thread that copies it later, and returns a live copy.
    fn relocate(&self, log: &Mutex<Log>) -> Result<Mutex<Log>, Blocked> {
        let mut log = log.lock().unpoisoned();
        match log.status {
            Status::Live => log.status = Status::Relocated,
            Status::Relocated => {}
            Status::Retired => return Err(Blocked::Retired),
            Status::Moved => return Err(Blocked::Moving),
        }
        let mut copy = log.clone();
        copy.status = Status::Live;
        Ok(Mutex::new(copy))
    }

    fn relocated_copy(&self, log: &Mutex<Log>) -> Mutex<Log> {
        let mut copy = log.lock().unpoisoned().clone();
        copy.status = Status::Relocated;
        Mutex::new(copy)
    }

    fn is_retired(&self, log: &Mutex<Log>) -> bool {
        log.lock().unpoisoned().status == Status::Retired
    }

    fn retire_if_forgettable(&self, log: &Mutex<Log>, at: u64) -> Retirement {
        let mut log = log.lock().unpoisoned();
        match log.status {
            Status::Retired => Retirement::AlreadyRetired,
            Status::Moved => Retirement::Moving,
            Status::Relocated => Retirement::Relocated,
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

impl Movable for SlidingLogRules {
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

    fn frozen_debt(&self, frozen: &Log, now: u64) -> u32 {
        frozen.debt(self, now)
    }

    /// Puts the entries back: the log taken out was live.
    fn thaw(&self, log: &Mutex<Log>, frozen: Log) {
        *log.lock().unpoisoned() = frozen;
    }

    /// The same entries in a log of their own (live: the frozen one was).
    fn restored(&self, frozen: &Log) -> Mutex<Log> {
        Mutex::new(frozen.clone())
    }
}

#[cfg(all(test, not(turnstile_loom)))]
mod tests {
    use super::{Blocked, Log, Retirement, Rules, SlidingLogRules};
    use crate::Quota;
    use std::sync::Mutex;

    fn rules() -> SlidingLogRules {
        SlidingLogRules::new(&Quota::per_second(3).unwrap())
    }

    const MS: u64 = 1_000_000;

    /// A relocated log keeps its entries for every thread that copies it, takes no
    /// request itself, and its copy answers as it would have.
    #[test]
    fn a_relocated_log_is_copied_whole_and_refuses_requests() {
        let rules = rules();
        let log = Rules::<()>::create(&rules, &());
        for at in [0, 100 * MS] {
            assert!(
                Rules::<()>::acquire(&rules, &log, at, 1)
                    .unwrap()
                    .is_allowed()
            );
        }
        let copy: Mutex<Log> = Rules::<()>::relocate(&rules, &log).unwrap();
        assert_eq!(
            Rules::<()>::acquire(&rules, &log, 200 * MS, 1),
            Err(Blocked::Relocated)
        );
        assert_eq!(
            Rules::<()>::refund(&rules, &log, 200 * MS, 1),
            Err(Blocked::Relocated)
        );
        assert_eq!(
            Rules::<()>::retire_if_forgettable(&rules, &log, u64::MAX),
            Retirement::Relocated
        );
        // A second relocation, by a helper, gets the same entries.
        let again: Mutex<Log> = Rules::<()>::relocate(&rules, &log).unwrap();
        for copy in [&copy, &again] {
            assert_eq!(Rules::<()>::available(&rules, copy, 200 * MS), Ok(1));
            // The oldest entry has left the window (a little over 1 s) by 1.05 s.
            assert_eq!(Rules::<()>::available(&rules, copy, 1050 * MS), Ok(2));
        }
    }

    #[test]
    fn a_retired_log_is_not_relocated() {
        let rules = rules();
        let log = Rules::<()>::create(&rules, &());
        assert_eq!(
            Rules::<()>::retire_if_forgettable(&rules, &log, 0),
            Retirement::Retired
        );
        assert!(matches!(
            Rules::<()>::relocate(&rules, &log),
            Err(Blocked::Retired)
        ));
    }
}
