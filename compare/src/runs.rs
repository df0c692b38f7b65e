//! Builds and runs the bench binaries, then reads back their figures.

use crate::Options;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Aggregate checks per second of one contender in one scenario at one thread count.
pub struct Throughput {
    pub scenario: String,
    pub limiter: String,
    pub threads: usize,
    pub ops_per_sec: f64,
    /// Every round's rate, in round order, for an interleaved figure (benches/ratios.rs,
    /// benches/direct.rs: the same round's rates of two contenders are a pair); empty
    /// for criterion's.
    pub rounds: Vec<f64>,
}

/// Per-call latency percentiles, in nanoseconds.
pub struct Latency {
    pub limiter: String,
    pub pattern: String,
    pub threads: usize,
    pub calls: u64,
    pub p50: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
    /// Of the slowest call, at least and at most this long was spent preempted
    /// (runnable, waiting for a CPU); `None` where the kernel keeps no such account.
    pub max_preempted: Option<(u64, u64)>,
}

/// Bytes per key after inserting `keys` keys.
pub struct Memory {
    pub limiter: String,
    pub key_type: String,
    pub keys: u64,
    pub heap_per_key: f64,
    pub rss_per_key: f64,
}

/// Distinct keys streamed through once each, from one or more request threads: the
/// most keys held at once, the keys held at the end, the process's peak memory and
/// the stream's wall time (benches/memory.rs).
pub struct ChurnMemory {
    pub limiter: String,
    /// Request threads the keys were split between (1 in rows from before the column).
    pub threads: usize,
    pub keys_streamed: u64,
    pub peak_keys: u64,
    /// Keys held when the last request thread finished; `None` in rows from before
    /// the column.
    pub end_keys: Option<u64>,
    /// The streaming thread's peak heap and its heap at the end: `None` with several
    /// request threads, where the per-thread count tells no process's figure.
    pub peak_heap: Option<u64>,
    pub end_heap: Option<i64>,
    /// Growth of the process's peak resident set: unlike the heap counter, which
    /// counts per thread, it sees memory freed by turnstile's sweeper thread and
    /// allocated by every request thread.
    pub peak_rss: u64,
    /// Wall time of the stream, from the request threads' release to the last one's
    /// end; `None` in rows from before the column.
    pub stream_secs: Option<f64>,
}

/// How long one sweep over many keys holds up the call that runs it.
pub struct SweepPause {
    pub keys: u64,
    pub forgettable: String,
    pub pause_ms: f64,
}

pub struct Figures {
    pub throughput: Vec<Throughput>,
    /// Interleaved medians (benches/ratios.rs): what the targets are judged on.
    pub interleaved: Vec<Throughput>,
    /// Interleaved medians of the direct limiters (benches/direct.rs).
    pub direct: Vec<Throughput>,
    pub latency: Vec<Latency>,
    pub memory: Vec<Memory>,
    pub churn_memory: Vec<ChurnMemory>,
    pub sweeps: Vec<SweepPause>,
}

const BENCHES: [&str; 5] = ["throughput", "direct", "ratios", "latency", "memory"];

/// The workspace root: the parent of this crate.
fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("compare/ has a parent")
        .to_path_buf()
}

/// Paths of the bench executables, built now or found in `--bin-dir`.
fn bench_executables(options: &Options) -> Result<Vec<(String, PathBuf)>, String> {
    if let Some(dir) = &options.bin_dir {
        return BENCHES
            .iter()
            .map(|name| {
                let path = dir.join(name);
                path.is_file()
                    .then(|| (name.to_string(), path.clone()))
                    .ok_or_else(|| format!("{} missing", path.display()))
            })
            .collect();
    }
    eprintln!("building the benchmarks (release)…");
    let mut cargo = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cargo.current_dir(workspace_root()).args([
        "bench",
        "-p",
        "turnstile-ratelimit",
        "--no-run",
        "--message-format=json",
    ]);
    for name in BENCHES {
        cargo.args(["--bench", name]);
    }
    let output = cargo
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("run cargo: {e}"))?;
    if !output.status.success() {
        return Err("building the benchmarks failed".into());
    }
    let mut found = Vec::new();
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let Ok(message) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let name = message["target"]["name"].as_str().unwrap_or_default();
        if let (true, Some(exe)) = (BENCHES.contains(&name), message["executable"].as_str()) {
            found.push((name.to_string(), PathBuf::from(exe)));
        }
    }
    if found.len() != BENCHES.len() {
        return Err(format!(
            "expected {} bench executables, cargo reported {}",
            BENCHES.len(),
            found.len()
        ));
    }
    Ok(found)
}

