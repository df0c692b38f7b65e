//! The targets of results/README.md, and the figures a rival won, each judged beside
//! the floor under it: what a check with no limiting logic at all reaches against
//! the same rival in the same run. Where even the floor cannot win, no limiter built on
//! the same parts could, and the table says so with the floor's figure beside ours.

use crate::runs::{Figures, Latency, Throughput};
use crate::scenarios::{SCENARIOS, entry, find, interleaved, millions};
use std::fmt::Write as _;

/// Reaching the floor: within this fraction of the floor's own ratio to a rival
/// (turnstile does the limiting on top of the floor's work, so it is never above it
/// by design; 5 % is the allowance).
const WITHIN: f64 = 0.95;

/// What the floor under the keyed limiters is, in a loss's cause.
const KEYED_FLOOR: &str = "the floor (a clock reading, a papaya lookup and one CAS, no limiting)";
/// The same floor under churn, where every key is new.
const CHURN_FLOOR: &str = "the floor (papaya's bare insert-and-remove of each new key)";

/// A rival's lead on the medians counts as a loss only where the paired rounds show it:
/// the one-sided sign test's chance of a rival no faster than turnstile being ahead
/// in as many rounds or more must be under this.
pub const SIGNIFICANCE: f64 = 0.05;

/// One row of the targets table.
struct Row {
    target: String,
    measured: String,
    met: Met,
}

/// One figure's verdict against its goal.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Verdict {
    Yes,
    /// Under the goal on the medians, but the paired rounds do not tell turnstile from
    /// the rival ([`Ahead::measurable`]).
    Tie,
    /// Missed only where the floor itself cannot do better: the floor is within the
    /// allowance of the rival (or behind it), and turnstile within the allowance of
    /// the floor.
    AtTheFloor,
    /// Missed by more than the floor or the rounds explain.
    No,
}

impl Verdict {
    /// `ours` is turnstile's ratio to the rival (or to the goal), `floor` the floor's
    /// where the run has one, `tied` whether the rounds call the two a tie.
    fn of(ours: f64, goal: f64, floor: Option<f64>, tied: bool) -> Self {
        if ours >= goal {
            Verdict::Yes
        } else if tied {
            Verdict::Tie
        } else if floor.is_some_and(|floor| at_floor(ours, floor)) {
            Verdict::AtTheFloor
        } else {
            Verdict::No
        }
    }
}

/// Whether a target was met, for its "met" cell: its figures' verdicts, each with its
/// thread count where the row spans several; `None` where the run has none of them.
struct Met(Option<Vec<(Option<usize>, Verdict)>>);

impl Met {
    /// A row of one figure.
    fn one(verdict: Option<Verdict>) -> Self {
        Met(verdict.map(|v| vec![(None, v)]))
    }

    /// A row over thread counts.
    fn over(verdicts: Vec<(usize, Verdict)>) -> Self {
        Met((!verdicts.is_empty())
            .then(|| verdicts.into_iter().map(|(n, v)| (Some(n), v)).collect()))
    }

    /// "yes"; or "**no**" where any figure missed, with those thread counts; else
    /// what explains each figure short of the goal.
    fn cell(&self) -> String {
        let Some(verdicts) = &self.0 else {
            return "not measured".into();
        };
        let part = |verdict: Verdict, name: &str| {
            let counts: Vec<String> = verdicts
                .iter()
                .filter(|(_, v)| *v == verdict)
                .filter_map(|(n, _)| n.map(|n| n.to_string()))
                .collect();
            let any = verdicts.iter().any(|(_, v)| *v == verdict);
            any.then(|| {
                if counts.is_empty() {
                    name.to_string()
                } else {
                    format!("{name} ({} thr)", counts.join(", "))
                }
            })
        };
        if let Some(no) = part(Verdict::No, "**no**") {
            return no;
        }
        let short: Vec<String> = [(Verdict::Tie, "tie"), (Verdict::AtTheFloor, "at the floor")]
            .into_iter()
            .filter_map(|(verdict, name)| part(verdict, name))
            .collect();
        if short.is_empty() {
            "yes".into()
        } else {
            short.join("; ")
        }
    }
}

