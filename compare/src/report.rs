//! results/: the CSV files and the markdown summary, and the terminal summary.

use crate::machine::Machine;
use crate::runs::{Figures, Throughput};
use crate::scenarios::{SCENARIOS, find, millions, ops};
use crate::targets;
use std::fmt::Write as _;
use std::path::Path;

/// Contenders in table order; floors last.
const CONTENDERS: [&str; 11] = [
    "turnstile",
    "turnstile-words",
    "turnstile-recent",
    "turnstile-manual",
    "mutex-per-key",
    "global-lock",
    "governor",
    "floor-stack",
    "floor-cas",
    "floor-clock",
    "floor-lookup",
];
/// The direct (unkeyed) limiters of benches/direct.rs.
const DIRECT: [&str; 4] = ["turnstile", "turnstile-gcra", "governor", "floor-clock"];
/// turnstile's algorithms, compared with one another (uniform pattern, 500 per ms).
const ALGORITHMS: [&str; 5] = [
    "token-bucket",
    "gcra",
    "fixed-window",
    "sliding-window",
    "sliding-log",
];

fn thread_counts(figures: &Figures) -> Vec<usize> {
    let mut counts: Vec<usize> = figures.throughput.iter().map(|t| t.threads).collect();
    counts.sort_unstable();
    counts.dedup();
    counts
}

/// One markdown table for `scenario`: `contenders` × thread counts, in millions of
/// checks per second, each with its ratio to `base`.
fn throughput_table(figures: &Figures, scenario: &str, contenders: &[&str], base: &str) -> String {
    let threads = thread_counts(figures);
    let mut out = format!("### {scenario}\n\n");
    let header: Vec<String> = threads.iter().map(|t| format!("{t} thr")).collect();
    let _ = writeln!(out, "| contender | {} |", header.join(" | "));
    let _ = writeln!(out, "|---|{}", "---|".repeat(threads.len()));
    for limiter in contenders {
        let cells: Vec<String> = threads
            .iter()
            .map(|&n| {
                match (
                    ops(figures, scenario, limiter, n),
                    ops(figures, scenario, base, n),
                ) {
                    (Some(v), Some(b)) if *limiter != base => {
                        format!("{} ({:.2}×)", millions(v), v / b)
                    }
                    (Some(v), _) => millions(v),
                    (None, _) => "–".to_string(),
                }
            })
            .collect();
        if cells.iter().any(|c| c != "–") {
            let _ = writeln!(out, "| {limiter} | {} |", cells.join(" | "));
        }
    }
    out
}

/// The comparison tables, each with turnstile's distance to the floor; then
/// turnstile's algorithms against each other.
fn throughput_tables(figures: &Figures) -> String {
    let mut out = String::new();
    for scenario in SCENARIOS {
        if !figures.throughput.iter().any(|t| t.scenario == scenario) {
            continue;
        }
        out += &throughput_table(figures, scenario, &CONTENDERS, "turnstile");
        let floor: Vec<String> = thread_counts(figures)
            .iter()
            .map(|&n| {
                match (
                    ops(figures, scenario, "floor-stack", n),
                    ops(figures, scenario, "turnstile", n),
                ) {
                    (Some(floor), Some(ours)) => format!("{:.2}×", floor / ours),
                    _ => "–".to_string(),
                }
            })
            .collect();
        let _ = writeln!(
            out,
            "| *turnstile time ÷ floor-stack time* | {} |\n",
            floor.join(" | ")
        );
    }
    for scenario in ["algorithms-allowed", "algorithms-denied"] {
        if figures.throughput.iter().any(|t| t.scenario == scenario) {
            out += &throughput_table(figures, scenario, &ALGORITHMS, "token-bucket");
            out.push('\n');
        }
    }
    out += &direct_tables(figures);
    out
}

