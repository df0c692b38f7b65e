//! The targets of results/README.md, and the figures a rival won, each judged beside
//! the floor under it: what a check with no limiting logic at all reaches against
//! the same rival in the same run. Where even the floor cannot win, no limiter built on
//! the same parts could, and the table says so with the floor's figure beside ours.

use crate::report::{SCENARIOS, find, interleaved, millions};
use crate::runs::{Figures, Latency, Throughput};
use std::fmt::Write as _;

/// Reaching the floor: within this fraction of the floor's own ratio to a rival
/// (turnstile does the limiting on top of the floor's work, so it is never above it
/// by design; 5 % is the allowance).
const WITHIN: f64 = 0.95;

/// What the floor under the keyed limiters is, in a loss's cause.
const KEYED_FLOOR: &str = "the floor (a clock reading, a papaya lookup and one CAS, no limiting)";
/// The same floor under churn, where every key is new.
const CHURN_FLOOR: &str = "the floor (papaya's bare insert-and-remove of each new key)";

/// One row of the targets table.
struct Row {
    target: String,
    measured: String,
    met: Met,
}

/// Whether a target was met, for its "met" cell.
enum Met {
    /// Not in this run's figures.
    NotMeasured,
    Yes,
    /// Missed only where the floor itself cannot do better: the floor is within the
    /// allowance of the rival (or behind it), and turnstile within the allowance of
    /// the floor. The thread counts where that was so, if the row has several.
    AtTheFloor(Vec<usize>),
    /// Missed by more than the floor explains, at these thread counts.
    No(Vec<usize>),
}

impl Met {
    /// A single figure's verdict: `ours` is turnstile's ratio to the rival (or to the
    /// goal), `floor` the floor's, where the run has one.
    fn of(ours: Option<f64>, goal: f64, floor: Option<f64>) -> Self {
        match ours {
            None => Met::NotMeasured,
            Some(ours) if ours >= goal => Met::Yes,
            Some(ours) if floor.is_some_and(|floor| at_floor(ours, floor)) => {
                Met::AtTheFloor(Vec::new())
            }
            Some(_) => Met::No(Vec::new()),
        }
    }

    /// A row over thread counts: missed at `failed`, at the floor at `floored`.
    fn over(measured_any: bool, failed: Vec<usize>, floored: Vec<usize>) -> Self {
        match (measured_any, failed.is_empty(), floored.is_empty()) {
            (false, _, _) => Met::NotMeasured,
            (true, false, _) => Met::No(failed),
            (true, true, false) => Met::AtTheFloor(floored),
            (true, true, true) => Met::Yes,
        }
    }

    fn cell(&self) -> String {
        let threads = |counts: &[usize]| {
            if counts.is_empty() {
                String::new()
            } else {
                let list: Vec<String> = counts.iter().map(|n| format!("{n}")).collect();
                format!(" ({} thr)", list.join(", "))
            }
        };
        match self {
            Met::NotMeasured => "not measured".into(),
            Met::Yes => "yes".into(),
            Met::AtTheFloor(counts) => format!("at the floor{}", threads(counts)),
            Met::No(counts) => format!("**no**{}", threads(counts)),
        }
    }
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
                    met: Met::of(ratio, 1.0, clock),
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
        let (mut cells, mut failed, mut floored) = (Vec::new(), Vec::new(), Vec::new());
        for n in threads_of(&figures.interleaved, scenario) {
            let get = |limiter: &str| interleaved(figures, scenario, limiter, n);
            let Some((ours, mutex)) = get("turnstile").zip(get("mutex-per-key")) else {
                continue;
            };
            let floor = get("floor-stack").map(|f| f / mutex);
            cells.push(format!(
                "{n} thr: {:.2}×{}",
                ours / mutex,
                floor.map(|f| format!(" ({f:.2}×)")).unwrap_or_default()
            ));
            match Met::of(Some(ours / mutex), 1.0, floor) {
                Met::AtTheFloor(_) => floored.push(n),
                Met::No(_) => failed.push(n),
                Met::Yes | Met::NotMeasured => {}
            }
        }
        rows.push(Row {
            target: format!("{scenario}: turnstile ≥ 1.0× mutex-per-key at every thread count"),
            measured: cells.join(" · "),
            met: Met::over(!cells.is_empty(), failed, floored),
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
        let (mut cells, mut failed, mut floored) = (Vec::new(), Vec::new(), Vec::new());
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
            if missed.iter().any(|&floored| !floored) {
                failed.push(ours.threads);
            } else if !missed.is_empty() {
                floored.push(ours.threads);
            }
        }
        rows.push(Row {
            target: format!("{pattern}: turnstile's p99 / p99.9 ≤ mutex-per-key's"),
            measured: cells.join(" · "),
            met: Met::over(!cells.is_empty(), failed, floored),
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
                    format!(
                        "{ours:.2}× (floor-stack: {floor:.2}×, so ≥ {:.2}×)",
                        WITHIN * floor
                    )
                }),
                met: match ratios {
                    None => Met::NotMeasured,
                    Some((ours, floor)) if ours >= WITHIN * floor => Met::Yes,
                    Some(_) => Met::No(Vec::new()),
                },
            }
        })
        .collect()
}