/// In how many of the rounds the rival was the faster one, of the rounds where one of
/// the two was (benches/ratios.rs and benches/direct.rs run every contender once a
/// round, so the same round's two rates are a pair, measured in the same round).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Ahead {
    pub rounds: usize,
    pub of: usize,
}

impl Ahead {
    /// The rival's rounds against ours. `None` where the two have no paired rounds
    /// (criterion's figures, or lists of different lengths), or too few for any lead
    /// to be measurable (five or more are needed at 5 %): there a lead on the median
    /// stands as measured.
    fn of(ours: &Throughput, theirs: &Throughput) -> Option<Self> {
        if ours.rounds.is_empty() || ours.rounds.len() != theirs.rounds.len() {
            return None;
        }
        // A round with equal rates (or one not a number) is won by neither: the sign
        // test leaves it out.
        let decided: Vec<bool> = ours
            .rounds
            .iter()
            .zip(&theirs.rounds)
            .filter_map(|(ours, theirs)| match theirs.partial_cmp(ours)? {
                std::cmp::Ordering::Equal => None,
                order => Some(order == std::cmp::Ordering::Greater),
            })
            .collect();
        let ahead = Ahead {
            rounds: decided.iter().filter(|&&rival| rival).count(),
            of: decided.len(),
        };
        // If even a rival that won every decided round would not be measurable, the
        // rounds are too few to test at all.
        let clean_sweep = Ahead {
            rounds: ahead.of,
            of: ahead.of,
        };
        clean_sweep.measurable().then_some(ahead)
    }

    /// The chance that a rival no faster than ours is ahead in this many rounds or
    /// more, each round a fair coin: the binomial tail, the sign test's p-value.
    fn chance(self) -> f64 {
        let mut term = 0.5f64.powi(self.of as i32); // k = 0: C(n, 0) / 2^n
        let mut tail = 0.0;
        for k in 0..=self.of {
            if k >= self.rounds {
                tail += term;
            }
            term *= (self.of - k) as f64 / (k + 1) as f64;
        }
        tail
    }

    /// Whether the rounds show the rival ahead: a coin would put it ahead this often
    /// less than [`SIGNIFICANCE`] of the time.
    pub fn measurable(self) -> bool {
        self.chance() < SIGNIFICANCE
    }
}

/// Whether a rival's lead on the medians is a tie: ours within the allowance of
/// theirs ([`WITHIN`]: at least 0.95×), and a lead the paired rounds do not show
/// ([`Ahead`]). A larger lead stays a loss whatever the rounds say: with seven rounds
/// one noisy round would otherwise hide any gap.
fn tied(
    list: &[Throughput],
    scenario: &str,
    ours: &str,
    rival: &str,
    threads: usize,
) -> Option<Ahead> {
    let ours = entry(list, scenario, ours, threads)?;
    let theirs = entry(list, scenario, rival, threads)?;
    if ours.ops_per_sec < WITHIN * theirs.ops_per_sec {
        return None;
    }
    Ahead::of(ours, theirs).filter(|ahead| !ahead.measurable())
}

/// A goal with no floor and no rounds beside it: met or not.
fn yes_or_no(met: bool) -> Verdict {
    if met { Verdict::Yes } else { Verdict::No }
}

/// Whether a ratio to a rival is at the floor: the floor's own ratio to the rival is
/// under 1 / `WITHIN` (no check on the same parts beats the rival by more than the
/// allowance), and ours is within the allowance of it.
fn at_floor(ours: f64, floor: f64) -> bool {
    floor < 1.0 / WITHIN && ours >= WITHIN * floor
}

/// The thread counts `list` holds for `scenario`, ascending.
fn threads_of(list: &[Throughput], scenario: &str) -> Vec<usize> {
    let mut counts: Vec<usize> = list
        .iter()
        .filter(|t| t.scenario == scenario)
        .map(|t| t.threads)
        .collect();
    counts.sort_unstable();
    counts.dedup();
    counts
}

/// The targets table: issue 34's targets, each with the floor's own figure beside
/// ours, and the standing goals of earlier waves (churn, denial, memory).
pub fn table(figures: &Figures) -> String {
    let mut out = String::from("| target | measured (floor beside) | met |\n|---|---|---|\n");
    for row in rows(figures) {
        let _ = writeln!(
            out,
            "| {} | {} | {} |",
            row.target,
            row.measured,
            row.met.cell()
        );
    }
    out
}

