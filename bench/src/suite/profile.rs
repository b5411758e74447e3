//! Kernel times from Nsight Compute (`ncu`): the GPU's own duration of
//! each collective kernel, apart from the host's launch and the gaps
//! between launches that the bench's time per operation includes, so a
//! latency can be split into the kernel's part and the rest.

use super::ctx::{gpu_tool, Ctx};
use super::exec::{run_logged, Ended};
use super::Status;
use std::process::Command;
use std::time::Duration;

/// `ncu`'s CSV rows of `gpu__time_duration.sum` in `log`, in
/// nanoseconds (`--print-units base`), in launch order.
pub fn durations_ns(log: &str) -> Vec<f64> {
    log.lines()
        .filter(|l| l.starts_with('"') && l.contains("\"gpu__time_duration.sum\""))
        .filter_map(|l| {
            let last = l.trim_end().rsplit("\",\"").next()?;
            last.trim_matches('"').replace(',', "").parse().ok()
        })
        .collect()
}

/// The median of `v` (`None` when empty).
pub fn median(v: &[f64]) -> Option<f64> {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    (!s.is_empty()).then(|| s[s.len() / 2])
}

/// The kernels a part times.
pub struct Kernels<'a> {
    /// A regular expression for their names.
    pub regex: &'a str,
    /// Launches of them to leave out before the timed ones: the bench's
    /// ceilings launch the local entry thousands of times with no work.
    pub skip: usize,
}

impl Kernels<'_> {
    /// `ncu`'s filter arguments.
    fn filter(&self) -> Vec<String> {
        vec![
            "--kernel-name".into(),
            format!("regex:^{}$", self.regex),
            "--launch-skip".into(),
            self.skip.to_string(),
        ]
    }
}

/// The bench at each of `sizes` under `ncu`, one process per size, each
/// logged; the figure is the median kernel time per size. Skipped on the
/// CPU execution and without `ncu`.
pub fn kernel_times(
    ctx: &Ctx,
    limit: Duration,
    name: &str,
    common: &str,
    kernels: &Kernels<'_>,
    sizes: &[&str],
) -> (Status, String, Vec<String>) {
    let ncu = match gpu_tool(ctx, "ncu", "Nsight Compute times GPU kernels") {
        Ok(t) => t,
        Err(skipped) => return skipped,
    };
    let mut left = limit;
    let (mut figures, mut logs) = (Vec::new(), Vec::new());
    for size in sizes {
        let log = ctx.out.join(format!("{name}-{size}.log"));
        let _ = std::fs::remove_file(&log);
        let mut c = Command::new(&ncu);
        // Nsight Compute locks the clocks to base and flushes the caches
        // around each kernel by default; this project leaves the GPU's
        // clocks alone, and a latency is measured with warm caches.
        c.args(["--clock-control", "none", "--cache-control", "none"])
            .args(["--csv", "--print-units", "base"])
            .args(["--metrics", "gpu__time_duration.sum"])
            .args(kernels.filter())
            .arg(ctx.bin_dir.join("ringreduce-bench"))
            .args(common.split_whitespace())
            .args(["-b", size, "-e", size]);
        let (e, took) = run_logged(c, &log, left);
        left = left.saturating_sub(took);
        logs.push(format!("{name}-{size}.log"));
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let d = durations_ns(&text);
        match (&e, median(&d)) {
            (Ended::Exited(s), Some(m)) if s.success() => figures.push(format!(
                "{size}: {:.2} us median of {} kernels",
                m / 1000.0,
                d.len()
            )),
            (Ended::TimedOut, _) => return (Status::TimedOut, "killed at its limit".into(), logs),
            _ => {
                return (
                    Status::Fail,
                    format!("{size}: {e:?}, {} kernel times", d.len()),
                    logs,
                )
            }
        }
    }
    (Status::Pass, figures.join("; "), logs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_ncu_csv_rows_in_base_units() {
        let log = "==PROF== Connected\n\
            \"ID\",\"Kernel Name\",\"Metric Name\",\"Metric Unit\",\"Metric Value\"\n\
            \"0\",\"ringreduce_local_float_sum\",\"gpu__time_duration.sum\",\"ns\",\"7,168\"\n\
            # a bench line\n\
            \"1\",\"ringreduce_local_float_sum\",\"gpu__time_duration.sum\",\"ns\",\"6912\"\n\
            \"2\",\"ringreduce_local_float_sum\",\"gpu__time_duration.sum\",\"ns\",\"9000\"\n";
        let d = durations_ns(log);
        assert_eq!(d, vec![7168.0, 6912.0, 9000.0]);
        assert_eq!(median(&d), Some(7168.0));
        assert_eq!(median(&[]), None);
    }

    #[test]
    fn the_filter_skips_the_ceilings_launches() {
        let k = Kernels {
            regex: "ringreduce_(local_)?float_sum",
            skip: crate::ceilings::LOCAL_FLOOR_LAUNCHES,
        };
        let f = k.filter();
        assert_eq!(f[1], "regex:^ringreduce_(local_)?float_sum$");
        let skip = crate::ceilings::LOCAL_FLOOR_LAUNCHES.to_string();
        assert_eq!(f[2..], ["--launch-skip".to_string(), skip]);
    }
}