/// Where the bench binaries write their figures (and criterion its own).
pub fn scratch() -> PathBuf {
    workspace_root().join("target/turnstile-bench")
}

/// Runs every bench binary with the mode's settings and collects the figures.
pub fn run_suite(options: &Options) -> Result<Figures, String> {
    let scratch = scratch();
    let criterion_home = scratch.join("criterion");
    let _ = std::fs::remove_dir_all(&criterion_home);
    std::fs::create_dir_all(&scratch).map_err(|e| format!("create {}: {e}", scratch.display()))?;
    for (name, exe) in bench_executables(options)? {
        eprintln!("running {name}…");
        let mut command = Command::new(&exe);
        command
            .arg("--bench")
            .current_dir(workspace_root())
            .env(
                "TURNSTILE_BENCH_MODE",
                if options.full { "full" } else { "quick" },
            )
            .env("TURNSTILE_BENCH_OUT", &scratch)
            .env("CRITERION_HOME", &criterion_home);
        if let Some(threads) = &options.threads {
            command.env("TURNSTILE_BENCH_THREADS", threads);
        }
        let status = command
            .status()
            .map_err(|e| format!("run {}: {e}", exe.display()))?;
        if !status.success() {
            return Err(format!("{name} failed: {status}"));
        }
    }
    last_figures()
}

/// The figures the last run left in the scratch folder (`--report-only`).
pub fn last_figures() -> Result<Figures, String> {
    let scratch = scratch();
    Ok(Figures {
        throughput: read_criterion(&scratch.join("criterion"))?,
        interleaved: read_csv(&scratch.join("ratios.csv"), parse_interleaved)?,
        direct: read_csv(&scratch.join("direct.csv"), parse_interleaved)?,
        latency: read_csv(&scratch.join("latency.csv"), |f| Latency {
            limiter: f[0].to_string(),
            pattern: f[1].to_string(),
            threads: f[2].parse().unwrap_or(0),
            calls: f[3].parse().unwrap_or(0),
            p50: f[4].parse().unwrap_or(0),
            p99: f[5].parse().unwrap_or(0),
            p999: f[6].parse().unwrap_or(0),
            max: f[7].parse().unwrap_or(0),
            max_preempted: f
                .get(8)
                .zip(f.get(9))
                .and_then(|(least, most)| Some((least.parse().ok()?, most.parse().ok()?))),
        })?,
        memory: read_csv(&scratch.join("memory.csv"), |f| Memory {
            limiter: f[0].to_string(),
            key_type: f[1].to_string(),
            keys: f[2].parse().unwrap_or(0),
            heap_per_key: f[3].parse().unwrap_or(f64::NAN),
            rss_per_key: f[4].parse().unwrap_or(f64::NAN),
        })?,
        churn_memory: read_named_csv(&scratch.join("churn_memory.csv"), parse_churn_memory)?,
        sweeps: read_csv(&scratch.join("sweep.csv"), |f| SweepPause {
            keys: f[0].parse().unwrap_or(0),
            forgettable: f[1].to_string(),
            pause_ms: f[2].parse().unwrap_or(f64::NAN),
        })?,
    })
}

