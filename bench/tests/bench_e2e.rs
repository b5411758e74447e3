//! The bench runner end to end on the CPU execution, and its JSON schema.

use ringreduce_bench::report::{Report, SCHEMA_VERSION};
use std::process::Command;

fn tmp(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("ringreduce-bench-{}-{name}", std::process::id()))
}

/// Runs the bench as `build` sets it up and returns its standard output;
/// the test fails, showing both outputs, unless the bench succeeds.
fn run_ok(build: impl FnOnce(&mut Command) -> &mut Command) -> String {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ringreduce-bench"));
    let out = build(&mut c).output().expect("run the bench");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "bench failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn cpu_run_end_to_end() {
    let json = tmp("run.json");
    let png = tmp("run.png");
    let stdout = run_ok(|c| {
        c.args([
            "--cpu",
            "-b",
            "64",
            "-e",
            "64K",
            "-f",
            "32",
            "-g",
            "3",
            "-d",
            "float,int8",
            "-o",
            "sum,avg",
            "--collective",
            "all",
            "-C",
            "2",
        ])
        .args(["-n", "2", "-w", "1", "--ring-order", "2,0,1", "--vs-nccl"])
        .arg("-J")
        .arg(&json)
        .arg("--plot")
        .arg(&png)
    });
    assert!(
        stdout.contains("NOT GPU figures"),
        "banner missing:\n{stdout}"
    );
    assert!(stdout.contains("# Out of bounds values : 0 OK"));
    assert!(stdout.contains("# Avg bus bandwidth"));
    assert!(stdout.contains("--vs-nccl: skipped"));
    // Per collective 3 sizes x 2 types x 2 ops rows (the all-gather has no
    // op: 3 x 2), in the nccl-tests column layout and then ours.
    let rows: Vec<&str> = stdout
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .collect();
    assert_eq!(rows.len(), 12 + 6 + 12, "{stdout}");
    for r in &rows {
        assert_eq!(r.split_whitespace().count(), 18, "row: {r}");
    }
    for c in ["# reduce_scatter", "# all_gather", "# all_reduce"] {
        assert!(stdout.contains(c), "no {c} table:\n{stdout}");
    }
    let report: Report = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report.schema, SCHEMA_VERSION);
    assert_eq!(report.execution, "cpu");
    assert_eq!(report.ranks, 3);
    assert_eq!(report.ring_order, vec![2, 0, 1]);
    assert_eq!(report.rows.len(), 30);
    assert_eq!(report.collective, "all");
    assert_eq!(report.channels, Some(2));
    assert!(report.rows.iter().all(|r| r.channels == 2));
    for c in ["reduce_scatter", "all_gather", "all_reduce"] {
        assert!(report.rows.iter().any(|r| r.collective == c));
    }
    // As nccl-tests prints them: an all-gather's redop is `none`.
    assert!(report
        .rows
        .iter()
        .all(|r| (r.op == "none") == (r.collective == "all_gather")));
    assert_eq!(report.out_of_bounds, 0);
    assert!(report.command_line.iter().any(|a| a == "--cpu"));
    assert!(report
        .rows
        .iter()
        .all(|r| r.out_of_place.wrong == Some(0) && r.in_place.wrong == Some(0)));
    assert!(report
        .nccl_note
        .as_deref()
        .unwrap_or("")
        .contains("skipped"));
    let png_bytes = std::fs::read(&png).unwrap();
    assert_eq!(&png_bytes[..8], b"\x89PNG\r\n\x1a\n");
    assert!(png_bytes.len() > 10_000);
    // The same plot, redrawn from the JSON alone without running anything.
    let again = tmp("replot.png");
    let out = Command::new(env!("CARGO_BIN_EXE_ringreduce-bench"))
        .arg("--replot")
        .arg(&json)
        .arg("--plot")
        .arg(&again)
        .output()
        .expect("replot");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stdout.is_empty(), "--replot ran a sweep");
    assert_eq!(std::fs::read(&again).unwrap(), png_bytes);
    // Without --plot, or from a missing report: exit code 2.
    for extra in [
        &["--replot", "/nonexistent.json", "--plot"][..],
        &["--replot"],
    ] {
        let mut c = Command::new(env!("CARGO_BIN_EXE_ringreduce-bench"));
        c.args(extra);
        if extra.len() == 3 {
            c.arg(&again);
        } else {
            c.arg(&json);
        }
        let out = c.output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{extra:?}");
    }
    let _ = std::fs::remove_file(json);
    let _ = std::fs::remove_file(png);
    let _ = std::fs::remove_file(again);
}