fn rows(figures: &Figures) -> Vec<Row> {
    let mut rows = direct_rows(figures);
    rows.extend(per_key_mutex_rows(figures));
    rows.extend(latency_rows(figures));
    rows.extend(one_thread_rows(figures));
    rows.extend(standing_rows(figures));
    rows
}

/// The direct limiters against governor's, every mix and thread count, each beside
/// the clock alone (the floor under every direct check: one reading).
fn direct_rows(figures: &Figures) -> Vec<Row> {
    let mut rows = Vec::new();
    for (ours, name) in [
        ("turnstile", "DirectTokenBucket"),
        ("turnstile-gcra", "DirectGcra"),
    ] {
        for mix in ["allowed", "denied"] {
            let scenario = format!("direct-{mix}");
            for n in threads_of(&figures.direct, &scenario) {
                let get = |limiter: &str| find(&figures.direct, &scenario, limiter, n);
                let ratio = get(ours).zip(get("governor")).map(|(o, g)| o / g);
                let clock = get("floor-clock").zip(get("governor")).map(|(c, g)| c / g);
                rows.push(Row {
                    target: format!("direct, {mix}, {n} thr: {name} ≥ 1.0× governor's"),
                    measured: match (ratio, clock) {
                        (Some(r), Some(c)) => format!("{r:.2}× (the clock alone: {c:.2}×)"),
                        (Some(r), None) => format!("{r:.2}×"),
                        _ => "–".into(),
                    },
                    met: Met::one(ratio.map(|r| {
                        let tie = tied(&figures.direct, &scenario, ours, "governor", n);
                        Verdict::of(r, 1.0, clock, tie.is_some())
                    })),
                });
            }
        }
    }
    rows
}

/// turnstile against a mutex per key (the same store, the same keys, the same step)
/// on every pattern, both mixes, every thread count: one row per scenario.
fn per_key_mutex_rows(figures: &Figures) -> Vec<Row> {
    let mut rows = Vec::new();
    for scenario in SCENARIOS {
        let (mut cells, mut verdicts) = (Vec::new(), Vec::new());
        for n in threads_of(&figures.interleaved, scenario) {
            let get = |limiter: &str| interleaved(figures, scenario, limiter, n);
            let Some((ours, mutex)) = get("turnstile").zip(get("mutex-per-key")) else {
                continue;
            };
            let tie = tied(
                &figures.interleaved,
                scenario,
                "turnstile",
                "mutex-per-key",
                n,
            );
            let floor = get("floor-stack").map(|f| f / mutex);
            cells.push(format!(
                "{n} thr: {:.2}×{}",
                ours / mutex,
                floor.map(|f| format!(" ({f:.2}×)")).unwrap_or_default()
            ));
            verdicts.push((n, Verdict::of(ours / mutex, 1.0, floor, tie.is_some())));
        }
        rows.push(Row {
            target: format!("{scenario}: turnstile ≥ 1.0× mutex-per-key at every thread count"),
            measured: cells.join(" · "),
            met: Met::over(verdicts),
        });
    }
    rows
}