/// Interleaved medians from `list`, one table per scenario that has any: `contenders` ×
/// thread counts, each with its ratio to `base`.
fn medians_tables(
    list: &[Throughput],
    scenarios: &[&str],
    contenders: &[&str],
    base: &str,
) -> String {
    let mut out = String::new();
    for &scenario in scenarios {
        let mut threads: Vec<usize> = list
            .iter()
            .filter(|t| t.scenario == scenario)
            .map(|t| t.threads)
            .collect();
        if threads.is_empty() {
            continue;
        }
        threads.sort_unstable();
        threads.dedup();
        let header: Vec<String> = threads.iter().map(|t| format!("{t} thr")).collect();
        let _ = writeln!(
            out,
            "### {scenario} (interleaved)\n\n| contender | {} |",
            header.join(" | ")
        );
        let _ = writeln!(out, "|---|{}", "---|".repeat(threads.len()));
        for &limiter in contenders {
            let cells: Vec<String> = threads
                .iter()
                .map(|&n| {
                    match (
                        find(list, scenario, limiter, n),
                        find(list, scenario, base, n),
                    ) {
                        (Some(v), Some(b)) if limiter != base => {
                            format!("{} ({:.2}×)", millions(v), v / b)
                        }
                        (Some(v), _) => millions(v),
                        (None, _) => "–".to_string(),
                    }
                })
                .collect();
            if cells.iter().any(|c| c != "–") {
                let _ = writeln!(out, "| {limiter} | {} |", cells.join(" | "));
            }
        }
        out.push('\n');
    }
    out
}

/// The interleaved medians of benches/ratios.rs, one table per scenario, ratios to
/// turnstile.
fn interleaved_tables(figures: &Figures) -> String {
    medians_tables(&figures.interleaved, &SCENARIOS, &CONTENDERS, "turnstile")
}

/// The direct limiters' interleaved medians, one table per mix, ratios to governor.
fn direct_tables(figures: &Figures) -> String {
    let scenarios = ["direct-allowed", "direct-denied"];
    medians_tables(&figures.direct, &scenarios, &DIRECT, "governor")
}

fn latency_table(figures: &Figures) -> String {
    let mut out = String::from(
        "| contender | pattern | threads | p50 | p99 | p99.9 | max | of the max, preempted |\n|---|---|---|---|---|---|---|---|\n",
    );
    for l in &figures.latency {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} ns | {} ns | {} ns | {} ns | {} |",
            l.limiter,
            l.pattern,
            l.threads,
            l.p50,
            l.p99,
            l.p999,
            l.max,
            l.max_preempted
                .map_or("–".to_string(), |(least, most)| format!(
                    "{least}–{most} ns"
                ))
        );
    }
    out
}

fn memory_table(figures: &Figures) -> String {
    let mut out = String::from(
        "| contender | key type | keys | heap bytes/key | RSS bytes/key |\n|---|---|---|---|---|\n",
    );
    for m in &figures.memory {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.1} | {:.1} |",
            m.limiter, m.key_type, m.keys, m.heap_per_key, m.rss_per_key
        );
    }
    out
}

fn churn_memory_table(figures: &Figures) -> String {
    let mut out = String::from(
        "| contender | request threads | keys streamed | peak keys held | keys held at the end \
         | peak heap (streaming thread) | heap at the end | peak resident-set growth \
         | stream wall time |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    let megabytes =
        |bytes: Option<f64>| bytes.map_or("–".into(), |b| format!("{:.1} MB", b / 1e6));
    for c in &figures.churn_memory {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {:.1} MB | {} |",
            c.limiter,
            c.threads,
            c.keys_streamed,
            c.peak_keys,
            c.end_keys.map_or("–".into(), |keys| keys.to_string()),
            megabytes(c.peak_heap.map(|b| b as f64)),
            megabytes(c.end_heap.map(|b| b as f64)),
            c.peak_rss as f64 / 1e6,
            c.stream_secs.map_or("–".into(), |secs| format!(
                "{secs:.2} s ({:.2} M keys/s)",
                c.keys_streamed as f64 / secs / 1e6
            )),
        );
    }
    out.push_str(
        "\nThe heap is counted per thread: with one request thread, that count misses what \
         turnstile's sweeper thread frees and counts what the streaming thread frees of \
         others' allocations (it can end below zero); with several there is no one streaming \
         thread, and the heap is not given (–). Compare the resident set.\n",
    );
    out
}