#[test]
fn bad_arguments_fail_cleanly() {
    let out = Command::new(env!("CARGO_BIN_EXE_ringreduce-bench"))
        .args(["--cpu", "-d", "float17"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown data type"));
}

/// The gradient rows of a job over two simulated hosts carry the wire
/// alone beside them: four loopback streams at once, each what the dense
/// step between hosts sends for the row's size.
#[test]
fn cpu_hierarchical_gradient_rows_carry_the_wire_alone() {
    let json = tmp("hier-fused.json");
    run_ok(|c| {
        c.args(["--cpu", "--procs", "4", "--nodes", "2", "--backend", "hier"])
            .args(["--collective", "fused", "-n", "1", "-w", "1", "-J"])
            .arg(&json)
    });
    let v: ringreduce_bench::grad::GradReport =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert!(!v.rows.is_empty());
    for r in &v.rows {
        // Each rank's shard (half the list) to the one other node.
        let mb = format!("4 streams of {:.1} MB", r.size as f64 / 2.0 / 1e6);
        let wire: Vec<_> = r
            .parts
            .iter()
            .filter(|p| p.name.starts_with("wire alone"))
            .collect();
        assert!(
            wire.len() == 1 && wire[0].name.contains(&mb) && wire[0].time_us > 0.0,
            "{}: {:?}",
            r.variant,
            r.parts
        );
    }
}

/// `--procs 4 --nodes 2 --backend hier`: the hierarchical backend over two
/// simulated hosts, every row checked and named by its backend; `nccl`
/// without a GPU, and a backend other than ours outside a job, are refused.
#[test]
fn cpu_hierarchical_job_end_to_end() {
    let json = tmp("hier.json");
    let stdout = run_ok(|c| {
        c.args(["--cpu", "--procs", "4", "--nodes", "2", "--backend", "hier"])
            .args(["--algo", "ring"])
            .args([
                "-b",
                "8",
                "-e",
                "2M",
                "-f",
                "64",
                "--collective",
                "all",
                "-n",
                "2",
                "-w",
                "1",
            ])
            .arg("-J")
            .arg(&json)
    });
    assert_eq!(
        stdout.matches("# Out of bounds values : 0 OK").count(),
        3,
        "{stdout}"
    );
    let report: Report = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!((report.ranks, report.processes), (4, 4));
    assert!(!report.rows.is_empty() && report.rows.iter().all(|r| r.backend == "hier"));
    // The check folds as the hierarchy does: inside a node on its ring
    // (a ring of 2, not the job's 4: the bench's flat reference panicked
    // there on a GPU, 2026-12-07), then in node order.
    assert!(
        report.rows.iter().any(|r| r.algorithm == "ring"),
        "no row ran the node's ring: {:?}",
        report.rows.iter().map(|r| &r.algorithm).collect::<Vec<_>>()
    );

    for (args, why) in [
        (
            vec!["--procs", "4", "--nodes", "2", "--backend", "nccl"],
            "needs GPUs",
        ),
        (vec!["--backend", "hier"], "job of processes"),
        (
            vec!["--procs", "4", "--nodes", "3", "--backend", "hier"],
            "does not divide",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_ringreduce-bench"))
            .arg("--cpu")
            .args(&args)
            .args(["-b", "8", "-e", "8"])
            .output()
            .expect("run the bench");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(why),
            "{args:?}: {err}"
        );
    }
}

/// `--procs 3`: three processes of the bench, one rank each, their
/// communicator across processes; rank 0 alone prints one table per
/// collective, every row checked, and the JSON says three processes.
#[test]
fn cpu_job_of_processes_end_to_end() {
    let json = tmp("procs.json");
    let stdout = run_ok(|c| {
        c.args(["--cpu", "--procs", "3", "-b", "8", "-e", "64K", "-f", "8"])
            .args([
                "--collective",
                "all",
                "-n",
                "3",
                "-w",
                "1",
                "-d",
                "float,int8",
            ])
            .arg("-J")
            .arg(&json)
    });
    // One printer: the banner once, not once per rank.
    assert_eq!(stdout.matches("NOT GPU figures").count(), 1, "{stdout}");
    assert_eq!(stdout.matches("# Out of bounds values : 0 OK").count(), 3);
    let rows = stdout
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .count();
    // 5 sizes x 2 types, per collective.
    assert_eq!(rows, 3 * 10, "{stdout}");
    assert!(stdout.contains("# Ranks: one process per rank, 3 processes"));
    let report: Report = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!((report.ranks, report.processes), (3, 3));
    assert_eq!(report.out_of_bounds, 0);
    assert!(report
        .rows
        .iter()
        .all(|r| r.out_of_place.wrong == Some(0) && r.in_place.wrong == Some(0)));
    let _ = std::fs::remove_file(&json);
}

/// The JSON's field names are the schema: changing them must be deliberate
/// (bump SCHEMA_VERSION and update this list).
#[test]
fn json_schema_is_stable() {
    let text = include_str!("../schema_v2_keys.txt");
    let want: Vec<&str> = text.lines().filter(|l| !l.is_empty()).collect();
    let r = Report {
        schema: SCHEMA_VERSION,
        tool: "t".into(),
        version: "v".into(),
        command_line: vec![],
        date: "d".into(),
        execution: "gpu".into(),
        device: "x".into(),
        driver_version: "y".into(),
        kernels: "SASS sm_90".into(),
        collective: "reduce_scatter".into(),
        ranks: 2,
        iters: 1,
        warmup: 1,
        repeats: 1,
        blocking: false,
        graph: false,
        buffsize: 1,
        channels: Some(2),
        algorithm: "auto".into(),
        ring_order: vec![0, 1],
        devices: vec![0, 0],
        prefetch_rounds: 0,
        processes: 1,
        ceilings: Some(ringreduce_bench::report::Ceilings {
            device_copy_gbps: 1.0,
            device_copy_kernel_gbps: 1.0,
            device_copy_blocks: 1,
            device_copy_driver_gbps: 0.5,
            block_copy_gbps: 1.0,
            block_reduce_gbps: 1.0,
            pingpong_rtt_us: 1.0,
            launch_us: 2.0,
            launch_host_us: 1.5,
            local_launch_us: 2.5,
            local_launch_host_us: 2.0,
            copy_bytes: 1,
        }),
        rows: vec![ringreduce_bench::report::Row {
            collective: "reduce_scatter".into(),
            algorithm: "ring".into(),
            backend: "ringreduce".into(),
            channels: 2,
            size: 8,
            count: 1,
            dtype: "float".into(),
            op: "sum".into(),
            root: -1,
            out_of_place: ringreduce_bench::report::Perf {
                time_us: 1.0,
                algbw: 1.0,
                busbw: 1.0,
                wrong: Some(0),
                busbw_vs_ceiling: None,
                vs_device_copy: Some(0.25),
                host_us: Some(0.5),
            },
            in_place: ringreduce_bench::report::Perf {
                time_us: 1.0,
                algbw: 1.0,
                busbw: 1.0,
                wrong: None,
                busbw_vs_ceiling: Some(0.5),
                vs_device_copy: None,
                host_us: None,
            },
        }],
        nccl_rows: vec![],
        nccl_note: None,
        out_of_bounds: 0,
        avg_busbw: 1.0,
        auto_rematch: vec![],
    };
    let v = serde_json::to_value(&r).unwrap();
    let mut keys = Vec::new();
    fn walk(v: &serde_json::Value, prefix: String, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, x) in m {
                    let p = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    out.push(p.clone());
                    walk(x, p, out);
                }
            }
            serde_json::Value::Array(a) => {
                if let Some(x) = a.first() {
                    walk(x, format!("{prefix}[]"), out);
                }
            }
            _ => {}
        }
    }
    walk(&v, String::new(), &mut keys);
    keys.sort();
    let mut want: Vec<String> = want.iter().map(|s| s.to_string()).collect();
    want.sort();
    assert_eq!(keys, want);
}