/// Tail latency against the per-key mutex: p99 and p99.9 no higher, every pattern
/// and thread count the latency benchmark runs.
fn latency_rows(figures: &Figures) -> Vec<Row> {
    let mut patterns: Vec<&str> = figures.latency.iter().map(|l| l.pattern.as_str()).collect();
    patterns.dedup();
    let mut rows = Vec::new();
    for pattern in patterns {
        let (mut cells, mut verdicts) = (Vec::new(), Vec::new());
        for ours in figures
            .latency
            .iter()
            .filter(|l| l.limiter == "turnstile" && l.pattern == pattern)
        {
            let Some(mutex) = latency_of(figures, "mutex-per-key", pattern, ours.threads) else {
                continue;
            };
            let floor = latency_of(figures, "floor-stack", pattern, ours.threads);
            cells.push(format!(
                "{} thr: {} / {} ns vs {} / {}{}",
                ours.threads,
                ours.p99,
                ours.p999,
                mutex.p99,
                mutex.p999,
                floor
                    .map(|f| format!("; floor {} / {}", f.p99, f.p999))
                    .unwrap_or_default()
            ));
            let tails = [(ours.p99, mutex.p99), (ours.p999, mutex.p999)];
            let floors = floor.map(|f| [f.p99, f.p999]);
            let missed: Vec<bool> = tails
                .iter()
                .enumerate()
                .filter(|(_, (mine, theirs))| mine > theirs)
                .map(|(i, &(mine, theirs))| {
                    floors.is_some_and(|f| tail_at_floor(mine, theirs, f[i]))
                })
                .collect();
            let verdict = if missed.iter().any(|&floored| !floored) {
                Verdict::No
            } else if !missed.is_empty() {
                Verdict::AtTheFloor
            } else {
                Verdict::Yes
            };
            verdicts.push((ours.threads, verdict));
        }
        rows.push(Row {
            target: format!("{pattern}: turnstile's p99 / p99.9 ≤ mutex-per-key's"),
            measured: cells.join(" · "),
            met: Met::over(verdicts),
        });
    }
    rows
}

fn latency_of<'a>(
    figures: &'a Figures,
    limiter: &str,
    pattern: &str,
    threads: usize,
) -> Option<&'a Latency> {
    figures
        .latency
        .iter()
        .find(|l| l.limiter == limiter && l.pattern == pattern && l.threads == threads)
}

/// One thread against one `Mutex<HashMap>`: turnstile's ratio at least `WITHIN` of
/// the floor's own ratio (where the floor itself is slower than the global lock, the
/// target is the floor's ratio, not 1.0).
fn one_thread_rows(figures: &Figures) -> Vec<Row> {
    SCENARIOS
        .iter()
        .map(|&scenario| {
            let get = |limiter: &str| interleaved(figures, scenario, limiter, 1);
            let ratios = get("turnstile")
                .zip(get("floor-stack"))
                .zip(get("global-lock"))
                .map(|((ours, floor), lock)| (ours / lock, floor / lock));
            Row {
                target: format!(
                    "{scenario}, 1 thread: turnstile ÷ global-lock ≥ {WITHIN}× the floor's"
                ),
                measured: ratios.map_or("–".into(), |(ours, floor)| {
                    // Where keys go idle (zipf's tail, churn), turnstile forgets them and
                    // the global lock keeps them: the same limiter without its sweeper
                    // thread (which keeps them too), beside, says what forgetting costs.
                    let manual = get("turnstile-manual")
                        .zip(get("global-lock"))
                        .map(|(manual, lock)| {
                            format!("; without its sweeper: {:.2}×", manual / lock)
                        })
                        .unwrap_or_default();
                    format!(
                        "{ours:.2}× (floor-stack: {floor:.2}×, so ≥ {:.2}×{manual})",
                        WITHIN * floor
                    )
                }),
                met: Met::one(ratios.map(|(ours, floor)| yes_or_no(ours >= WITHIN * floor))),
            }
        })
        .collect()
}

