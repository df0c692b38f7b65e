//! What the figures were measured on: CPU, cores, compiler, commit, date.

use std::process::Command;

pub struct Machine {
    pub cpu: String,
    pub cores: usize,
    pub rustc: String,
    pub commit: String,
    pub date: String,
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
        Self {
            cpu,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            rustc: command_output("rustc", &["-V"])
                .or_else(|| std::env::var("TURNSTILE_RUSTC").ok())
                .unwrap_or_else(|| "unknown rustc".to_string()),
            commit,
            date: command_output("date", &["-u", "+%Y-%m-%d %H:%M UTC"]).unwrap_or_default(),
        }
    }

    /// One line naming everything, for the head of each file.
    pub fn line(&self) -> String {
        format!(
            "machine: {}, {} cores; {}; commit {}; {}",
            self.cpu, self.cores, self.rustc, self.commit, self.date
        )
    }
}
