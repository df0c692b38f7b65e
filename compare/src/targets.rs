//! The targets of results/README.md, and the figures a rival won, each judged beside
//! the floor under it: what a check with no limiting logic at all reaches against
//! the same rival in the same run. Where even the floor cannot win, no limiter built on
//! the same parts could, and the table says so with the floor's figure beside ours.

use crate::report::{find, interleaved, millions};
use crate::runs::{Figures, Latency, Throughput};
use std::fmt::Write as _;

/// Reaching the floor: within this fraction of the floor's own ratio to a rival
/// (turnstile does the limiting on top of the floor's work, so it is never above it
/// by design; 5 % is the allowance).
const WITHIN: f64 = 0.95;

/// The keyed scenarios, in table order.
const KEYED: [&str; 7] = [
    "hot-allowed",
    "hot-denied",
    "uniform-allowed",
    "uniform-denied",
    "zipf-allowed",
    "zipf-denied",
    "churn-allowed",
];

/// What the floor under the keyed limiters is, in a loss's cause.
const KEYED_FLOOR: &str = "the floor (a clock reading, a papaya lookup and one CAS, no limiting)";
/// The same floor under churn, where every key is new.
const CHURN_FLOOR: &str = "the floor (papaya's bare insert-and-remove of each new key)";

/// One row of the targets table.
struct Row {
    target: String,
    measured: String,
    met: Option<bool>,
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

/// The thread counts at which a row failed, for its "met" cell.
fn verdict(failed: &[usize], measured_any: bool) -> Option<bool> {
    measured_any.then_some(failed.is_empty())
}

/// The targets table: issue 34's targets, each with the floor's own figure beside
/// ours, and the standing goals of earlier waves (churn, denial, memory).
pub fn table(figures: &Figures) -> String {
    let mut out = String::from("| target | measured (floor beside) | met |\n|---|---|---|\n");
    for row in rows(figures) {
        let met = match row.met {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "not measured",
        };
        let _ = writeln!(out, "| {} | {} | {met} |", row.target, row.measured);
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
                    met: ratio.map(|r| r >= 1.0),
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
    for scenario in KEYED {
        let mut cells = Vec::new();
        let mut failed = Vec::new();
        for n in threads_of(&figures.interleaved, scenario) {
            let get = |limiter: &str| interleaved(figures, scenario, limiter, n);
            let Some((ours, mutex)) = get("turnstile").zip(get("mutex-per-key")) else {
                continue;
            };
            let floor = get("floor-stack").map(|f| format!(" ({:.2}×)", f / mutex));
            cells.push(format!(
                "{n} thr: {:.2}×{}",
                ours / mutex,
                floor.unwrap_or_default()
            ));
            if ours < mutex {
                failed.push(n);
            }
        }
        rows.push(Row {
            target: format!("{scenario}: turnstile ≥ 1.0× mutex-per-key at every thread count"),
            measured: cells.join(" · "),
            met: verdict(&failed, !cells.is_empty()),
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
        let mut cells = Vec::new();
        let mut failed = Vec::new();
        for ours in figures
            .latency
            .iter()
            .filter(|l| l.limiter == "turnstile" && l.pattern == pattern)
        {
            let Some(mutex) = latency_of(figures, "mutex-per-key", pattern, ours.threads) else {
                continue;
            };
            let floor = latency_of(figures, "floor-stack", pattern, ours.threads)
                .map(|f| format!("; floor {} / {}", f.p99, f.p999))
                .unwrap_or_default();
            cells.push(format!(
                "{} thr: {} / {} ns vs {} / {}{floor}",
                ours.threads, ours.p99, ours.p999, mutex.p99, mutex.p999
            ));
            if ours.p99 > mutex.p99 || ours.p999 > mutex.p999 {
                failed.push(ours.threads);
            }
        }
        rows.push(Row {
            target: format!("{pattern}: turnstile's p99 / p99.9 ≤ mutex-per-key's"),
            measured: cells.join(" · "),
            met: verdict(&failed, !cells.is_empty()),
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
    KEYED
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
                met: ratios.map(|(ours, floor)| ours >= WITHIN * floor),
            }
        })
        .collect()
}

/// Goals of earlier waves that still stand: churn near papaya's own insertion, the
/// denial path no slower than the allow path, and memory per key.
fn standing_rows(figures: &Figures) -> Vec<Row> {
    let mut rows = Vec::new();
    let scenario = "churn-allowed";
    let mut cells = Vec::new();
    let mut failed = Vec::new();
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
        met: verdict(&failed, !cells.is_empty()),
    });
    for pattern in ["hot", "uniform", "zipf"] {
        let allowed = format!("{pattern}-allowed");
        let denied = format!("{pattern}-denied");
        let mut cells = Vec::new();
        let mut failed = Vec::new();
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
            met: verdict(&failed, !cells.is_empty()),
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
                met: both.map(|(t, g)| t <= g),
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
    for scenario in KEYED {
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
                    .filter(|&floor| floor >= their && mine as f64 * WITHIN <= floor as f64)
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

/// A rival's lead over ours explained by the floor: the floor itself is slower than
/// the rival, and ours reaches the floor's ratio to it within the allowance.
fn by_floor(ours: f64, theirs: f64, floor: f64, floor_name: &str, rival: &str) -> Option<String> {
    let (mine, floors) = (ours / theirs, floor / theirs);
    (floors < 1.0 && mine >= WITHIN * floors).then(|| {
        format!("{floor_name} reaches only {floors:.2}× {rival} here; turnstile {mine:.2}×")
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
