//! The small-call probes as suite parts: `ringreduce-probe kernel` and
//! `host` at one rank count, each into its own log, with the figures that
//! split a small local all-reduce's time.

use super::exec::run_logged;
use super::parts::Ctx;
use super::Status;
use std::process::Command;
use std::time::Duration;

/// Runs both probes at `k` ranks within `limit`; `part` names the logs.
pub fn probes(ctx: &Ctx, limit: Duration, part: &str, k: usize) -> (Status, String, Vec<String>) {
    if ctx.cpu {
        let why = "the probes time GPU launches; the CPU execution has none";
        return (Status::Skipped, why.into(), vec![]);
    }
    let (mut left, mut logs, mut texts) = (limit, Vec::new(), Vec::new());
    for probe in ["kernel", "host"] {
        let log = ctx.log(&format!("{part}-{probe}"));
        let _ = std::fs::remove_file(&log);
        let mut c = Command::new(ctx.bin_dir.join("ringreduce-probe"));
        c.args([probe, "-g", &k.to_string()]);
        let (ended, took) = run_logged(c, &log, left);
        left = left.saturating_sub(took);
        logs.push(format!("{part}-{probe}.log"));
        texts.push(std::fs::read_to_string(&log).unwrap_or_default());
        if !ended.success() {
            let f = format!("ringreduce-probe {probe} -g {k} failed ({ended:?})");
            return (Status::Fail, f, logs);
        }
    }
    (Status::Pass, figure(&texts[0], &texts[1]), logs)
}

/// The figures of both logs: the library's local kernel per replayed launch
/// against the empty one, and the best round of each host loop (`raw` is
/// the raw launch of the library's own argument, `scalar` the same with
/// the scalar path, `shifted` the library's call moved each time as the
/// bench moves it).
fn figure(kernel: &str, host: &str) -> String {
    let replayed = |shape: &str| {
        kernel
            .lines()
            .find(|l| l.trim_start().starts_with(shape))
            .and_then(|l| l.split_whitespace().last())
            .and_then(|v| v.parse::<f64>().ok())
    };
    let best = |lp: &str| {
        host.lines()
            .filter_map(|l| {
                l.split_once(&format!(": {lp} "))?
                    .1
                    .split_whitespace()
                    .next()
            })
            .filter_map(|v| v.parse::<f64>().ok())
            .reduce(f64::min)
    };
    let us = |v: Option<f64>| v.map_or("?".into(), |v| format!("{v:.2} us"));
    format!(
        "kernel replayed {} per launch (empty {}); per call: library {} ({} shifted), raw {}, scalar {}, empty {}",
        us(replayed("AR 2 f32, library's grid")),
        us(replayed("empty (no ranks)")),
        us(best("library")),
        us(best("library shifted")),
        us(best("raw aligned")),
        us(best("raw")),
        us(best("empty")),
    )
}

#[cfg(test)]
mod tests {
    use super::figure;

    #[test]
    fn reads_both_probes_logs() {
        let kernel = "k = 8: 1000 launches per graph, best of 5 replays, us per launch
  empty (no ranks)               0.791
  AR 2 f32, library's grid       2.359
  AR 2 f32, one block            2.343
";
        let host = "k = 8, Local all-reduce of 2 f32, 8 blocks; per call:
  round 0: library 6.403 us host, 6.403 us between events
  round 1: library 5.934 us host, 5.934 us between events
  round 0: library shifted 6.812 us host, 6.812 us between events
  round 0: raw 3.699 us host, 3.737 us between events
  round 0: raw aligned 3.365 us host, 3.400 us between events
  round 1: raw aligned 3.360 us host, 3.400 us between events
  round 0: empty 2.701 us host, 2.701 us between events
  round 1: empty 2.638 us host, 2.638 us between events
";
        assert_eq!(
            figure(kernel, host),
            "kernel replayed 2.36 us per launch (empty 0.79 us); per call: library 5.93 us (6.81 us shifted), raw 3.36 us, scalar 3.70 us, empty 2.64 us"
        );
        assert!(figure("", "").contains("library ?"));
    }
}