/// Goals of earlier waves that still stand: churn near papaya's own insertion, the
/// denial path no slower than the allow path, and memory per key.
fn standing_rows(figures: &Figures) -> Vec<Row> {
    let mut rows = Vec::new();
    let scenario = "churn-allowed";
    let (mut cells, mut verdicts) = (Vec::new(), Vec::new());
    for n in threads_of(&figures.interleaved, scenario) {
        let get = |limiter: &str| interleaved(figures, scenario, limiter, n);
        if let Some((ours, floor)) = get("turnstile").zip(get("floor-stack")) {
            cells.push(format!("{n} thr: {:.2}×", ours / floor));
            verdicts.push((n, yes_or_no(ours >= 0.9 * floor)));
        }
    }
    rows.push(Row {
        target: "churn-allowed: turnstile ≥ 0.9× papaya's bare insert-and-remove".into(),
        measured: cells.join(" · "),
        met: Met::over(verdicts),
    });
    for pattern in ["hot", "uniform", "zipf"] {
        let allowed = format!("{pattern}-allowed");
        let denied = format!("{pattern}-denied");
        let (mut cells, mut verdicts) = (Vec::new(), Vec::new());
        for n in threads_of(&figures.interleaved, &allowed) {
            let a = interleaved(figures, &allowed, "turnstile", n);
            let d = interleaved(figures, &denied, "turnstile", n);
            if let Some((a, d)) = a.zip(d) {
                cells.push(format!("{n} thr: {:.2}", d / a));
                verdicts.push((n, yes_or_no(d >= a)));
            }
        }
        rows.push(Row {
            target: format!("{pattern}: the denial path at least as fast as the allow path"),
            measured: format!("denied ÷ allowed: {}", cells.join(" · ")),
            met: Met::over(verdicts),
        });
    }
    for key_type in ["u64", "ipv4-string"] {
        let heap = |limiter: &str| {
            figures
                .memory
                .iter()
                .find(|m| m.limiter == limiter && m.key_type == key_type)
                .map(|m| m.heap_per_key)
        };
        for limiter in ["turnstile", "turnstile-words"] {
            let both = heap(limiter).zip(heap("governor"));
            rows.push(Row {
                target: format!(
                    "memory per {key_type} key (heap), {limiter}: no more than governor's"
                ),
                measured: both.map_or("–".into(), |(t, g)| format!("{t:.1} B vs {g:.1} B")),
                met: Met::one(both.map(|(t, g)| yes_or_no(t <= g))),
            });
        }
    }
    rows
}

/// A figure a rival won, and its cause where the run's own figures give one.
pub struct Loss {
    pub what: String,
    pub cause: Option<String>,
    /// Where the figure has paired rounds that do not show the rival ahead: a tie,
    /// not a loss ([`Ahead::measurable`]).
    pub tie: Option<Ahead>,
}

