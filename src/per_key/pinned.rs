//! The per-key rules as a request of one configuration sees them: a configuration
//! number and the quota it gives every key, carried by the request into the limiter
//! instead of read from it.
//!
//! A reloadable configuration ([`crate::config::LiveLimits`]) publishes each new quota
//! while it builds the new file (before the swap, and even for a file it then
//! refuses: only that file's checks carry the new configuration, so nothing decides
//! by it until they run), and each check of a configuration carries that
//! configuration's [`Pinned`] rules. A request of the new configuration moves every key it meets to
//! the new quota at once; a request still running under the old configuration
//! decides under the old quota, unless a request of the new one has moved the key
//! already (a key is under one quota at a time, and moves forward only: a mover
//! leaves alone an entry at its configuration or a later one, and only the thread
//! that froze an entry replaces it, in `Entry::renew`). Nothing waits for the
//! requests of the old configuration to finish.

use super::Entry;
use crate::algorithm::{Blocked, Reconfigurable, Renewal, Retirement, Rules};
use crate::decision::Decision;
use crate::{Quota, Settlement};

/// A [`PerKey`](super::PerKey) limiter's rules under one of its configurations,
/// which gives every key `quota`: made by `KeyedLimiter::pin_quota`, which publishes
/// it.
#[derive(Clone, Debug)]
pub(crate) struct Pinned<A> {
    configuration: u64,
    /// The configuration's quota's rules, made once.
    rules: A,
}

impl<A: Reconfigurable> Pinned<A> {
    /// Configuration `configuration`, giving every key `quota`.
    pub(crate) fn new(configuration: u64, quota: Quota) -> Self {
        Self {
            configuration,
            rules: A::for_quota(&quota),
        }
    }

    /// The rules and state of `entry` for a request of this configuration.
    #[inline(always)]
    fn current<'e>(&self, entry: &'e Entry<A>) -> Result<(&'e A, &'e A::State), Blocked> {
        entry.current(self.configuration)
    }
}

/// The same steps as [`PerKey`](super::PerKey)'s, at this configuration rather than the
/// limiter's current one: an entry at this configuration or a later one is current;
/// an older one moves to this quota, whatever configuration the limiter has published
/// since (the request is this configuration's).
impl<A: Reconfigurable, K: Send + Sync> Rules<K> for Pinned<A> {
    type State = Entry<A>;
    /// Nothing: the configuration and its rules are this view's own.
    type Resolved = ();

    fn create(&self, _: &K) -> Entry<A> {
        Entry::fresh_under(self.configuration, self.rules.clone())
    }

    #[inline(always)]
    fn acquire(&self, entry: &Entry<A>, now: u64, cost: u32) -> Result<Decision, Blocked> {
        let (rules, state) = self.current(entry)?;
        rules.acquire(state, now, cost)
    }

    #[inline(always)]
    fn admit(&self, entry: &Entry<A>, now: u64, cost: u32) -> Result<bool, Blocked> {
        let (rules, state) = self.current(entry)?;
        rules.admit(state, now, cost)
    }

    fn acquire_unshared(
        &self,
        entry: &mut Entry<A>,
        now: u64,
        cost: u32,
    ) -> Result<Decision, Blocked> {
        self.current(entry)?;
        let Entry { rules, state, .. } = entry;
        rules.acquire_unshared(state, now, cost)
    }

    fn available(&self, entry: &Entry<A>, now: u64) -> Result<u32, Blocked> {
        let (rules, state) = self.current(entry)?;
        rules.available(state, now)
    }

    fn refund(&self, entry: &Entry<A>, now: u64, cost: u32) -> Result<(), Blocked> {
        let (rules, state) = self.current(entry)?;
        rules.refund(state, now, cost)
    }

    fn settle(
        &self,
        entry: &Entry<A>,
        now: u64,
        estimate: u32,
        actual: u32,
    ) -> Result<Settlement, Blocked> {
        let (rules, state) = self.current(entry)?;
        rules.settle(state, now, estimate, actual)
    }

    fn fresh_available(&self, _: impl FnOnce() -> K, now: u64) -> u32 {
        self.rules.fresh_available(|| (), now)
    }

