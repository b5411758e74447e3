//! `gpu-suite`: every piece of GPU evidence in one command, run from a
//! bundle on a GPU host with no Rust toolchain (`cargo xtask bundle DIR`,
//! then `DIR/gpu-suite`). With `--cpu` the same parts run on the CPU
//! execution at small sizes, which is how CI tests the suite itself.

pub mod ctx;
pub mod exec;
pub mod figures;
pub mod judge;
pub mod mps;
pub mod parts;
pub mod probes;
pub mod profile;
pub mod runner;
pub mod start;
pub mod summary;

use clap::{CommandFactory, FromArgMatches, Parser};
use ctx::Ctx;
use parts::Part;
use serde::Serialize;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How a part ended, from best to worst.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    Pass,
    /// It could not run here (no GPU, no sanitizer): not a pass.
    Skipped,
    /// Left out: `--budget` had no room for it.
    NotRun,
    Fail,
    TimedOut,
}

impl Status {
    pub fn worse(self, other: Status) -> Status {
        self.max(other)
    }
    pub fn is_failure(self) -> bool {
        matches!(self, Status::Fail | Status::TimedOut)
    }
    pub fn label(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Skipped => "skipped",
            Status::NotRun => "not run",
            Status::Fail => "FAIL",
            Status::TimedOut => "TIMED OUT",
        }
    }
}

/// One part's result, as the summary shows it.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    pub part: String,
    pub status: Status,
    /// The key figure, or why it did not pass or run.
    pub figure: String,
    pub wall_s: f64,
    /// Files of this part in the results folder.
    pub logs: Vec<String>,
}

/// Gathers the GPU evidence: tests, faults, sanitizers, soaks and the
/// standard bench sweeps, into one folder with a summary.
#[derive(Parser, Debug, Clone)]
#[command(name = "gpu-suite", version)]
pub struct SuiteArgs {
    /// Run on the CPU execution at small sizes (what CI runs).
    #[arg(long)]
    pub cpu: bool,
    /// Run only these parts (comma separated; a prefix such as `bench`
    /// or `soak` names every part it starts).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Leave these parts out (same names as --only).
    #[arg(long, value_delimiter = ',')]
    pub skip: Vec<String>,
    /// Stop cleanly after this many seconds: a part that would not fit is
    /// not started, and a running one is stopped at the limit; the summary
    /// lists both.
    #[arg(long, value_name = "SECS")]
    pub budget: Option<u64>,
    /// The results folder (default: gpu-suite-<date>-<device>).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Where the bundle's binaries are (default: beside this one).
    #[arg(long, value_name = "DIR")]
    pub bin_dir: Option<PathBuf>,
    /// List the parts and exit.
    #[arg(long)]
    pub list: bool,
}

fn parts_help() -> String {
    let mut s = String::from("Parts, in the order they run (a budget cuts from the end):\n");
    for p in parts::all() {
        s += &format!("  {:<22} {}\n", p.name, p.about);
    }
    s += "\nExit status: 0 when no part failed or timed out (skipped and not-run parts are\n\
          listed as such), 1 otherwise, 2 for bad arguments.";
    s
}

/// Parses the command line, with the list of parts in `--help`.
pub fn parse_args() -> SuiteArgs {
    let m = SuiteArgs::command().after_help(parts_help()).get_matches();
    SuiteArgs::from_arg_matches(&m).unwrap_or_else(|e| e.exit())
}

fn selected(name: &str, sel: &str) -> bool {
    name == sel || name.strip_prefix(sel).is_some_and(|r| r.starts_with('-'))
}

/// The parts `--only` and `--skip` choose, or the first selector that names
/// no part.
pub fn choose(only: &[String], skip: &[String]) -> Result<Vec<Part>, String> {
    let all = parts::all();
    for s in only.iter().chain(skip) {
        if !all.iter().any(|p| selected(p.name, s)) {
            let names: Vec<_> = all.iter().map(|p| p.name).collect();
            return Err(format!(
                "no part is named {s:?}; parts: {}",
                names.join(", ")
            ));
        }
    }
    Ok(all
        .into_iter()
        .filter(|p| only.is_empty() || only.iter().any(|s| selected(p.name, s)))
        .filter(|p| !skip.iter().any(|s| selected(p.name, s)))
        .collect())
}