/// Every figure of the run where a rival out-ran turnstile (default clock) on the
/// median: throughput (interleaved medians), direct limiters, latency, memory. A
/// throughput figure whose paired rounds do not show the lead carries its tie.
pub fn losses(figures: &Figures) -> Vec<Loss> {
    let mut lost = Vec::new();
    for scenario in SCENARIOS {
        for n in threads_of(&figures.interleaved, scenario) {
            let get = |limiter: &str| interleaved(figures, scenario, limiter, n);
            let Some(ours) = get("turnstile") else {
                continue;
            };
            for rival in ["mutex-per-key", "global-lock", "governor"] {
                let Some(theirs) = get(rival).filter(|&theirs| theirs > ours) else {
                    continue;
                };
                let floor = Floor {
                    name: if scenario == "churn-allowed" {
                        CHURN_FLOOR
                    } else {
                        KEYED_FLOOR
                    },
                    ours: "turnstile",
                };
                lost.push(Loss {
                    what: format!(
                        "{scenario}, {n} thr: {rival} {} vs turnstile {} ({:.2}×)",
                        millions(theirs),
                        millions(ours),
                        theirs / ours
                    ),
                    cause: get("floor-stack")
                        .and_then(|f| by_floor(ours, theirs, f, &floor, rival))
                        .or_else(|| {
                            let manual = get("turnstile-manual")?;
                            by_forgetting(manual, theirs, get("floor-stack"), &floor, rival)
                        }),
                    tie: tied(&figures.interleaved, scenario, "turnstile", rival, n),
                });
            }
        }
    }
    for scenario in ["direct-allowed", "direct-denied"] {
        for n in threads_of(&figures.direct, scenario) {
            let get = |limiter: &str| find(&figures.direct, scenario, limiter, n);
            let Some(theirs) = get("governor") else {
                continue;
            };
            for ours in ["turnstile", "turnstile-gcra"] {
                let Some(mine) = get(ours).filter(|&mine| mine < theirs) else {
                    continue;
                };
                lost.push(Loss {
                    what: format!(
                        "{scenario}, {n} thr: governor {} vs {ours} {} ({:.2}×)",
                        millions(theirs),
                        millions(mine),
                        theirs / mine
                    ),
                    cause: get("floor-clock").and_then(|floor| {
                        let of = Floor {
                            name: "one clock reading alone",
                            ours,
                        };
                        by_floor(mine, theirs, floor, &of, "governor")
                    }),
                    tie: tied(&figures.direct, scenario, ours, "governor", n),
                });
            }
        }
    }
    for ours in figures.latency.iter().filter(|l| l.limiter == "turnstile") {
        for rival in ["mutex-per-key", "global-lock", "governor"] {
            let Some(theirs) = latency_of(figures, rival, &ours.pattern, ours.threads) else {
                continue;
            };
            let floor = latency_of(figures, "floor-stack", &ours.pattern, ours.threads);
            for (name, mine, their, floor) in [
                ("p99", ours.p99, theirs.p99, floor.map(|f| f.p99)),
                ("p99.9", ours.p999, theirs.p999, floor.map(|f| f.p999)),
            ] {
                if their >= mine {
                    continue;
                }
                // The floor's own tail no lower than the rival's, and ours within the
                // allowance of the floor's.
                let cause = floor
                    .filter(|&floor| tail_at_floor(mine, their, floor))
                    .map(|floor| {
                        format!(
                            "{} has a {name} of {floor} ns itself",
                            if ours.pattern == "churn" {
                                CHURN_FLOOR
                            } else {
                                KEYED_FLOOR
                            }
                        )
                    });
                lost.push(Loss {
                    what: format!(
                        "latency {name}, {} pattern, {} thr: {rival} {their} ns vs turnstile {mine} ns",
                        ours.pattern, ours.threads
                    ),
                    cause,
                    tie: None,
                });
            }
        }
    }
    for governor in figures.memory.iter().filter(|m| m.limiter == "governor") {
        let heap = |limiter: &str| {
            figures
                .memory
                .iter()
                .find(|m| m.limiter == limiter && m.key_type == governor.key_type)
                .map(|m| m.heap_per_key)
        };
        let Some(ours) = heap("turnstile").filter(|&ours| ours > governor.heap_per_key) else {
            continue;
        };
        // Sized for its keys up front, papaya's table is not the one a doubling left
        // half empty: what the growth costs, measured in the same run.
        let cause = heap("turnstile-presized")
            .filter(|&presized| presized <= governor.heap_per_key)
            .map(|presized| {
                format!(
                    "papaya's table grown by doubling from empty; built for its keys \
                     (`expected_keys`) the same limiter takes {presized:.1} B"
                )
            });
        lost.push(Loss {
            what: format!(
                "memory, {} keys: turnstile {ours:.1} heap bytes per key vs governor {:.1}",
                governor.key_type, governor.heap_per_key
            ),
            cause,
            tie: None,
        });
    }
    lost
}

/// What a lead is measured against: the floor's name in a cause, and the contender
/// of ours that lost (turnstile, or one of the direct limiters).
struct Floor<'a> {
    name: &'a str,
    ours: &'a str,
}

/// A rival's lead over ours explained by the floor ([`at_floor`]).
fn by_floor(ours: f64, theirs: f64, floor: f64, of: &Floor, rival: &str) -> Option<String> {
    let (mine, floors) = (ours / theirs, floor / theirs);
    at_floor(mine, floors).then(|| {
        format!(
            "{} itself reaches only {floors:.2}× {rival} here ({}: {mine:.2}×)",
            of.name, of.ours
        )
    })
}

/// A rival's lead explained by forgetting: turnstile forgets keys that went idle (its
/// memory bound), and the rivals keep every key; the same limiter with no sweeper
/// thread (`turnstile-manual`, which keeps every key too), measured in the same
/// rounds, reaches the rival or the floor's ratio to it.
fn by_forgetting(
    manual: f64,
    theirs: f64,
    floor: Option<f64>,
    of: &Floor,
    rival: &str,
) -> Option<String> {
    let reaches = manual >= WITHIN * theirs
        || floor.is_some_and(|floor| by_floor(manual, theirs, floor, of, rival).is_some());
    reaches.then(|| {
        let floors = floor
            .map(|floor| format!(", the floor {:.2}×", floor / theirs))
            .unwrap_or_default();
        format!(
            "forgetting idle keys (the sweeper thread's removals, on cores the requests \
             need; {rival} keeps every key): without its sweeper turnstile reaches {:.2}× \
             {rival}{floors}",
            manual / theirs
        )
    })
}

