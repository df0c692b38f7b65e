//! The main job: runs turnstile's benchmark suite side by side in one run and
//! rewrites `results/` (CSV of every figure, a markdown summary, plots), then prints
//! the summary.
//!
//! ```text
//! cargo run --release -p compare                 # quick mode, a few minutes on 2 cores
//! cargo run --release -p compare -- --full       # longer measurement
//!     --out DIR        write there instead of results/ (another machine's results)
//!     --threads LIST   thread counts, e.g. 1,2,4,8,16 (default: 1,2,4,8 + cores if more)
//!     --bin-dir DIR    run prebuilt bench executables from DIR instead of building
//!     --report-only    run nothing: rewrite the results from the figures the last run
//!                      left in target/turnstile-bench, under the machine, commit, date
//!                      and mode it recorded there (after changing how figures are
//!                      judged)
//! ```

mod machine;
mod plot;
mod report;
mod runs;
mod scenarios;
mod targets;

use std::path::PathBuf;
use std::process::ExitCode;

/// What the command line asked for.
pub struct Options {
    pub full: bool,
    pub out: PathBuf,
    pub threads: Option<String>,
    pub bin_dir: Option<PathBuf>,
    pub report_only: bool,
}

fn parse_args() -> Result<Options, String> {
    let mut options = Options {
        full: false,
        out: PathBuf::from("results"),
        threads: None,
        bin_dir: None,
        report_only: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--full" => options.full = true,
            "--quick" => options.full = false,
            "--out" => options.out = PathBuf::from(value()?),
            "--threads" => options.threads = Some(value()?),
            "--bin-dir" => options.bin_dir = Some(PathBuf::from(value()?)),
            "--report-only" => options.report_only = true,
            other => {
                return Err(format!(
                    "unknown argument {other}; see the doc comment of compare/src/main.rs"
                ));
            }
        }
    }
    Ok(options)
}

fn main() -> ExitCode {
    let options = match parse_args() {
        Ok(options) => options,
        Err(message) => {
            eprintln!("compare: {message}");
            return ExitCode::FAILURE;
        }
    };
    match run(&options) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("compare: {message}");
            ExitCode::FAILURE
        }
    }
}

fn run(options: &Options) -> Result<(), String> {
    let recorded = runs::scratch().join("machine.txt");
    let (machine, full, figures) = if options.report_only {
        let (machine, full) = machine::Machine::recorded(&recorded)?;
        (machine, full, runs::last_figures()?)
    } else {
        let machine = machine::Machine::describe();
        let figures = runs::run_suite(options)?;
        machine.record(&recorded, options.full)?;
        (machine, options.full, figures)
    };
    std::fs::create_dir_all(&options.out)
        .map_err(|e| format!("create {}: {e}", options.out.display()))?;
    report::write(&options.out, &machine, &figures, full)?;
    plot::throughput(&options.out.join("throughput.svg"), &machine, &figures)?;
    println!("\n{}", report::summary(&figures));
    println!("results written to {}/", options.out.display());
    Ok(())
}
