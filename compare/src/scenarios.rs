//! What the report and the targets share: the keyed scenarios in table order, and
//! how one contender's throughput in a scenario is found in a run's figures and
//! written.

use crate::runs::{Figures, Throughput};

/// The keyed scenarios (benches/throughput.rs and benches/ratios.rs), in table order:
/// the report's tables, the targets and the plot.
pub const SCENARIOS: [&str; 7] = [
    "hot-allowed",
    "hot-denied",
    "uniform-allowed",
    "uniform-denied",
    "zipf-allowed",
    "zipf-denied",
    "churn-allowed",
];

/// criterion's median for a contender.
pub fn ops(figures: &Figures, scenario: &str, limiter: &str, threads: usize) -> Option<f64> {
    find(&figures.throughput, scenario, limiter, threads)
}

/// The interleaved median (see benches/ratios.rs), where there is one; else criterion's.
pub fn interleaved(
    figures: &Figures,
    scenario: &str,
    limiter: &str,
    threads: usize,
) -> Option<f64> {
    find(&figures.interleaved, scenario, limiter, threads)
        .or_else(|| ops(figures, scenario, limiter, threads))
}

/// A contender's checks per second in `list`.
pub fn find(list: &[Throughput], scenario: &str, limiter: &str, threads: usize) -> Option<f64> {
    entry(list, scenario, limiter, threads).map(|t| t.ops_per_sec)
}

/// One contender's figure in `list`, with its rounds.
pub fn entry<'a>(
    list: &'a [Throughput],
    scenario: &str,
    limiter: &str,
    threads: usize,
) -> Option<&'a Throughput> {
    list.iter()
        .find(|t| t.scenario == scenario && t.limiter == limiter && t.threads == threads)
}

/// Checks per second as the tables write them: millions, one decimal.
pub fn millions(ops: f64) -> String {
    format!("{:.1} M/s", ops / 1e6)
}
