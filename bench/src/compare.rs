//! `ringreduce-compare`: bench builds against each other in one job,
//! interleaved, the base first and last, so that drift between runs shows
//! as the base's own spread beside each variant's ratio to it.

use crate::report::Report;
use crate::sizes::{human, parse_size};
use clap::Parser;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Compares bench builds (f32 sum, out of place) in one job, interleaved.
#[derive(Parser, Debug, Clone)]
#[command(name = "ringreduce-compare", version)]
pub struct CompareArgs {
    /// The builds: NAME=PATH or PATH, where PATH is a bench binary or a
    /// bundle folder (its `ringreduce-bench`); the first is the base.
    #[arg(required = true, num_args = 2..)]
    pub builds: Vec<String>,
    /// Ring sizes (virtual ranks), comma separated.
    #[arg(long, value_delimiter = ',', default_value = "4")]
    pub ks: Vec<usize>,
    /// Staging sizes per rank, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "2M")]
    pub buffsizes: Vec<String>,
    /// Per-rank input size.
    #[arg(long, default_value = "256M")]
    pub size: String,
    /// Rounds of every build; the base runs once more, last.
    #[arg(long, default_value_t = 2)]
    pub rounds: usize,
    /// Timed and warm-up iterations per bench run.
    #[arg(long, default_value_t = 10)]
    pub iters: usize,
    #[arg(long, default_value_t = 3)]
    pub warmup: usize,
    /// Stop starting bench runs after this many seconds.
    #[arg(long, value_name = "SECS")]
    pub budget: Option<u64>,
    /// Write every run and the ratios as JSON.
    #[arg(short = 'J', long)]
    pub json: Option<PathBuf>,
    /// Run the bench on the CPU execution (to try the tool without a GPU).
    #[arg(long)]
    pub cpu: bool,
    /// Extra bench flags, after `--`.
    #[arg(last = true)]
    pub bench_flags: Vec<String>,
}

/// One build under comparison.
#[derive(Debug, Clone, PartialEq)]
pub struct Build {
    pub name: String,
    pub bin: PathBuf,
}

/// `NAME=PATH` or `PATH`; a folder means its `ringreduce-bench`, and the
/// name defaults to the folder's (or the binary's) name.
pub fn parse_build(s: &str) -> Build {
    let (name, path) = match s.split_once('=') {
        Some((n, p)) => (Some(n.to_string()), PathBuf::from(p)),
        None => (None, PathBuf::from(s)),
    };
    let bin = if path.is_dir() {
        path.join("ringreduce-bench")
    } else {
        path.clone()
    };
    let name = name.unwrap_or_else(|| {
        let base = if path.is_dir() {
            &path
        } else {
            path.parent().unwrap_or(&path)
        };
        base.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .filter(|n| !n.is_empty() && n != ".")
            .unwrap_or_else(|| path.display().to_string())
    });
    Build { name, bin }
}

/// One collective's figures from one bench run (a run with
/// `--collective all` gives three).
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    pub build: String,
    pub k: usize,
    pub buffsize: String,
    pub collective: String,
    pub busbw: f64,
    pub busbw_in_place: f64,
    pub block_copy_gbps: Option<f64>,
}

/// A build's runs at one (k, staging, collective), against the base's.
#[derive(Debug, Clone, Serialize)]
pub struct Line {
    pub k: usize,
    pub buffsize: String,
    pub collective: String,
    pub build: String,
    pub runs: usize,
    pub mean_busbw: f64,
    pub min_busbw: f64,
    pub max_busbw: f64,
    pub vs_base: f64,
    /// The base's (max - min) / mean at this (k, staging).
    pub base_spread: f64,
    pub vs_block_copy: Option<f64>,
}

/// The order of runs at one (k, staging): `rounds` times every build, then
/// the base again, so the base is first and last.
pub fn schedule(builds: usize, rounds: usize) -> Vec<usize> {
    let mut s: Vec<usize> = (0..rounds).flat_map(|_| 0..builds).collect();
    s.push(0);
    s
}

