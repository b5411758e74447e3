//! The small-call probes as suite parts: `ringreduce-probe kernel` and
//! `host` at one rank count, each into its own log, with the figures that
//! split a small local all-reduce's time.

use super::ctx::Ctx;
use super::exec::run_logged;
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

/// The first call from a cold start: `ringreduce-probe cold` at k = 8 in a
/// fresh process whose JIT cache is a new empty folder, with
/// `CUDA_FORCE_PTX_JIT=1` so that embedded SASS cannot hide the JIT. Its
/// JSON (`cold-start.json`) holds every first call and module load.
pub fn cold_start(ctx: &Ctx, limit: Duration, part: &str) -> (Status, String, Vec<String>) {
    if ctx.cpu {
        let why = "a cold start is the GPU driver's JIT; the CPU execution has none";
        return (Status::Skipped, why.into(), vec![]);
    }
    let log = ctx.log(part);
    let json = ctx.out.join(format!("{part}.json"));
    let cache = ctx.out.join(format!("{part}-jit-cache"));
    let _ = std::fs::remove_dir_all(&cache);
    if let Err(e) = std::fs::create_dir_all(&cache) {
        return (Status::Fail, format!("{}: {e}", cache.display()), vec![]);
    }
    let mut c = Command::new(ctx.bin_dir.join("ringreduce-probe"));
    c.args(["cold", "-g", "8", "-J"])
        .arg(&json)
        .env("CUDA_CACHE_PATH", &cache)
        .env("CUDA_FORCE_PTX_JIT", "1");
    let (ended, _) = run_logged(c, &log, limit);
    let _ = std::fs::remove_dir_all(&cache);
    let logs = vec![format!("{part}.log"), format!("{part}.json")];
    if !ended.success() {
        return (
            Status::Fail,
            format!("ringreduce-probe cold failed ({ended:?})"),
            logs,
        );
    }
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    (Status::Pass, cold_figure(&text), logs)
}

/// The cold start's figures from its log: when the first f32 sum
/// all-reduce ended, when the last type's did, and the modules loaded.
fn cold_figure(log: &str) -> String {
    let at = |l: &str| {
        l.split_once("done at ")
            .and_then(|(_, r)| r.split_whitespace().next())
            .map(str::to_string)
    };
    let firsts: Vec<&str> = log.lines().filter(|l| l.starts_with("first ")).collect();
    let modules: Vec<usize> = log
        .lines()
        .filter(|l| l.starts_with("module "))
        .filter_map(|l| {
            l.split_once(": ")?
                .1
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .collect();
    format!(
        "first f32 sum all-reduce (k = 8) at {} s from process start; all 10 types by {} s; {} modules loaded, largest {} bytes",
        firsts.first().and_then(|l| at(l)).unwrap_or_else(|| "?".into()),
        firsts.last().and_then(|l| at(l)).unwrap_or_else(|| "?".into()),
        modules.len(),
        modules.iter().max().copied().unwrap_or(0),
    )
}

#[cfg(test)]
mod tests {
    use super::{cold_figure, figure};

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

    #[test]
    fn the_cold_figure_reads_the_probes_lines() {
        let log = "to main 0.012 s; communicator of 8 ranks at 0.400 s\n\
            first float sum all-reduce: done at 0.912 s, took 0.500 s\n\
            first int8 sum all-reduce: done at 1.300 s, took 0.380 s\n\
            module ringreduce_local_float_sum: 46096 bytes, loaded in 0.300 s from PTX (driver JIT)\n\
            module ringreduce_local_uint8_sum: 52000 bytes, loaded in 0.310 s from PTX (driver JIT)\n";
        let f = cold_figure(log);
        assert!(f.contains("at 0.912 s"), "{f}");
        assert!(f.contains("by 1.300 s"), "{f}");
        assert!(f.contains("2 modules loaded, largest 52000 bytes"), "{f}");
    }
}
