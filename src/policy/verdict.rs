//! A policy's answer, and the tally that builds it as the checks report.

use super::check::Taken;
use crate::Decision;
use std::time::Duration;

/// What a policy decided for one request (see [`Policy`](super::Policy) for the
/// semantics).
///
/// A policy with [dry-run](super#dry-run) checks decides twice at once: what its
/// enforced checks decide ([`outcome`](Verdict::outcome) and everything else here,
/// which is what refuses the request), and what it would decide were every check
/// enforced ([`if_enforced`](Verdict::if_enforced)). Without dry-run checks the two
/// are the same.
#[must_use = "a verdict that is not checked limits nothing"]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verdict {
    enforced: View,
    if_enforced: View,
}

/// One reading of a policy's checks: the enforced ones only, or all of them. The
/// outcome is stored as its kind, its wait read from the binding (the check with the
/// longest wait), which keeps a verdict small enough to return without a copy loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct View {
    kind: Kind,
    binding: Option<Binding>,
    refused: u64,
    /// The checks their limiter's failure policy answered (Redis gave no decision).
    fell_back: u64,
}

/// An [`Outcome`] without its wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Allowed,
    Denied,
    Overflow,
    ExceedsCapacity,
    MissingKey,
    Unavailable,
}

impl View {
    fn outcome(&self) -> Outcome {
        // The binding of a denial or an overflow is the check with the longest wait,
        // and its decision holds that wait (exact, or an overflow's hint).
        let wait = || {
            self.binding
                .and_then(|binding| binding.decision.retry_in())
                .unwrap_or_default()
        };
        match self.kind {
            Kind::Allowed => Outcome::Allowed,
            Kind::Denied => Outcome::Denied {
                retry_after: wait(),
            },
            Kind::Overflow => Outcome::Overflow { retry_hint: wait() },
            Kind::ExceedsCapacity => Outcome::ExceedsCapacity,
            Kind::MissingKey => Outcome::MissingKey,
            Kind::Unavailable => Outcome::Unavailable,
        }
    }
}

/// The outcome of a policy for one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every check allowed the request; each took its cost.
    Allowed,
    /// At least one check denied the request; nothing was taken. Sent again
    /// `retry_after` from now — the longest wait any check asked for — it passes
    /// every check, if nothing else takes from its keys meanwhile.
    Denied {
        /// The longest exact wait among the checks that denied; never rounded down.
        retry_after: Duration,
    },
    /// A check's limiter holds its `max_keys` keys and could not admit this request's
    /// new key ([`Decision::Overflow`]); nothing was taken. `retry_hint` is the
    /// longest of that hint and any other check's exact wait.
    Overflow {
        /// When to try again: a hint, not the promise [`Outcome::Denied`] makes.
        retry_hint: Duration,
    },
    /// A check's cost exceeds what its limiter can ever hold for this key: no wait
    /// helps. Nothing was taken; later checks were not asked.
    ExceedsCapacity,
    /// A check that rejects keyless requests found no usable key. Nothing was
    /// taken; later checks were not asked.
    MissingKey,
    /// A shared check's limiter could not decide (Redis down or slow, its circuit
    /// breaker open) and its [`FailurePolicy`](crate::redis::FailurePolicy) is to
    /// deny; no other check denied with a wait. Nothing that was decided was kept.
    /// There is no wait to report: nobody knows when the store answers again.
    /// [`Verdict::fell_back`] names the checks answered this way (also when their
    /// policy allowed).
    Unavailable,
}

/// The check whose state the response headers report: for an allowed request, the
/// one with the fewest units left; for a denied one, the one with the longest wait;
/// for a request that can never pass, the check that said so.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Binding {
    /// The check's position in its policy.
    pub check: usize,
    /// What that check's limiter decided. For an allowed request its `remaining` is
    /// what the key has left after this request.
    pub decision: Decision,
}

impl Verdict {
    /// The outcome.
    #[inline]
    pub fn outcome(&self) -> Outcome {
        self.enforced.outcome()
    }

    /// Whether every check allowed the request.
    #[inline]
    pub fn is_allowed(&self) -> bool {
        self.enforced.kind == Kind::Allowed
    }

    /// For [`Outcome::Denied`], the exact wait: the same request sent that much
    /// later passes every check, if nothing else takes from their keys meanwhile.
    /// `None` otherwise, an overflow included ([`Verdict::retry_hint`]).
    #[inline]
    pub fn retry_after(&self) -> Option<Duration> {
        match self.enforced.outcome() {
            Outcome::Denied { retry_after } => Some(retry_after),
            _ => None,
        }
    }