#[test]
fn bad_arguments_fail_before_the_banner() {
    for bad in [["-d", "foo"], ["-o", "mean"], ["--ring-order", "0,1"]] {
        let out = Command::new(env!("CARGO_BIN_EXE_ringreduce-bench"))
            .args(["--cpu", "-g", "3"])
            .args(bad)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad:?}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.is_empty(),
            "{bad:?} printed before failing: {stdout}"
        );
        assert!(!out.stderr.is_empty());
    }
}

#[test]
fn help_names_the_tool_and_each_default_once() {
    let out = Command::new(env!("CARGO_BIN_EXE_ringreduce-bench"))
        .arg("--help")
        .output()
        .unwrap();
    let h = String::from_utf8_lossy(&out.stdout);
    assert!(h.starts_with("Benchmarks ringreduce's collectives"), "{h}");
    let buffsize = h.lines().find(|l| l.contains("--buffsize")).unwrap();
    let block: String = h
        .lines()
        .skip_while(|l| !l.contains("--buffsize"))
        .take_while(|l| l.contains("--buffsize") || !l.trim_start().starts_with('-'))
        .collect();
    assert_eq!(block.matches("2M").count(), 1, "{buffsize}\n{block}");
    assert!(h.contains("one per GPU"));
}

/// `--algo all`: every algorithm forced in turn, then auto, and the
/// comparison of auto with the fastest; `--graph` is refused without a GPU.
#[test]
fn every_algorithm_then_auto_against_the_best() {
    let json = tmp("algos.json");
    let run = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_ringreduce-bench"))
            .args(["--cpu", "-g", "3", "-b", "64", "-e", "4K", "-f", "8"])
            .args(["--collective", "all", "-n", "1", "-w", "1"])
            .args(extra)
            .output()
            .expect("run the bench")
    };
    let out = run(&[
        "--algo",
        "all",
        "--rematch",
        "2",
        "-J",
        json.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("Auto against the fastest forced algorithm (mean"));
    assert!(stdout.contains("Auto worst ratio to the best:"));
    assert!(stdout.contains("(timed again in 2 alternating windows per placement"));
    let r: Report = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(r.algorithm, "all");
    // 3 sizes: ring, one-shot, local and auto for all three collectives,
    // two-shot for the all-reduce only; auto is local on one CPU
    // communicator.
    assert_eq!(r.rows.len(), 3 * 4 * 3 + 3);
    assert!(r.rows.iter().all(|row| row.in_place.wrong == Some(0)));
    assert!(r.rows.iter().any(|row| row.algorithm == "two-shot"));
    assert_eq!(
        r.rows.iter().filter(|row| row.algorithm == "local").count(),
        2 * 3 * 3
    );
    // Every (collective, size) timed again, Auto beside the fastest.
    assert_eq!(r.auto_rematch.len(), 3 * 3);
    for m in &r.auto_rematch {
        assert!(m.auto_us > 0.0 && m.best_us > 0.0, "{m:?}");
        assert!(r.rows.iter().any(|row| row.collective == m.collective
            && row.size == m.size
            && row.algorithm == m.best));
    }
    let _ = std::fs::remove_file(&json);
    let out = run(&["--rematch", "2"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--rematch needs --algo all"));
    assert!(out.stdout.is_empty());
    let out = run(&["--graph"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--graph needs a GPU"));
}

/// Every schema-2 report committed under `bench/results` still loads, so
/// that keys added since (with their defaults) keep the evidence readable
/// by `ringreduce-compare` and the plots.
#[test]
fn committed_reports_still_parse() {
    fn jsons(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                jsons(&p, out);
            } else if p.extension().is_some_and(|x| x == "json") {
                out.push(p);
            }
        }
    }
    let mut files = Vec::new();
    jsons(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("results"),
        &mut files,
    );
    let mut parsed = 0;
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else {
            continue;
        };
        if v["tool"] != "ringreduce-bench" || v["schema"] != SCHEMA_VERSION {
            continue;
        }
        if let Err(e) = serde_json::from_value::<Report>(v) {
            panic!("{} no longer parses: {e}", f.display());
        }
        parsed += 1;
    }
    assert!(parsed >= 20, "only {parsed} schema-2 reports found");
}