/// A row of an interleaved benchmark's CSV (benches/common's `interleaved_row`):
/// scenario, limiter, threads, median, the number of rounds, and every round's rate
/// (space-separated, in round order). The rounds are kept only if every one parses
/// and there are as many as the row says (else none: a figure without rounds, judged
/// on its median alone).
fn parse_interleaved(f: &[&str]) -> Throughput {
    let count: Option<usize> = f.get(4).and_then(|n| n.parse().ok());
    let rounds = f
        .get(5)
        .and_then(|rates| {
            rates
                .split_whitespace()
                .map(str::parse)
                .collect::<Result<Vec<f64>, _>>()
                .ok()
        })
        .filter(|rounds| Some(rounds.len()) == count)
        .unwrap_or_default();
    Throughput {
        scenario: f[0].to_string(),
        limiter: f[1].to_string(),
        threads: f[2].parse().unwrap_or(0),
        ops_per_sec: f[3].parse().unwrap_or(f64::NAN),
        rounds,
    }
}

/// A row of benches/memory.rs's `churn_memory.csv`, read by column name, so that a
/// file from before the `threads`, `end_keys` and `stream_secs` columns still reads
/// (one thread; the others `None`); a heap written as `-` (several request threads) is
/// `None`.
fn parse_churn_memory(row: &NamedRow) -> ChurnMemory {
    ChurnMemory {
        limiter: row.get("limiter").unwrap_or_default().to_string(),
        threads: row.parse("threads").unwrap_or(1),
        keys_streamed: row.parse("keys_streamed").unwrap_or(0),
        peak_keys: row.parse("peak_keys").unwrap_or(0),
        end_keys: row.parse("end_keys"),
        peak_heap: row.parse("peak_heap_bytes"),
        end_heap: row.parse("end_heap_bytes"),
        peak_rss: row.parse("peak_rss_growth_bytes").unwrap_or(0),
        stream_secs: row.parse("stream_secs"),
    }
}

/// One row of a CSV file beside its header's column names.
struct NamedRow<'a> {
    names: &'a [&'a str],
    fields: Vec<&'a str>,
}

impl NamedRow<'_> {
    /// The field under column `name`, if the file has that column.
    fn get(&self, name: &str) -> Option<&str> {
        let at = self.names.iter().position(|n| *n == name)?;
        self.fields.get(at).copied()
    }

    /// The field under column `name`, if there is one and it parses.
    fn parse<T: std::str::FromStr>(&self, name: &str) -> Option<T> {
        self.get(name)?.parse().ok()
    }
}

fn read_json(path: &Path) -> Result<Value, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("read {}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("parse {}: {e}", path.display()))
}

/// Every `new/benchmark.json` under criterion's output, with its median estimate.
fn read_criterion(home: &Path) -> Result<Vec<Throughput>, String> {
    let mut figures = Vec::new();
    let mut dirs = vec![home.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.ends_with("new/benchmark.json") {
                let benchmark = read_json(&path)?;
                let estimates = read_json(&path.with_file_name("estimates.json"))?;
                let elements = benchmark["throughput"]["Elements"].as_f64().unwrap_or(1.0);
                let median_ns = estimates["median"]["point_estimate"]
                    .as_f64()
                    .unwrap_or(f64::NAN);
                figures.push(Throughput {
                    scenario: benchmark["group_id"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    limiter: benchmark["function_id"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    threads: benchmark["value_str"]
                        .as_str()
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(0),
                    ops_per_sec: elements / median_ns * 1e9,
                    rounds: Vec::new(),
                });
            }
        }
    }
    if figures.is_empty() {
        return Err(format!("no criterion results under {}", home.display()));
    }
    Ok(figures)
}

fn read_csv<T>(path: &Path, row: impl Fn(&[&str]) -> T) -> Result<Vec<T>, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("read {}: {e}", path.display()))?;
    Ok(text
        .lines()
        .skip(1)
        .filter(|line| !line.trim().is_empty())
        .map(|line| row(&line.split(',').collect::<Vec<_>>()))
        .collect())
}