/// One bench run: a [`Run`] per row (collective) it wrote, each checked.
fn bench_once(
    a: &CompareArgs,
    b: &Build,
    k: usize,
    bs: &str,
    tmp: &Path,
) -> Result<Vec<Run>, String> {
    let _ = std::fs::remove_file(tmp);
    let mut c = Command::new(&b.bin);
    c.args([
        "-b",
        &a.size,
        "-e",
        &a.size,
        "-g",
        &k.to_string(),
        "-d",
        "float",
        "-o",
        "sum",
    ])
    .args([
        "--buffsize",
        bs,
        "-n",
        &a.iters.to_string(),
        "-w",
        &a.warmup.to_string(),
    ])
    .arg("-J")
    .arg(tmp)
    .args(&a.bench_flags);
    if a.cpu {
        c.arg("--cpu");
    }
    let out = c
        .output()
        .map_err(|e| format!("{}: {e}", b.bin.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} exited with {}: {}",
            b.name,
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let r: Report = std::fs::read_to_string(tmp)
        .map_err(|e| e.to_string())
        .and_then(|t| serde_json::from_str(&t).map_err(|e| e.to_string()))?;
    if r.rows.is_empty() {
        return Err(format!("{}: the bench wrote no row", b.name));
    }
    let copy = r.ceilings.map(|c| c.block_copy_gbps);
    r.rows
        .iter()
        .map(|row| {
            if row.out_of_place.wrong.unwrap_or(0) + row.in_place.wrong.unwrap_or(0) > 0 {
                return Err(format!(
                    "{}: wrong results at k={k} ({})",
                    b.name, row.collective
                ));
            }
            Ok(Run {
                build: b.name.clone(),
                k,
                buffsize: bs.to_string(),
                collective: row.collective.clone(),
                busbw: row.out_of_place.busbw,
                busbw_in_place: row.in_place.busbw,
                block_copy_gbps: copy,
            })
        })
        .collect()
}

/// Each build's mean against the base's, per (k, staging, collective).
pub fn lines(builds: &[Build], runs: &[Run]) -> Vec<Line> {
    let mut out = Vec::new();
    let mut keys: Vec<(usize, String, String)> = Vec::new();
    for r in runs {
        let key = (r.k, r.buffsize.clone(), r.collective.clone());
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    for (k, bs, coll) in keys {
        let of = |name: &str| -> Vec<&Run> {
            runs.iter()
                .filter(|r| r.k == k && r.buffsize == bs && r.collective == coll && r.build == name)
                .collect()
        };
        let stats = |v: &[&Run]| {
            let xs: Vec<f64> = v.iter().map(|r| r.busbw).collect();
            let mean = xs.iter().sum::<f64>() / xs.len().max(1) as f64;
            let min = xs.iter().copied().fold(f64::INFINITY, f64::min);
            let max = xs.iter().copied().fold(0.0, f64::max);
            (mean, min, max)
        };
        let base = of(&builds[0].name);
        let (bmean, bmin, bmax) = stats(&base);
        for b in builds {
            let v = of(&b.name);
            if v.is_empty() {
                continue;
            }
            let (mean, min, max) = stats(&v);
            let copies: Vec<f64> = v.iter().filter_map(|r| r.block_copy_gbps).collect();
            let copy =
                (!copies.is_empty()).then(|| copies.iter().sum::<f64>() / copies.len() as f64);
            out.push(Line {
                k,
                buffsize: bs.clone(),
                collective: coll.clone(),
                build: b.name.clone(),
                runs: v.len(),
                mean_busbw: mean,
                min_busbw: min,
                max_busbw: max,
                vs_base: if bmean > 0.0 { mean / bmean } else { f64::NAN },
                base_spread: if bmean > 0.0 {
                    (bmax - bmin) / bmean
                } else {
                    f64::NAN
                },
                vs_block_copy: copy.map(|c| mean / c),
            });
        }
    }
    out
}

pub fn table(lines: &[Line]) -> String {
    let mut t = String::from(
        "|  k | staging | collective | build | runs | busbw GB/s (min-max) | / base | base spread | / 1-block copy |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    for l in lines {
        t += &format!(
            "| {} | {} | {} | {} | {} | {:.2} ({:.2}-{:.2}) | {:.3} | {:.1}% | {} |\n",
            l.k,
            l.buffsize,
            l.collective,
            l.build,
            l.runs,
            l.mean_busbw,
            l.min_busbw,
            l.max_busbw,
            l.vs_base,
            100.0 * l.base_spread,
            l.vs_block_copy.map_or("-".into(), |v| format!("{v:.3}"))
        );
    }
    t
}

/// Runs the comparison; returns the process exit status.
pub fn main_with(a: CompareArgs) -> i32 {
    if let Err(e) = parse_size(&a.size) {
        eprintln!("ringreduce-compare: --size: {e}");
        return 2;
    }
    let builds: Vec<Build> = a.builds.iter().map(|s| parse_build(s)).collect();
    for b in &builds {
        if !b.bin.is_file() {
            eprintln!(
                "ringreduce-compare: {}: no bench binary at {}",
                b.name,
                b.bin.display()
            );
            return 2;
        }
    }
    let mut names: Vec<&str> = builds.iter().map(|b| b.name.as_str()).collect();
    names.sort();
    names.dedup();
    if names.len() != builds.len() {
        eprintln!("ringreduce-compare: two builds share a name; name them NAME=PATH");
        return 2;
    }
    let tmp = std::env::temp_dir().join(format!("ringreduce-compare-{}.json", std::process::id()));
    let t0 = Instant::now();
    let mut runs = Vec::new();
    let mut cut = false;
    'all: for &k in &a.ks {
        for bs in &a.buffsizes {
            for i in schedule(builds.len(), a.rounds) {
                if a.budget
                    .is_some_and(|b| t0.elapsed() >= Duration::from_secs(b))
                {
                    cut = true;
                    break 'all;
                }
                match bench_once(&a, &builds[i], k, bs, &tmp) {
                    Ok(rs) => {
                        for r in rs {
                            println!(
                                "{} k={k} staging={bs} {}: busbw {:.2} GB/s",
                                r.build, r.collective, r.busbw
                            );
                            runs.push(r);
                        }
                    }
                    Err(e) => {
                        eprintln!("ringreduce-compare: {e}");
                        return 1;
                    }
                }
            }
        }
    }
    let _ = std::fs::remove_file(&tmp);
    let ls = lines(&builds, &runs);
    println!(
        "\nf32 sum, {} per rank, {} round(s), base {} first and last{}\n\n{}",
        human(parse_size(&a.size).unwrap_or(0)),
        a.rounds,
        builds[0].name,
        if cut {
            "; the budget cut the runs short"
        } else {
            ""
        },
        table(&ls)
    );
    if let Some(p) = &a.json {
        let doc = serde_json::json!({ "runs": runs, "lines": ls, "command_line": std::env::args().collect::<Vec<_>>() });
        if let Err(e) = std::fs::write(p, serde_json::to_string_pretty(&doc).unwrap_or_default()) {
            eprintln!("ringreduce-compare: {}: {e}", p.display());
            return 1;
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_runs_first_and_last() {
        assert_eq!(schedule(3, 2), vec![0, 1, 2, 0, 1, 2, 0]);
        assert_eq!(schedule(2, 1), vec![0, 1, 0]);
    }

    #[test]
    fn builds_are_named() {
        assert_eq!(
            parse_build("poll=/x/bench"),
            Build {
                name: "poll".into(),
                bin: "/x/bench".into()
            }
        );
        assert_eq!(parse_build("/x/var/poll/ringreduce-bench").name, "poll");
    }

    #[test]
    fn ratios_and_spread() {
        let b = |n: &str| Build {
            name: n.into(),
            bin: "x".into(),
        };
        let r = |n: &str, bw: f64| Run {
            build: n.into(),
            k: 4,
            buffsize: "2M".into(),
            collective: "all_reduce".into(),
            busbw: bw,
            busbw_in_place: bw,
            block_copy_gbps: Some(50.0),
        };
        let runs = [
            r("a", 10.0),
            r("v", 11.0),
            r("a", 10.5),
            r("v", 11.0),
            r("a", 9.5),
        ];
        let l = lines(&[b("a"), b("v")], &runs);
        assert_eq!(l.len(), 2);
        assert!((l[0].vs_base - 1.0).abs() < 1e-12 && l[0].runs == 3);
        assert!((l[0].base_spread - 0.1).abs() < 1e-12);
        assert!((l[1].vs_base - 1.1).abs() < 1e-12);
        assert!((l[1].vs_block_copy.unwrap() - 0.22).abs() < 1e-12);
        assert!(table(&l).contains(
            "| 4 | 2M | all_reduce | v | 2 | 11.00 (11.00-11.00) | 1.100 | 10.0% | 0.220 |"
        ));
    }
}