/// Whether a rival's lower tail (`theirs`, below `mine`) is one the floor's own tail
/// does not beat by more than the allowance either, with ours within the allowance
/// of the floor's: latencies are times, so the allowance divides.
fn tail_at_floor(mine: u64, theirs: u64, floor: u64) -> bool {
    at_floor(theirs as f64 / mine as f64, theirs as f64 / floor as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ratio_under_the_goal_is_at_the_floor_only_where_the_floor_cannot_win_either() {
        // The clock alone 1.02× the rival, ours 0.99×: all at the floor's speed.
        assert_eq!(
            Verdict::of(0.99, 1.0, Some(1.02), false),
            Verdict::AtTheFloor
        );
        // The floor 1.30× the rival: a check on the same parts can win, so a loss is one.
        assert_eq!(Verdict::of(0.99, 1.0, Some(1.30), false), Verdict::No);
        // The floor behind the rival, ours more than 5 % behind the floor.
        assert_eq!(Verdict::of(0.60, 1.0, Some(0.70), false), Verdict::No);
        assert_eq!(
            Verdict::of(0.67, 1.0, Some(0.70), false),
            Verdict::AtTheFloor
        );
        assert_eq!(Verdict::of(1.0, 1.0, Some(2.0), false), Verdict::Yes);
        // Rounds that cannot tell the two apart: a tie, whatever the floor says.
        assert_eq!(Verdict::of(0.99, 1.0, Some(1.30), true), Verdict::Tie);
        assert_eq!(Verdict::of(1.01, 1.0, None, true), Verdict::Yes);
    }

    #[test]
    fn a_tail_is_at_the_floor_when_the_floors_tail_is_no_better_than_the_rivals() {
        // Rival 4,025 ns, ours 5,899, the floor 12,311: the floor is slower still.
        assert!(tail_at_floor(5_899, 4_025, 12_311));
        // The floor's tail 90 ns under the rival's 110 ns and ours 380: not the floor.
        assert!(!tail_at_floor(380, 110, 90));
        // Ours more than 5 % above the floor's, which is no better than the rival's.
        assert!(!tail_at_floor(1_000, 800, 900));
    }

    #[test]
    fn a_row_is_missed_if_any_figure_is_and_else_says_what_explains_each_shortfall() {
        use Verdict::*;
        assert_eq!(
            Met::over(vec![(4, AtTheFloor), (8, No)]).cell(),
            "**no** (8 thr)"
        );
        assert_eq!(
            Met::over(vec![(1, AtTheFloor), (2, Yes), (4, AtTheFloor)]).cell(),
            "at the floor (1, 4 thr)"
        );
        assert_eq!(
            Met::over(vec![(1, AtTheFloor), (2, Tie), (8, Tie)]).cell(),
            "tie (2, 8 thr); at the floor (1 thr)"
        );
        assert_eq!(Met::over(vec![(1, Yes), (2, Yes)]).cell(), "yes");
        assert_eq!(Met::over(Vec::new()).cell(), "not measured");
        assert_eq!(Met::one(Some(Tie)).cell(), "tie");
        assert_eq!(Met::one(Some(No)).cell(), "**no**");
        assert_eq!(Met::one(None).cell(), "not measured");
    }

    fn rates(rounds: &[f64]) -> Throughput {
        figure("s", "l", rounds)
    }

    /// A figure at one thread whose median is the middle of `rounds`.
    fn figure(scenario: &str, limiter: &str, rounds: &[f64]) -> Throughput {
        let mut sorted = rounds.to_vec();
        sorted.sort_by(f64::total_cmp);
        Throughput {
            scenario: scenario.into(),
            limiter: limiter.into(),
            threads: 1,
            ops_per_sec: sorted.get(sorted.len() / 2).copied().unwrap_or(f64::NAN),
            rounds: rounds.to_vec(),
        }
    }

    #[test]
    fn a_lead_on_the_median_that_the_rounds_do_not_show_is_a_tie_not_a_loss() {
        let direct = |mix: &str, ours: &[f64], governor: &[f64]| {
            let scenario = format!("direct-{mix}");
            vec![
                figure(&scenario, "turnstile", ours),
                figure(&scenario, "governor", governor),
            ]
        };
        // Allowed: governor's median ahead (104 against 103), but ahead in only 4 of 7
        // rounds. Denied: governor ahead in all 7 rounds. Allowed at 2 threads:
        // governor's median 25 % ahead, in only 4 of 7 rounds: too large a lead for a
        // tie whatever the rounds say.
        let mut list = direct(
            "allowed",
            &[103.0, 105.0, 103.0, 104.0, 103.0, 105.0, 102.0],
            &[104.0, 104.0, 104.0, 103.0, 104.0, 104.0, 103.0],
        );
        list.extend(direct("denied", &[90.0; 7], &[100.0; 7]));
        let mut wide = direct(
            "allowed",
            &[80.0, 130.0, 80.0, 130.0, 80.0, 130.0, 79.0],
            &[100.0; 7],
        );
        wide.iter_mut().for_each(|figure| figure.threads = 2);
        list.extend(wide);
        let figures = Figures {
            throughput: Vec::new(),
            interleaved: Vec::new(),
            direct: list,
            latency: Vec::new(),
            memory: Vec::new(),
            churn_memory: Vec::new(),
            sweeps: Vec::new(),
        };
        let lost = losses(&figures);
        let at = |what: &str| lost.iter().find(|l| l.what.starts_with(what)).unwrap();
        assert_eq!(lost.len(), 3);
        assert_eq!(
            at("direct-allowed, 1 thr").tie,
            Some(Ahead { rounds: 4, of: 7 })
        );
        assert_eq!(at("direct-allowed, 2 thr").tie, None);
        assert_eq!(at("direct-denied, 1 thr").tie, None);
        // Rows: turnstile allowed at 1 and 2 threads, then denied at 1.
        let rows = direct_rows(&figures);
        assert_eq!(rows[0].met.cell(), "tie");
        assert_eq!(rows[1].met.cell(), "**no**");
        assert_eq!(rows[2].met.cell(), "**no**");
    }

    #[test]
    fn the_sign_test_counts_the_rounds_a_rival_won_and_the_chance_of_as_many() {
        let ours = rates(&[10.0, 10.0, 10.0, 10.0, 10.0, 10.0, 10.0]);
        // Ahead in every one of 7 rounds: a coin does that 1 time in 128.
        let all = Ahead::of(&ours, &rates(&[11.0; 7])).unwrap();
        assert_eq!(all, Ahead { rounds: 7, of: 7 });
        assert!((all.chance() - 1.0 / 128.0).abs() < 1e-12);
        assert!(all.measurable());
        // Ahead in 6 of 7: (7 + 1) / 128 = 6.25 %, not measurable.
        let six = Ahead::of(&ours, &rates(&[11.0, 11.0, 11.0, 9.0, 11.0, 11.0, 11.0])).unwrap();
        assert_eq!(six, Ahead { rounds: 6, of: 7 });
        assert!((six.chance() - 8.0 / 128.0).abs() < 1e-12);
        assert!(!six.measurable());
        // An equal round is won by neither and left out: 6 of 6, 1 in 64, measurable.
        let equal = Ahead::of(&ours, &rates(&[11.0, 11.0, 11.0, 10.0, 11.0, 11.0, 11.0]));
        assert_eq!(equal, Some(Ahead { rounds: 6, of: 6 }));
        assert!(equal.unwrap().measurable());
        // Four rounds: even a sweep (1 in 16) is not measurable, so no test at all.
        assert_eq!(Ahead::of(&rates(&[10.0; 4]), &rates(&[11.0; 4])), None);
        // 21 rounds (full mode): 15 is the fewest a coin gives under 5 % of the time.
        assert!(Ahead { rounds: 15, of: 21 }.measurable());
        assert!(!Ahead { rounds: 14, of: 21 }.measurable());
        assert_eq!(Ahead { rounds: 0, of: 21 }.chance(), 1.0);
        // No paired rounds (criterion's figures, or a count that differs): no test.
        assert_eq!(Ahead::of(&rates(&[]), &rates(&[])), None);
        assert_eq!(Ahead::of(&ours, &rates(&[11.0; 6])), None);
    }
}