    /// For [`Outcome::Overflow`], when to try again: a hint, not an exact wait.
    /// `None` otherwise.
    #[inline]
    pub fn retry_hint(&self) -> Option<Duration> {
        match self.enforced.outcome() {
            Outcome::Overflow { retry_hint } => Some(retry_hint),
            _ => None,
        }
    }

    /// The most restrictive check, whose state the headers report; `None` when no
    /// check decided anything (an empty policy, every check skipped, a missing key).
    #[inline]
    pub fn binding(&self) -> Option<Binding> {
        self.enforced.binding
    }

    /// Units left under the most restrictive check (see [`Verdict::binding`]).
    #[inline]
    pub fn remaining(&self) -> Option<u32> {
        self.enforced.binding.map(|b| b.decision.remaining())
    }

    /// The positions of the checks that refused the request, in policy order.
    pub fn refused(&self) -> impl Iterator<Item = usize> + use<> {
        positions(self.enforced.refused)
    }

    /// The positions of the checks that their limiter's failure policy answered (no
    /// decision from Redis), allowed or denied, in policy order. Such a check knows
    /// nothing of its key: it is never the [`binding`](Verdict::binding) check.
    pub fn fell_back(&self) -> impl Iterator<Item = usize> + use<> {
        positions(self.enforced.fell_back)
    }

    /// Whether any check was answered by its failure policy ([`Verdict::fell_back`]).
    #[inline]
    pub fn has_fallbacks(&self) -> bool {
        self.enforced.fell_back != 0
    }

    /// The verdict had every dry-run check been enforced: its outcome, binding and
    /// refusing checks count the dry-run checks too. The same verdict when the policy
    /// has no dry-run checks.
    pub fn if_enforced(&self) -> Verdict {
        Verdict {
            enforced: self.if_enforced,
            if_enforced: self.if_enforced,
        }
    }

    /// The positions of the dry-run checks that would have refused the request, in
    /// policy order: what a dry run is for. Empty when none would have.
    pub fn refused_in_dry_run(&self) -> impl Iterator<Item = usize> + use<> {
        positions(self.if_enforced.refused & !self.enforced.refused)
    }

    /// Whether check `check` (in dry run, or not) kept what it took: the request went
    /// ahead in its world (the enforced checks' for an enforced check, every check's
    /// for a dry-run one: see [dry run](super#dry-run)), and the check decided rather
    /// than its failure policy. A check that skipped the request (no key) is not told
    /// apart here: it finds no key again when settled.
    pub(super) fn kept(&self, check: usize, dry_run: bool) -> bool {
        let view = if dry_run {
            &self.if_enforced
        } else {
            &self.enforced
        };
        let fell_back = u32::try_from(check)
            .ok()
            .and_then(|check| 1u64.checked_shl(check))
            .is_none_or(|bit| view.fell_back & bit != 0);
        view.kind == Kind::Allowed && !fell_back
    }
}

/// The set bits of `mask`, lowest first.
fn positions(mask: u64) -> impl Iterator<Item = usize> {
    (0..u64::BITS as usize).filter(move |&i| mask & (1 << i) != 0)
}

/// The checks' reports so far: the enforced checks' alone, and, for a policy with
/// dry-run checks, every check's.
pub(super) struct Tally {
    enforced: Part,
    /// Every check's reports; `None` for a policy without dry-run checks, where they
    /// are the enforced ones (so such a policy tallies once).
    all: Option<Part>,
    /// What a shared check that cannot answer without waiting does: ends this
    /// attempt (`true`: the policy asks again, awaiting), or is answered by its
    /// failure policy (`false`: a caller that cannot wait).
    later_ends: bool,
    /// A shared check could not answer without waiting, and ended the attempt.
    pub(super) later: bool,
}

impl Tally {
    /// An empty tally for a policy that has dry-run checks, or not.
    #[inline]
    pub(super) fn new(dry_run_checks: bool) -> Self {
        Self {
            enforced: Part::default(),
            all: dry_run_checks.then(Part::default),
            later_ends: false,
            later: false,
        }
    }

    /// An empty tally for an attempt that ends at the first shared check that cannot
    /// answer without waiting ([`Tally::later`]).
    #[inline]
    pub(super) fn attempt(dry_run_checks: bool) -> Self {
        Self {
            later_ends: true,
            ..Self::new(dry_run_checks)
        }
    }

