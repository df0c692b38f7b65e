//! What the figures were measured on: CPU, cores, compiler, commit, date.

use std::path::Path;
use std::process::Command;

/// One line naming everything: the CPU and its cores, the compiler, the commit and
/// the date of a run.
pub struct Machine {
    line: String,
}

fn command_output(program: &str, args: &[&str]) -> Option<String> {
    let output = Command::new(program).args(args).output().ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).trim().to_string())
}

impl Machine {
    pub fn describe() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find_map(|line| line.strip_prefix("model name"))
            .map(|rest| rest.trim_start_matches([' ', '\t', ':']).trim().to_string())
            .unwrap_or_else(|| "unknown CPU".to_string());
        let commit = match command_output("git", &["rev-parse", "--short", "HEAD"]) {
            Some(hash) => {
                let dirty =
                    command_output("git", &["status", "--porcelain", "--untracked-files=no"])
                        .is_some_and(|s| !s.is_empty());
                if dirty {
                    format!("{hash} (with uncommitted changes)")
                } else {
                    hash
                }
            }
            // The device machine gets a copy of the tree with no history.
            None => std::env::var("TURNSTILE_COMMIT").unwrap_or_else(|_| "unknown".to_string()),
        };
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let rustc = command_output("rustc", &["-V"])
            .or_else(|| std::env::var("TURNSTILE_RUSTC").ok())
            .unwrap_or_else(|| "unknown rustc".to_string());
        let date = command_output("date", &["-u", "+%Y-%m-%d %H:%M UTC"]).unwrap_or_default();
        Self {
            line: format!("machine: {cpu}, {cores} cores; {rustc}; commit {commit}; {date}"),
        }
    }

    /// Keeps the line beside a run's figures, and whether the run was full, so that
    /// they can be judged again later (`--report-only`) under the machine, commit,
    /// date and mode they were measured at.
    pub fn record(&self, path: &Path, full: bool) -> Result<(), String> {
        let mode = if full { "full" } else { "quick" };
        std::fs::write(path, format!("{}\n{mode}\n", self.line))
            .map_err(|e| format!("write {}: {e}", path.display()))
    }

    /// The line a run kept with [`record`](Self::record), and whether it was full.
    pub fn recorded(path: &Path) -> Result<(Self, bool), String> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            format!(
                "read {}: {e} (a run without --report-only writes it)",
                path.display()
            )
        })?;
        let mut lines = text.lines();
        let line = lines.next().unwrap_or_default().trim().to_string();
        let full = lines.next().is_some_and(|mode| mode.trim() == "full");
        Ok((Self { line }, full))
    }

    /// One line naming everything, for the head of each file.
    pub fn line(&self) -> String {
        self.line.clone()
    }
}