fn sweep_table(figures: &Figures) -> String {
    let mut out =
        String::from("| keys held | forgettable | pause | per key |\n|---|---|---|---|\n");
    for p in &figures.sweeps {
        let _ = writeln!(
            out,
            "| {} | {} | {:.1} ms | {:.0} ns |",
            p.keys,
            p.forgettable,
            p.pause_ms,
            p.pause_ms * 1e6 / p.keys as f64
        );
    }
    out
}

fn write_file(path: &Path, contents: &str) -> Result<(), String> {
    std::fs::write(path, contents).map_err(|e| format!("write {}: {e}", path.display()))
}

pub fn write(out: &Path, machine: &Machine, figures: &Figures, full: bool) -> Result<(), String> {
    let head = format!(
        "# {}; {} mode\n",
        machine.line(),
        if full { "full" } else { "quick" }
    );

    let mut csv = head.clone() + "scenario,limiter,threads,ops_per_sec\n";
    for t in &figures.throughput {
        let _ = writeln!(
            csv,
            "{},{},{},{:.0}",
            t.scenario, t.limiter, t.threads, t.ops_per_sec
        );
    }
    write_file(&out.join("throughput.csv"), &csv)?;

    for (name, list) in [
        ("ratios.csv", &figures.interleaved),
        ("direct.csv", &figures.direct),
    ] {
        let mut csv =
            head.clone() + "scenario,limiter,threads,median_ops_per_sec,rounds,round_ops_per_sec\n";
        for t in list {
            let rounds: Vec<String> = t.rounds.iter().map(|r| format!("{r:.0}")).collect();
            let _ = writeln!(
                csv,
                "{},{},{},{:.0},{},{}",
                t.scenario,
                t.limiter,
                t.threads,
                t.ops_per_sec,
                rounds.len(),
                rounds.join(" ")
            );
        }
        write_file(&out.join(name), &csv)?;
    }

    let mut csv = head.clone()
        + "limiter,pattern,threads,calls,p50_ns,p99_ns,p999_ns,max_ns,\
           max_preempted_at_least_ns,max_preempted_at_most_ns\n";
    for l in &figures.latency {
        let (least, most) = l.max_preempted.map_or_else(
            || ("-".to_string(), "-".to_string()),
            |(least, most)| (least.to_string(), most.to_string()),
        );
        let _ = writeln!(
            csv,
            "{},{},{},{},{},{},{},{},{least},{most}",
            l.limiter, l.pattern, l.threads, l.calls, l.p50, l.p99, l.p999, l.max
        );
    }
    write_file(&out.join("latency.csv"), &csv)?;

    let mut csv = head.clone() + "limiter,key_type,keys,heap_bytes_per_key,rss_bytes_per_key\n";
    for m in &figures.memory {
        let _ = writeln!(
            csv,
            "{},{},{},{:.1},{:.1}",
            m.limiter, m.key_type, m.keys, m.heap_per_key, m.rss_per_key
        );
    }
    write_file(&out.join("memory.csv"), &csv)?;

    let mut csv = head.clone()
        + "limiter,threads,keys_streamed,peak_keys,end_keys,peak_heap_bytes,end_heap_bytes,\
           peak_rss_growth_bytes,stream_secs\n";
    let or_dash = |field: Option<String>| field.unwrap_or_else(|| "-".into());
    for c in &figures.churn_memory {
        let _ = writeln!(
            csv,
            "{},{},{},{},{},{},{},{},{}",
            c.limiter,
            c.threads,
            c.keys_streamed,
            c.peak_keys,
            or_dash(c.end_keys.map(|k| k.to_string())),
            or_dash(c.peak_heap.map(|b| b.to_string())),
            or_dash(c.end_heap.map(|b| b.to_string())),
            c.peak_rss,
            or_dash(c.stream_secs.map(|s| format!("{s:.3}")))
        );
    }
    write_file(&out.join("churn_memory.csv"), &csv)?;

    let mut csv = head.clone() + "keys,forgettable,pause_ms\n";
    for p in &figures.sweeps {
        let _ = writeln!(csv, "{},{},{:.2}", p.keys, p.forgettable, p.pause_ms);
    }
    write_file(&out.join("sweep.csv"), &csv)?;

    let (tied, lost): (Vec<_>, Vec<_>) = targets::losses(figures)
        .into_iter()
        .partition(|l| l.tie.is_some());
    let where_we_lose = if lost.is_empty() {
        "No rival beat turnstile measurably on any figure of this run.\n".to_string()
    } else {
        let unexplained = lost.iter().filter(|l| l.cause.is_none()).count();
        format!(
            "In this run a rival beat turnstile (default clock) on {} figures: {} with a \
             cause measured in the same rounds (given: the floor's own figure against the \
             rival, or turnstile's without its sweeper thread), and {unexplained} whose \
             causes ANALYSIS.md gives (its last section, \"Where we lose, line by line\", \
             for this run):\n\n{}\n",
            lost.len(),
            lost.len() - unexplained,
            lost.iter()
                .map(|l| match &l.cause {
                    Some(cause) => format!("- {}: {cause}.", l.what),
                    None => format!("- {}: see ANALYSIS.md.", l.what),
                })
                .collect::<Vec<_>>()
                .join("\n")
        )
    };
    let ties = if tied.is_empty() {
        String::new()
    } else {
        format!(
            "### Ties\n\n\
             {} where a rival's median was ahead, with turnstile's within 5 % of it \
             (at least 0.95×), but the rival won too few of the rounds to rule out \
             chance: in the rounds where both ran (each \
             round runs every contender once, so the two rates of one round are a pair), \
             a rival no faster than turnstile would have won as many at least {:.0} % of \
             the time (a one-sided sign test). These are not counted as losses:\n\n{}\n\n",
            if tied.len() == 1 {
                "One figure".to_string()
            } else {
                format!("{} figures", tied.len())
            },
            100.0 * targets::SIGNIFICANCE,
            tied.iter()
                .map(|l| {
                    let ahead = l.tie.expect("partitioned on the tie");
                    format!(
                        "- {}: ahead in {} of {} rounds{}.",
                        l.what,
                        ahead.rounds,
                        ahead.of,
                        l.cause
                            .as_ref()
                            .map(|cause| format!("; {cause}"))
                            .unwrap_or_default()
                    )
                })
                .collect::<Vec<_>>()
                .join("\n")
        )
    };
    let analysis = if out.join("ANALYSIS.md").is_file() {
        "Why, from profiles: see [ANALYSIS.md](ANALYSIS.md).\n"
    } else {
        ""
    };
    let markdown = format!(
        "# turnstile benchmark results\n\n\
         Generated by `cargo run --release -p compare{}` — do not edit by hand.\n\n\
         - {}\n- mode: {}\n\n\
         Throughput is aggregate checks per second across all threads (criterion median); \
         ratios in parentheses are each contender's throughput ÷ turnstile's. \
         `turnstile` uses the default `QuantaClock`; `turnstile-recent` the cheapest clock, \
         `RecentClock` (1 ms refresh); `turnstile-manual` the default with no sweeper \
         thread, which keeps every key as the rivals do (zipf and churn, where keys go \
         idle long enough to be forgotten). Floors: `floor-stack` is a clock reading + a \
         lock-free lookup in a papaya map of words (the default store's map, bare; under \
         churn it inserts each new key and removes the one 100,000 behind) + one CAS with no \
         limiting logic; `turnstile-words` is turnstile on the opt-in word store; `floor-cas` is one CAS on a \
         pre-resolved word; `floor-clock` (one clock reading) and `floor-lookup` (one \
         lookup) are its other parts alone, measured once (uniform allowed). \
         Allowed mix: a burst of `u32::MAX` per key; denied mix: one \
         token an hour, taken before measuring. The machine is shared: compare ratios \
         within this run, not across runs.\n\n\
         ![throughput vs threads](throughput.svg)\n\n\
         ## Targets\n\n\
         Judged on interleaved medians (`benches/ratios.rs`, `benches/direct.rs`): \
         every contender, under both outcome mixes (churn: allowed only, an empty limiter \
         for every sample), on every pattern and thread count, runs a short sample in \
         turn, round after round, so all of them meet the same drift of this shared \
         machine; the back-to-back criterion tables further down can land in different \
         weather. Beside each of turnstile's figures, the floor's own figure against the \
         same rival in the same rounds: `floor-stack` (a clock reading, a papaya lookup and \
         one CAS, no limiting logic) for the keyed limiters, the clock alone for the \
         direct ones. Where the floor itself does not beat a rival, no check built on the \
         same clock and map could, and the target becomes the floor's ratio (within 5 %). \
         A \"tie\" is a rival ahead on the median, with turnstile within 5 % of it, but \
         in too few of the paired rounds to rule out chance (\"Ties\", under \"Where we \
         lose\"). Only throughput against a rival can tie: the losses listed there, \
         and the target rows of direct limiters against governor's and keyed ones \
         against the per-key mutex; the rows of turnstile ÷ the global lock at one \
         thread, churn against papaya's insert-and-remove, denial against allowing, \
         latency and memory are judged as measured. \
         With 2 cores, 4 and 8 threads measure time-slicing, not more parallelism.\n\n{}\n{}\
         ## Where we lose\n\n{}\n{}\n{}\
         ## Throughput\n\n\
         The algorithms tables put turnstile's algorithms side by side on the uniform \
         pattern under a quota every one of them holds (500 per millisecond per key; one \
         an hour for the denied mix), ratios to the token bucket. The direct tables \
         (`benches/direct.rs`, interleaved medians) put the unkeyed limiters side by \
         side, every thread checking the one limit (burst `u32::MAX`; one an hour for \
         the denied mix), ratios to governor's direct limiter, with one clock reading \
         alone (`floor-clock`) beside them.\n\n{}\
         ## Latency per call (HDR histogram; TSC-timed, includes ~10–20 ns of timer overhead)\n\n\
         Churn runs 3 s per contender in either mode (a fresh limiter, every call a new key): \
         past turnstile's first 1 s margin, so that its sweeps are in the figures, and \
         over 2M keys or more. The last column is how much of the slowest call its thread \
         spent preempted, runnable but waiting for a CPU, at least and at most (the kernel's \
         schedstat account of the thread, read around every 1,024 calls and after any call \
         over 100 µs); with more busy threads than cores a maximum of milliseconds is mostly \
         that wait, whatever the contender.\n\n{}\n\
         ## Memory per key\n\n\
         Heap: every byte allocated while inserting the keys (limiter, map, owned keys), \
         counted by a global allocator. RSS: growth of the resident set.\n\n{}\n\
         ## Memory under key churn\n\n\
         Distinct keys streamed through once each, a simulated clock advancing 10 µs per key, \
         quota 10 tokens + 1 per ms, from 1 and from 2 request threads: with N, each thread \
         checks every Nth key and advances the shared clock 10 µs per key it checks, so the \
         clock moves 10 µs per key overall and about 100,000 keys carry information at any \
         moment whatever N is. turnstile forgets idle keys by itself (default 1 s margin; \
         `turnstile-capped` also holds at most 250,000 keys); governor keeps every key until \
         `retain_recent` is called. The wall time runs from the request threads' release to \
         the last one's end; each stream is one run in its own process (`memory --stream \
         LIMITER THREADS` repeats one).\n\n{}\n\
         ## Sweep pause\n\n\
         Automatic sweeps run on the limiter's own sweeper thread, so no request pays \
         this pause, and on the default store (papaya) no request waits for a sweep at \
         all (`tests/stall.rs`). `evict_idle()` over a map of token buckets, called on \
         the measuring thread:\n\n{}",
        if full { " -- --full" } else { "" },
        machine.line(),
        if full { "full" } else { "quick" },
        targets::table(figures),
        interleaved_tables(figures),
        where_we_lose,
        analysis,
        ties,
        throughput_tables(figures),
        latency_table(figures),
        memory_table(figures),
        churn_memory_table(figures),
        sweep_table(figures),
    );
    write_file(&out.join("README.md"), &markdown)
}

/// What the terminal shows at the end of a run.
pub fn summary(figures: &Figures) -> String {
    format!(
        "{}\nTargets:\n\n{}",
        throughput_tables(figures),
        targets::table(figures)
    )
}