    /// Records what check `check` made of the request; returns whether to go on
    /// asking the later checks: not once an enforced check has found that the request
    /// can never pass (a dry-run check that finds so is recorded, and the others are
    /// still asked).
    #[inline(always)]
    pub(super) fn record(&mut self, check: usize, taken: Taken, dry_run: bool) -> bool {
        let taken = match taken {
            Taken::Later { fails_open } if self.later_ends => {
                let _ = fails_open;
                self.later = true;
                return false;
            }
            Taken::Later { fails_open } => Taken::Fallback {
                allowed: fails_open,
            },
            taken => taken,
        };
        let Some(all) = &mut self.all else {
            return self.enforced.record(check, taken);
        };
        // Once a check has found that the request could never pass, the later checks
        // are ones a policy with every check enforced would not ask: they stay out of
        // the every-check view.
        if all.never.is_none() {
            all.record(check, taken);
        }
        if dry_run {
            return true;
        }
        self.enforced.record(check, taken)
    }

    /// Whether the request goes ahead (every enforced check let it through so far),
    /// and whether it would were every check enforced.
    #[inline]
    pub(super) fn passed(&self) -> Passed {
        if self.later {
            return Passed::NEITHER;
        }
        let enforced = self.enforced.refused == 0;
        Passed {
            enforced,
            all: self.all.as_ref().map_or(enforced, |all| all.refused == 0),
        }
    }

    pub(super) fn verdict(&self) -> Verdict {
        let enforced = self.enforced.view();
        Verdict {
            enforced,
            if_enforced: self.all.as_ref().map_or(enforced, Part::view),
        }
    }
}

/// Whether a request goes ahead: by its enforced checks (what happens), and by all
/// its checks (what would, were every dry-run check enforced).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Passed {
    pub(super) enforced: bool,
    pub(super) all: bool,
}

impl Passed {
    /// Nothing goes ahead: the evaluation ended early.
    pub(super) const NEITHER: Passed = Passed {
        enforced: false,
        all: false,
    };
}

/// One reading's reports so far, in policy order.
#[derive(Default)]
struct Part {
    /// The allowed check with the fewest units left.
    tightest: Option<Binding>,
    /// The denied or overflowing check with the longest wait (its decision holds the
    /// wait).
    longest_wait: Option<Binding>,
    overflow: bool,
    /// A check's failure policy denied.
    unavailable: bool,
    /// A check that ended the evaluation: the request can never pass.
    never: Option<(Kind, Option<Binding>)>,
    refused: u64,
    fell_back: u64,
}

impl Part {
    /// Records what check `check` made of the request; returns whether the request
    /// can still pass.
    #[inline(always)]
    fn record(&mut self, check: usize, taken: Taken) -> bool {
        let binding = |decision| Binding { check, decision };
        match taken {
            Taken::Skipped => true,
            Taken::Fallback { allowed } => {
                self.fell_back |= 1 << check;
                if !allowed {
                    self.refuse(check);
                    self.unavailable = true;
                }
                true
            }
            // Turned into a fallback or an ended attempt by the tally.
            Taken::Later { .. } => false,
            Taken::NoKey => {
                self.refuse(check);
                self.never.get_or_insert((Kind::MissingKey, None));
                false
            }
            Taken::Decided(decision) => match decision {
                Decision::Allowed { remaining } => {
                    if self
                        .tightest
                        .is_none_or(|b| remaining < b.decision.remaining())
                    {
                        self.tightest = Some(binding(decision));
                    }
                    true
                }
                Decision::Denied {
                    retry_after: wait, ..
                }
                | Decision::Overflow { retry_hint: wait } => {
                    self.refuse(check);
                    self.overflow |= matches!(decision, Decision::Overflow { .. });
                    if self
                        .longest_wait
                        .is_none_or(|b| Some(wait) > b.decision.retry_in())
                    {
                        self.longest_wait = Some(binding(decision));
                    }
                    true
                }
                Decision::ExceedsCapacity { .. } => {
                    self.refuse(check);
                    self.never
                        .get_or_insert((Kind::ExceedsCapacity, Some(binding(decision))));
                    false
                }
            },
        }
    }

    fn refuse(&mut self, check: usize) {
        self.refused |= 1 << check;
    }

    /// The outcome, binding and refusing checks these reports add up to.
    fn view(&self) -> View {
        let (kind, binding) = if let Some(never) = self.never {
            never
        } else if let Some(binding) = self.longest_wait {
            let kind = if self.overflow {
                Kind::Overflow
            } else {
                Kind::Denied
            };
            (kind, Some(binding))
        } else if self.unavailable {
            (Kind::Unavailable, None)
        } else {
            (Kind::Allowed, self.tightest)
        };
        View {
            kind,
            binding,
            refused: self.refused,
            fell_back: self.fell_back,
        }
    }
}