/// Runs the suite; returns the process exit status.
pub fn main_with(args: SuiteArgs, argv: Vec<String>) -> i32 {
    let chosen = match choose(&args.only, &args.skip) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("gpu-suite: {e}");
            return 2;
        }
    };
    if args.list {
        print!("{}", parts_help());
        return 0;
    }
    let device = summary::device(args.cpu);
    let out = args.out.clone().unwrap_or_else(|| {
        PathBuf::from(format!("gpu-suite-{}-{}", summary::today(), device.slug))
    });
    if let Err(e) = std::fs::create_dir_all(&out) {
        eprintln!("gpu-suite: {}: {e}", out.display());
        return 2;
    }
    let bin_dir = args.bin_dir.clone().unwrap_or_else(|| {
        std::env::current_exe()
            .ok()
            .and_then(|p| p.parent().map(PathBuf::from))
            .unwrap_or_default()
    });
    let ctx = Ctx {
        cpu: args.cpu,
        bin_dir,
        out: out.clone(),
        env: Vec::new(),
    };
    // Never NVLink SHARP: this suite must not touch multicast objects.
    std::env::set_var("NCCL_NVLS_ENABLE", "0");
    println!(
        "gpu-suite: {} part(s) on {}, run on {}, results in {}",
        chosen.len(),
        device.name,
        if args.cpu {
            "the CPU execution"
        } else {
            "the GPU"
        },
        out.display()
    );
    let t0 = Instant::now();
    let deadline = args.budget.map(|b| t0 + Duration::from_secs(b));
    let mut outcomes = Vec::new();
    for p in &chosen {
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        if let Some(left) = left {
            if left.as_secs() < p.est(args.cpu) {
                println!(
                    "-- {}: not run ({} s of budget left, needs ~{} s)",
                    p.name,
                    left.as_secs(),
                    p.est(args.cpu)
                );
                outcomes.push(Outcome {
                    part: p.name.into(),
                    status: Status::NotRun,
                    figure: format!(
                        "budget: {} s left, needs ~{} s",
                        left.as_secs(),
                        p.est(args.cpu)
                    ),
                    wall_s: 0.0,
                    logs: vec![],
                });
                continue;
            }
        }
        let cap = Duration::from_secs(p.cap_s);
        let limit = left.map_or(cap, |l| l.min(cap));
        println!("-- {}: {}", p.name, p.about);
        let start = Instant::now();
        let mut o = p.run(&ctx, limit);
        o.wall_s = start.elapsed().as_secs_f64();
        println!("   {} in {:.1} s: {}", o.status.label(), o.wall_s, o.figure);
        outcomes.push(o);
    }
    let s = summary::Summary {
        command_line: argv,
        date: crate::report::now_iso(),
        execution: if args.cpu { "cpu" } else { "gpu" }.into(),
        device: device.name,
        budget_s: args.budget,
        wall_s: t0.elapsed().as_secs_f64(),
        parts: outcomes,
    };
    let table = s.table();
    println!("\n{table}");
    if let Err(e) = s.write(&out) {
        eprintln!("gpu-suite: writing the summary: {e}");
        return 1;
    }
    if s.parts.iter().any(|o| o.status.is_failure()) {
        1
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(p: &[Part]) -> Vec<&str> {
        p.iter().map(|p| p.name).collect()
    }
    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn only_and_skip_take_names_and_prefixes() {
        let all = names(&choose(&[], &[]).unwrap()).len();
        assert_eq!(
            names(&choose(&v(&["soak"]), &[]).unwrap()),
            ["soak-k4", "soak-k8"]
        );
        assert_eq!(
            names(&choose(&v(&["tests", "soak-k8"]), &[]).unwrap()),
            ["tests", "soak-k8"]
        );
        let b = choose(&[], &v(&["bench", "sanitize"])).unwrap();
        assert!(names(&b)
            .iter()
            .all(|n| !n.starts_with("bench") && *n != "sanitize"));
        let benches = parts::all()
            .iter()
            .filter(|p| p.name.starts_with("bench-"))
            .count();
        assert!(benches >= 15, "{benches} bench parts");
        assert_eq!(b.len(), all - benches - 1);
        // The k = 8 large sizes are two parts under one prefix.
        assert_eq!(
            names(&choose(&v(&["auto-large-k8"]), &[]).unwrap()),
            ["auto-large-k8-256M", "auto-large-k8-1G"]
        );
        // "soak-k" is no part name nor a dash-separated prefix.
        assert!(choose(&v(&["soak-k"]), &[]).is_err());
        assert!(choose(&[], &v(&["nope"])).is_err_and(|e| e.contains("tests")));
    }

    #[test]
    fn statuses_order_from_best_to_worst() {
        assert_eq!(Status::Pass.worse(Status::Skipped), Status::Skipped);
        assert_eq!(Status::Fail.worse(Status::Pass), Status::Fail);
        assert!(Status::TimedOut.is_failure() && !Status::NotRun.is_failure());
    }

    #[test]
    fn help_lists_every_part() {
        let h = parts_help();
        for p in parts::all() {
            assert!(h.contains(p.name), "{}", p.name);
        }
    }
}
