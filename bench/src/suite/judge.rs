//! Judging a part's run: a test log or a sweep's report into a status and
//! the figure the summary prints.

use super::exec::Ended;
use super::figures::{skips, sum_before, tally};
use super::Status;
use crate::report::Report;
use std::path::Path;

/// A test part's status: failed, timed out, skipped (every test said it
/// skipped, as GPU tests do without a GPU), or passed; and its figure.
pub fn judge_tests(ended: &[Ended], log: &str) -> (Status, String) {
    if let Some(Ended::NotStarted(why)) = ended.iter().find(|e| matches!(e, Ended::NotStarted(_))) {
        return (Status::Fail, format!("not started: {why}"));
    }
    if ended.iter().any(|e| matches!(e, Ended::TimedOut)) {
        return (Status::TimedOut, "killed at its time limit".into());
    }
    let t = tally(log);
    let collectives = sum_before(log, " collectives");
    let wrong = sum_before(log, " wrong");
    if t.failed > 0 || !ended.iter().all(Ended::success) || wrong > 0 {
        return (
            Status::Fail,
            format!(
                "{} of {} failed, {wrong} wrong",
                t.failed,
                t.passed + t.failed
            ),
        );
    }
    let skipped = skips(log);
    // The GPU harness reports tests it cannot run as ignored, with a
    // "skipped: why" line.
    if t.passed == 0 && t.ignored > 0 {
        let why = skipped
            .first()
            .and_then(|l| l.split(": skipped: ").nth(1))
            .unwrap_or("every test was ignored");
        return (Status::Skipped, format!("skipped: {why}"));
    }
    if t.binaries == 0 || t.passed == 0 {
        return (Status::Fail, "no test ran".into());
    }
    let mut f = format!("{} passed", t.passed);
    if collectives > 0 {
        f += &format!("; {collectives} collectives checked, 0 wrong");
    }
    if !skipped.is_empty() {
        f += &format!("; {} skipped", skipped.len());
    }
    if let Some(image) = kernel_image(log) {
        f += &format!("; kernels on sm_{image}");
    }
    (Status::Pass, f)
}

/// What the GPU tests' `gpu_kernel_image` printed: the image the kernels
/// loaded from and the first communicator's time (the harness may print
/// it after a test's name on the same line).
fn kernel_image(log: &str) -> Option<&str> {
    log.lines()
        .find_map(|l| l.split_once("kernels on sm_").map(|(_, rest)| rest.trim()))
}

/// A sweep's status and figure: busbw (and its ratio to the single-block
/// copy) at the largest size, or the row count for multi-type sweeps.
pub fn judge_sweep(ended: &Ended, report: Option<&Report>, cpu: bool) -> (Status, String) {
    match ended {
        Ended::NotStarted(why) => return (Status::Fail, format!("not started: {why}")),
        Ended::TimedOut => return (Status::TimedOut, "killed at its time limit".into()),
        Ended::Exited(s) if !s.success() => {
            return (Status::Fail, format!("the bench exited with {s}"))
        }
        Ended::Exited(_) => {}
    }
    let Some(r) = report else {
        return (Status::Fail, "no JSON report".into());
    };
    if !cpu && r.execution != "gpu" {
        return (
            Status::Skipped,
            "skipped: no GPU (the bench ran on the CPU execution)".into(),
        );
    }
    let wrong: u64 = r
        .rows
        .iter()
        .flat_map(|row| [&row.out_of_place, &row.in_place])
        .map(|p| p.wrong.unwrap_or(0))
        .sum::<u64>()
        + r.out_of_bounds;
    if wrong > 0 {
        return (Status::Fail, format!("{wrong} wrong values"));
    }
    let Some(last) = r.rows.iter().map(|row| row.size).max() else {
        return (Status::Fail, "no rows".into());
    };
    let top: Vec<&crate::report::Row> = r.rows.iter().filter(|row| row.size == last).collect();
    let collectives = top
        .iter()
        .map(|row| &row.collective)
        .collect::<std::collections::BTreeSet<_>>();
    let f = if top.len() > collectives.len() {
        format!(
            "{} rows, 0 wrong; avg busbw {:.2} GB/s",
            r.rows.len(),
            r.avg_busbw
        )
    } else {
        // One row per collective at the largest size: its busbw and ratios.
        let each: Vec<String> = top
            .iter()
            .map(|row| {
                let p = &row.out_of_place;
                let ratio = |v: Option<f64>, what: &str| {
                    v.map(|v| format!(", {v:.3} x {what}")).unwrap_or_default()
                };
                format!(
                    "{} {:.2} GB/s (C={}{}{})",
                    row.collective,
                    p.busbw,
                    row.channels,
                    ratio(p.busbw_vs_ceiling, "1-block copy"),
                    ratio(p.vs_device_copy, "device copy")
                )
            })
            .collect();
        format!(
            "at {}: {}; {} rows, 0 wrong",
            crate::sizes::human(last),
            each.join("; "),
            r.rows.len()
        )
    };
    // Auto against the fastest forced algorithm, timed side by side.
    let worst = r.auto_rematch.iter().map(|m| m.ratio()).fold(0.0, f64::max);
    let f = match r.auto_rematch.is_empty() {
        true => f,
        false => format!("{f}; Auto / fastest, timed side by side: worst {worst:.3}"),
    };
    (Status::Pass, f)
}

pub fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    fn ok() -> Ended {
        Ended::Exited(std::process::ExitStatus::from_raw(0))
    }

    #[test]
    fn ignored_gpu_tests_are_skipped_not_passed() {
        let log = "GPU tests: skipped: no CUDA driver\ntest gpu_matrix ... ignored\n\
                   test result: ok. 0 passed; 0 failed; 4 ignored; 0 measured\n";
        let (s, f) = judge_tests(&[ok()], log);
        assert_eq!(s, Status::Skipped);
        assert_eq!(f, "skipped: no CUDA driver");
    }

    #[test]
    fn passes_fails_and_empty_runs() {
        let pass = "gpu matrix: 10 collectives, 5 elements, 0 wrong\ntest result: ok. 1 passed; 0 failed; 0 ignored\n";
        assert_eq!(
            judge_tests(&[ok()], pass),
            (
                Status::Pass,
                "1 passed; 10 collectives checked, 0 wrong".into()
            )
        );
        let with_image = format!(
            "test gpu_kernel_image ... kernels on sm_90: SASS sm_90, first communicator in 1.20s\n{pass}"
        );
        assert_eq!(
            judge_tests(&[ok()], &with_image).1,
            "1 passed; 10 collectives checked, 0 wrong; \
             kernels on sm_90: SASS sm_90, first communicator in 1.20s"
        );
        let failed = "test result: FAILED. 1 passed; 1 failed; 0 ignored\n";
        assert_eq!(judge_tests(&[ok()], failed).0, Status::Fail);
        let wrong =
            "soak: 5 collectives, 2 wrong\ntest result: ok. 1 passed; 0 failed; 0 ignored\n";
        assert_eq!(judge_tests(&[ok()], wrong).0, Status::Fail);
        assert_eq!(judge_tests(&[ok()], "").0, Status::Fail);
        assert_eq!(judge_tests(&[Ended::TimedOut], pass).0, Status::TimedOut);
    }
}