fn read_named_csv<T>(path: &Path, row: impl Fn(&NamedRow) -> T) -> Result<Vec<T>, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("read {}: {e}", path.display()))?;
    Ok(parse_named_csv(&text, row))
}

/// Every row of a CSV text whose first line names the columns.
fn parse_named_csv<T>(text: &str, row: impl Fn(&NamedRow) -> T) -> Vec<T> {
    let mut lines = text.lines().filter(|line| !line.trim().is_empty());
    let names: Vec<&str> = lines
        .next()
        .map_or_else(Vec::new, |h| h.split(',').collect());
    lines
        .map(|line| {
            row(&NamedRow {
                names: &names,
                fields: line.split(',').collect(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interleaved_row_keeps_its_rounds_only_when_all_of_them_are_there() {
        let row = parse_interleaved(&["zipf-allowed", "turnstile", "2", "12", "3", "11 12 13"]);
        assert_eq!(
            (row.scenario.as_str(), row.limiter.as_str(), row.threads),
            ("zipf-allowed", "turnstile", 2)
        );
        assert_eq!(row.ops_per_sec, 12.0);
        assert_eq!(row.rounds, vec![11.0, 12.0, 13.0]);
        // A round that does not parse, or fewer rounds than the row says: none kept,
        // rather than rounds that no longer pair with another contender's.
        assert!(
            parse_interleaved(&["s", "l", "1", "12", "3", "11 x 13"])
                .rounds
                .is_empty()
        );
        assert!(
            parse_interleaved(&["s", "l", "1", "12", "3", "11 13"])
                .rounds
                .is_empty()
        );
        // A row from before the rounds were written: the median alone.
        let old = parse_interleaved(&["s", "l", "1", "12", "7"]);
        assert_eq!(old.ops_per_sec, 12.0);
        assert!(old.rounds.is_empty());
    }

    #[test]
    fn a_churn_memory_row_is_read_by_its_column_names_old_and_new() {
        let new = "limiter,threads,keys_streamed,peak_keys,end_keys,peak_heap_bytes,\
                   end_heap_bytes,peak_rss_growth_bytes,stream_secs\n\
                   turnstile,1,10000000,347146,120000,290804466,290804466,55525376,3.210\n\
                   turnstile,2,10000000,7750000,7750000,-,-,552000000,2.500\n";
        let rows = parse_named_csv(new, parse_churn_memory);
        assert_eq!(rows.len(), 2);
        let (one, two) = (&rows[0], &rows[1]);
        assert_eq!((one.limiter.as_str(), one.threads), ("turnstile", 1));
        assert_eq!((one.peak_keys, one.end_keys), (347_146, Some(120_000)));
        assert_eq!(
            (one.peak_heap, one.end_heap),
            (Some(290_804_466), Some(290_804_466))
        );
        assert_eq!((one.peak_rss, one.stream_secs), (55_525_376, Some(3.21)));
        // Several request threads: no heap, the rest as written.
        assert_eq!((two.threads, two.peak_keys), (2, 7_750_000));
        assert_eq!((two.peak_heap, two.end_heap), (None, None));
        assert_eq!((two.peak_rss, two.stream_secs), (552_000_000, Some(2.5)));
        // A file from before the threads column: one thread, no end keys, no time.
        let old = "limiter,keys_streamed,peak_keys,peak_heap_bytes,end_heap_bytes,\
                   peak_rss_growth_bytes\n\
                   governor,10000000,9999361,303039632,285213824,303411200\n";
        let old = &parse_named_csv(old, parse_churn_memory)[0];
        assert_eq!((old.limiter.as_str(), old.threads), ("governor", 1));
        assert_eq!((old.peak_keys, old.end_keys), (9_999_361, None));
        assert_eq!(
            (old.peak_heap, old.end_heap),
            (Some(303_039_632), Some(285_213_824))
        );
        assert_eq!((old.peak_rss, old.stream_secs), (303_411_200, None));
    }
}