/// Goals of earlier waves that still stand: churn near papaya's own insertion, the
/// denial path no slower than the allow path, and memory per key.
fn standing_rows(figures: &Figures) -> Vec<Row> {
    let mut rows = Vec::new();
    let scenario = "churn-allowed";
    let (mut cells, mut failed) = (Vec::new(), Vec::new());
    for n in threads_of(&figures.interleaved, scenario) {
        let get = |limiter: &str| interleaved(figures, scenario, limiter, n);
        if let Some((ours, floor)) = get("turnstile").zip(get("floor-stack")) {
            cells.push(format!("{n} thr: {:.2}×", ours / floor));
            if ours < 0.9 * floor {
                failed.push(n);
            }
        }
    }
    rows.push(Row {
        target: "churn-allowed: turnstile ≥ 0.9× papaya's bare insert-and-remove".into(),
        measured: cells.join(" · "),
        met: Met::over(!cells.is_empty(), failed, Vec::new()),
    });
    for pattern in ["hot", "uniform", "zipf"] {
        let allowed = format!("{pattern}-allowed");
        let denied = format!("{pattern}-denied");
        let (mut cells, mut failed) = (Vec::new(), Vec::new());
        for n in threads_of(&figures.interleaved, &allowed) {
            let a = interleaved(figures, &allowed, "turnstile", n);
            let d = interleaved(figures, &denied, "turnstile", n);
            if let Some((a, d)) = a.zip(d) {
                cells.push(format!("{n} thr: {:.2}", d / a));
                if d < a {
                    failed.push(n);
                }
            }
        }
        rows.push(Row {
            target: format!("{pattern}: the denial path at least as fast as the allow path"),
            measured: format!("denied ÷ allowed: {}", cells.join(" · ")),
            met: Met::over(!cells.is_empty(), failed, Vec::new()),
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
                met: match both {
                    None => Met::NotMeasured,
                    Some((t, g)) if t <= g => Met::Yes,
                    Some(_) => Met::No(Vec::new()),
                },
            });
        }
    }
    rows
}

/// A figure a rival won, and its cause where the run's own figures give one.
pub struct Loss {
    pub what: String,
    pub cause: Option<String>,
}

/// Every figure of the run where a rival out-ran turnstile (default clock):
/// throughput (interleaved medians), direct limiters, latency, memory.
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
                let floor_name = if scenario == "churn-allowed" {
                    CHURN_FLOOR
                } else {
                    KEYED_FLOOR
                };
                lost.push(Loss {
                    what: format!(
                        "{scenario}, {n} thr: {rival} {} vs turnstile {} ({:.2}×)",
                        millions(theirs),
                        millions(ours),
                        theirs / ours
                    ),
                    cause: get("floor-stack")
                        .and_then(|floor| by_floor(ours, theirs, floor, floor_name, rival))
                        .or_else(|| {
                            let manual = get("turnstile-manual")?;
                            by_forgetting(manual, theirs, get("floor-stack"), floor_name, rival)
                        }),
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
                        by_floor(mine, theirs, floor, "one clock reading alone", "governor")
                    }),
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
        });
    }
    lost
}

/// A rival's lead over ours explained by the floor ([`at_floor`]).
fn by_floor(ours: f64, theirs: f64, floor: f64, floor_name: &str, rival: &str) -> Option<String> {
    let (mine, floors) = (ours / theirs, floor / theirs);
    at_floor(mine, floors).then(|| {
        format!(
            "{floor_name} itself reaches only {floors:.2}× {rival} here (turnstile: {mine:.2}×)"
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
    floor_name: &str,
    rival: &str,
) -> Option<String> {
    let reaches = manual >= WITHIN * theirs
        || floor.is_some_and(|floor| by_floor(manual, theirs, floor, floor_name, rival).is_some());
    reaches.then(|| {
        format!(
            "forgetting idle keys (the sweeper thread's removals, on cores the requests \
             need; {rival} keeps every key): without its sweeper turnstile reaches {:.2}× {rival}",
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
        assert!(matches!(
            Met::of(Some(0.99), 1.0, Some(1.02)),
            Met::AtTheFloor(_)
        ));
        // The floor 1.30× the rival: a check on the same parts can win, so a loss is one.
        assert!(matches!(Met::of(Some(0.99), 1.0, Some(1.30)), Met::No(_)));
        // The floor behind the rival, ours more than 5 % behind the floor.
        assert!(matches!(Met::of(Some(0.60), 1.0, Some(0.70)), Met::No(_)));
        assert!(matches!(
            Met::of(Some(0.67), 1.0, Some(0.70)),
            Met::AtTheFloor(_)
        ));
        assert!(matches!(Met::of(Some(1.0), 1.0, Some(2.0)), Met::Yes));
        assert!(matches!(Met::of(None, 1.0, Some(2.0)), Met::NotMeasured));
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
    fn a_row_over_thread_counts_is_missed_if_any_count_is_missed_beyond_the_floor() {
        assert_eq!(Met::over(true, vec![8], vec![4]).cell(), "**no** (8 thr)");
        assert_eq!(
            Met::over(true, Vec::new(), vec![1, 4]).cell(),
            "at the floor (1, 4 thr)"
        );
        assert_eq!(Met::over(true, Vec::new(), Vec::new()).cell(), "yes");
        assert_eq!(
            Met::over(false, Vec::new(), Vec::new()).cell(),
            "not measured"
        );
    }
}
