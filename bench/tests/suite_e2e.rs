//! `gpu-suite` and `ringreduce-compare` end to end on the CPU execution:
//! part selection, skips, the budget, missing binaries and the summary.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ringreduce-suite-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A bundle folder holding only the bench (no test binaries).
fn bench_only_bundle(name: &str) -> PathBuf {
    let d = tmp(name);
    std::os::unix::fs::symlink(
        env!("CARGO_BIN_EXE_ringreduce-bench"),
        d.join("ringreduce-bench"),
    )
    .unwrap();
    d
}

fn suite(bin_dir: &Path, out: &Path, args: &[&str]) -> (Output, serde_json::Value) {
    let o = Command::new(env!("CARGO_BIN_EXE_gpu-suite"))
        .arg("--cpu")
        .arg("--bin-dir")
        .arg(bin_dir)
        .arg("--out")
        .arg(out)
        .args(args)
        .output()
        .unwrap();
    let summary = std::fs::read_to_string(out.join("summary.json"))
        .map(|t| serde_json::from_str(&t).unwrap())
        .unwrap_or(serde_json::Value::Null);
    (o, summary)
}

fn statuses(s: &serde_json::Value) -> Vec<(String, String)> {
    s["parts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["part"].as_str().unwrap().to_string(),
                p["status"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn a_sweep_passes_and_the_sanitizer_skips_on_the_cpu() {
    let bins = bench_only_bundle("bins");
    let out = tmp("out");
    let (o, s) = suite(&bins, &out, &["--only", "sanitize,bench-k4-256M-C1"]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{stdout}");
    assert_eq!(
        statuses(&s),
        [
            ("sanitize".to_string(), "skipped".to_string()),
            ("bench-k4-256M-C1".to_string(), "pass".to_string())
        ]
    );
    assert_eq!(s["execution"], "cpu");
    for f in [
        "bench-k4-256M-C1.json",
        "bench-k4-256M-C1.png",
        "summary.md",
    ] {
        assert!(out.join(f).is_file(), "{f} missing");
    }
    assert!(
        stdout.contains("| bench-k4-256M-C1 | pass | at 64K: reduce_scatter "),
        "{stdout}"
    );
}

/// A latency part times `Auto` and the fastest forced algorithm again side
/// by side, and its key figure says how far apart they came.
#[test]
fn a_latency_part_rematches_auto_with_the_fastest() {
    let bins = bench_only_bundle("latency");
    let out = tmp("latency-out");
    let (o, s) = suite(&bins, &out, &["--only", "latency-k2"]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{stdout}");
    assert_eq!(
        statuses(&s),
        [("latency-k2".to_string(), "pass".to_string())]
    );
    assert!(
        stdout.contains("Auto / fastest, timed side by side: worst "),
        "{stdout}"
    );
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("latency-k2.json")).unwrap())
            .unwrap();
    // 8 B, 64 B, 512 B and 4 KiB, for each of the three collectives.
    assert_eq!(r["auto_rematch"].as_array().map(Vec::len), Some(4 * 3));
}

#[test]
fn missing_test_binaries_fail_the_suite() {
    let out = tmp("missing");
    let (o, s) = suite(&bench_only_bundle("nobins"), &out, &["--only", "tests"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(statuses(&s), [("tests".to_string(), "fail".to_string())]);
    assert!(s["parts"][0]["figure"]
        .as_str()
        .unwrap()
        .contains("not started"));
}

#[test]
fn a_spent_budget_runs_nothing_and_says_so() {
    let out = tmp("budget");
    let (o, s) = suite(
        &bench_only_bundle("budget-bins"),
        &out,
        &["--budget", "0", "--skip", "soak"],
    );
    assert!(o.status.success());
    let st = statuses(&s);
    // Every part but the two soaks.
    assert_eq!(st.len(), 49);
    assert!(st.iter().all(|(_, s)| s == "not-run"), "{st:?}");
    assert_eq!(s["budget_s"], 0);
}

#[test]
fn unknown_parts_are_refused() {
    let out = tmp("unknown");
    let (o, _) = suite(
        &bench_only_bundle("unknown-bins"),
        &out,
        &["--only", "everything"],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no part is named"));
}

#[test]
fn help_documents_every_part() {
    let o = Command::new(env!("CARGO_BIN_EXE_gpu-suite"))
        .arg("--help")
        .output()
        .unwrap();
    let h = String::from_utf8_lossy(&o.stdout);
    for p in [
        "tests",
        "faults",
        "sanitize",
        "soak-k4",
        "soak-k8",
        "cold-start",
        "bench-sweep-k8-auto",
        "--budget",
        "--only",
    ] {
        assert!(h.contains(p), "{p} missing from --help:\n{h}");
    }
}

/// `ringreduce-compare --cpu` of the bench against itself (`base` and
/// `same`), 4 KiB, one iteration, with `args` and the bench flags
/// `bench_flags`; asserts it succeeded and returns its stdout and JSON.
fn compare_self(name: &str, args: &[&str], bench_flags: &[&str]) -> (String, serde_json::Value) {
    let bench = env!("CARGO_BIN_EXE_ringreduce-bench");
    let json = tmp(name).join("c.json");
    let o = Command::new(env!("CARGO_BIN_EXE_ringreduce-compare"))
        .args(["--cpu", "--size", "4K", "--iters", "1", "--warmup", "0"])
        .args(args)
        .arg(format!("base={bench}"))
        .arg(format!("same={bench}"))
        .arg("-J")
        .arg(&json)
        .args(bench_flags)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let doc = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    (stdout, doc)
}

#[test]
fn compare_runs_the_base_first_and_last() {
    let (stdout, doc) = compare_self("compare", &["--ks", "2,3", "--rounds", "2"], &[]);
    let runs = doc["runs"].as_array().unwrap();
    // Per k: base, same, base, same, base.
    assert_eq!(runs.len(), 10);
    let order: Vec<&str> = runs[..5]
        .iter()
        .map(|r| r["build"].as_str().unwrap())
        .collect();
    assert_eq!(order, ["base", "same", "base", "same", "base"]);
    let lines = doc["lines"].as_array().unwrap();
    assert_eq!(lines.len(), 4);
    assert_eq!(lines[0]["runs"], 3);
    assert!((lines[0]["vs_base"].as_f64().unwrap() - 1.0).abs() < 1e-12);
    assert!(stdout.contains("| base spread |"));
}

/// With `--collective all` every collective of a run is a line of its
/// own, so a reduce-scatter is never read off an all-reduce's figure.
#[test]
fn compare_keeps_each_collective_apart() {
    let (stdout, doc) = compare_self(
        "compare-all",
        &["--ks", "3", "--rounds", "1"],
        &["--", "--collective", "all"],
    );
    // base, same, base: three runs of three collectives each.
    assert_eq!(doc["runs"].as_array().unwrap().len(), 9);
    let lines = doc["lines"].as_array().unwrap();
    let mut seen: Vec<(&str, &str)> = lines
        .iter()
        .map(|l| {
            (
                l["collective"].as_str().unwrap(),
                l["build"].as_str().unwrap(),
            )
        })
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        [
            ("all_gather", "base"),
            ("all_gather", "same"),
            ("all_reduce", "base"),
            ("all_reduce", "same"),
            ("reduce_scatter", "base"),
            ("reduce_scatter", "same"),
        ]
    );
    for l in lines.iter().filter(|l| l["build"] == "base") {
        assert_eq!(l["runs"], 2, "{l}");
    }
    assert!(
        stdout.contains("| 3 | 2M | reduce_scatter | base | 2 |"),
        "{stdout}"
    );
}

#[test]
fn compare_refuses_a_missing_build() {
    let o = Command::new(env!("CARGO_BIN_EXE_ringreduce-compare"))
        .args([
            "--cpu",
            env!("CARGO_BIN_EXE_ringreduce-bench"),
            "/nonexistent/bench",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no bench binary"));
}