    fn relocate(&self, entry: &Entry<A>) -> Result<Entry<A>, Blocked> {
        entry.relocate()
    }

    fn relocated_copy(&self, entry: &Entry<A>) -> Entry<A> {
        entry.relocated_copy()
    }

    fn is_retired(&self, entry: &Entry<A>) -> bool {
        entry.is_retired(self.configuration)
    }

    fn retire_if_forgettable(&self, entry: &Entry<A>, at: u64) -> Retirement {
        entry.retire_if_forgettable(at, self.configuration)
    }

    /// Nothing to ask: the quota is the configuration's, no resolver runs.
    fn resolve(&self, _: &K) {}

    fn renew(
        &self,
        entry: &Entry<A>,
        _: &(),
        now: u64,
        swap: impl FnOnce(Entry<A>) -> bool,
    ) -> Renewal {
        entry.renew(self.configuration, self.rules.clone(), now, swap, || false)
    }
}

#[cfg(all(test, not(turnstile_loom)))]
mod tests {
    use super::Pinned;
    use crate::Quota;
    use crate::algorithm::{Blocked, Renewal, Rules};
    use crate::token_bucket::TokenBucketRules;

    type Rules10 = Pinned<TokenBucketRules>;

    fn pinned(configuration: u64, per_hour: u32) -> Rules10 {
        Pinned::new(configuration, Quota::per_hour(per_hour).unwrap())
    }

    fn available(rules: &Rules10, entry: &super::Entry<TokenBucketRules>) -> u32 {
        Rules::<u64>::available(rules, entry, 0).unwrap()
    }

    /// A move, as the keyed limiter makes one: the successor kept aside.
    fn moved(
        rules: &Rules10,
        entry: &super::Entry<TokenBucketRules>,
    ) -> Option<super::Entry<TokenBucketRules>> {
        let mut successor = None;
        let renewal = Rules::<u64>::renew(rules, entry, &(), 0, |next| {
            successor = Some(next);
            true
        });
        assert_eq!(renewal, Renewal::Current);
        successor
    }

    #[test]
    fn an_older_configuration_decides_under_a_key_a_later_one_has_moved() {
        let (old, new) = (pinned(1, 10), pinned(2, 3));
        let entry = Rules::<u64>::create(&old, &7);
        assert!(
            Rules::<u64>::acquire(&old, &entry, 0, 2)
                .unwrap()
                .is_allowed()
        );
        // The new configuration's request finds the key behind it: moved, keeping
        // what it had left (8), capped at 3.
        assert_eq!(
            Rules::<u64>::acquire(&new, &entry, 0, 1),
            Err(Blocked::Outdated)
        );
        let successor = moved(&new, &entry).expect("different rules: a successor");
        assert_eq!(available(&new, &successor), 3);
        // The old configuration's request meets the moved key under the new quota,
        // and cannot take it back: its own move finds nothing to do.
        assert_eq!(available(&old, &successor), 3);
        assert!(moved(&old, &successor).is_none());
    }

    #[test]
    fn a_key_an_older_configuration_made_moves_at_a_later_ones_request() {
        let (old, new) = (pinned(4, 10), pinned(5, 10));
        let entry = Rules::<u64>::create(&old, &7);
        assert!(
            Rules::<u64>::acquire(&old, &entry, 0, 4)
                .unwrap()
                .is_allowed()
        );
        assert_eq!(
            Rules::<u64>::available(&new, &entry, 0),
            Err(Blocked::Outdated)
        );
        // The same quota: a successor at the new configuration, its state exactly as
        // it was; the old entry, frozen, takes no more requests.
        let successor = moved(&new, &entry).expect("a move makes a successor");
        assert_eq!(available(&new, &successor), 6);
        assert_eq!(available(&old, &successor), 6);
        assert_eq!(
            Rules::<u64>::available(&old, &entry, 0),
            Err(Blocked::Moving)
        );
    }

    #[test]
    fn a_fresh_key_of_a_configuration_has_its_quota() {
        let rules = pinned(9, 4);
        assert_eq!(Rules::<u64>::fresh_available(&rules, || 7, 0), 4);
        let entry = Rules::<u64>::create(&rules, &7);
        assert_eq!(available(&rules, &entry), 4);
    }
}
