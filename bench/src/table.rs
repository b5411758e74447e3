//! The nccl-tests table: the same columns, widths and definitions, so our
//! output pastes beside theirs and reads the same way.

use crate::report::{AutoVsBest, Ceilings, Perf, Report, Row};
use ringreduce::Algo;
use std::fmt::Write;

/// nccl-tests' time format: fewer decimals as the time grows.
pub fn fmt_time(us: f64) -> String {
    if us >= 10_000.0 {
        format!("{us:7.0}")
    } else if us >= 100.0 {
        format!("{us:7.1}")
    } else {
        format!("{us:7.2}")
    }
}

fn fmt_perf(p: &Perf) -> String {
    let wrong = match p.wrong {
        Some(w) => format!("{w:>6}"),
        None => format!("{:>6}", "N/A"),
    };
    format!(
        "  {}  {:6.2}  {:6.2}  {}",
        fmt_time(p.time_us),
        p.algbw,
        p.busbw,
        wrong
    )
}

fn fmt_ratio(r: Option<f64>) -> String {
    match r {
        Some(r) => format!("{r:6.3}"),
        None => format!("{:>6}", "-"),
    }
}

/// The column header; `ceiling` names the ratio columns appended after
/// nccl-tests' own.
pub fn header(ceiling: &str) -> String {
    let mut s = String::new();
    writeln!(
        s,
        "#{:>62}{:>35}{:>20}{:>22}",
        "out-of-place", "in-place", "busbw / ceiling", "vs device copy"
    )
    .unwrap();
    writeln!(
        s,
        "#{:>11}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>6}  {:>6}  {:>4}  {:>6}  {:>6}",
        "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw",
        "busbw", "#wrong", "oop", "ip", "C", "oop", "ip"
    )
    .unwrap();
    writeln!(
        s,
        "#{:>11}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>13}",
        "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "", ceiling
    )
    .unwrap();
    s
}

/// nccl-tests' columns, then each placement's busbw over the ceiling, the
/// channels, and each placement's ratio to the device-wide copy.
pub fn row(r: &Row) -> String {
    format!(
        "{:>12}  {:>12}  {:>8}  {:>6}  {:>6}{}{}  {}  {}  {:>4}  {}  {}",
        r.size,
        r.count,
        r.dtype,
        r.op,
        r.root,
        fmt_perf(&r.out_of_place),
        fmt_perf(&r.in_place),
        fmt_ratio(r.out_of_place.busbw_vs_ceiling),
        fmt_ratio(r.in_place.busbw_vs_ceiling),
        r.channels,
        fmt_ratio(r.out_of_place.vs_device_copy),
        fmt_ratio(r.in_place.vs_device_copy)
    )
}

pub fn ceilings(c: &Ceilings) -> String {
    format!(
        "# Ceilings (same process, before the sweep; copy GB/s count bytes copied once):\n\
         #   device-wide copy     : {:9.2} GB/s  (the faster of: copy kernel {:.2} on {} blocks, driver {:.2})\n\
         #   single-block copy    : {:9.2} GB/s  (one block of {} threads: the one-block ceiling)\n\
         #   single-block reduce  : {:9.2} GB/s  (two inputs, one output; output bytes)\n\
         #   flag ping-pong (RTT) : {:9.2} us\n\
         #   empty launch         : {:9.2} us  (back to back, per launch; host {:.2} us of it)\n\
         #   empty local launch   : {:9.2} us  (the local entry, no ranks, 8 blocks; host {:.2} us)\n",
        c.device_copy_gbps,
        c.device_copy_kernel_gbps,
        c.device_copy_blocks,
        c.device_copy_driver_gbps,
        c.block_copy_gbps,
        ringreduce::kernels::abi::BLOCK_THREADS,
        c.block_reduce_gbps,
        c.pingpong_rtt_us,
        c.launch_us,
        c.launch_host_us,
        c.local_launch_us,
        c.local_launch_host_us
    )
}

/// Rows' average busbw over both placements, as nccl-tests averages.
pub fn avg_busbw(rows: &[Row]) -> f64 {
    if rows.is_empty() {
        return 0.0;
    }
    let sum: f64 = rows
        .iter()
        .map(|r| r.out_of_place.busbw + r.in_place.busbw)
        .sum();
    sum / (2 * rows.len()) as f64
}

pub fn wrong_total(rows: &[Row]) -> u64 {
    rows.iter()
        .map(|r| r.out_of_place.wrong.unwrap_or(0) + r.in_place.wrong.unwrap_or(0))
        .sum()
}

pub fn footer(rows: &[Row]) -> String {
    let w = wrong_total(rows);
    format!(
        "# Out of bounds values : {} {}\n# Avg bus bandwidth    : {:.4} \n#\n",
        w,
        if w == 0 { "OK" } else { "FAILED" },
        avg_busbw(rows)
    )
}

/// The header lines before the columns: setup and device.
pub fn preamble(r: &Report) -> String {
    let mut s = String::new();
    writeln!(
        s,
        "# ringreduce {} {}: nRanks {} iters {} warmup {} repeats {} blocking {} buffsize {} channels {} algo {} prefetch {} ring {:?}",
        r.version,
        r.collective,
        r.ranks,
        r.iters,
        r.warmup,
        r.repeats,
        r.blocking as u8,
        r.buffsize,
        r.channels.map_or("auto".to_string(), |c| c.to_string()),
        if r.algorithm.is_empty() {
            "auto"
        } else {
            &r.algorithm
        },
        r.prefetch_rounds,
        r.ring_order
    )
    .unwrap();
    writeln!(s, "# Command: {}", r.command_line.join(" ")).unwrap();
    if r.processes > 1 {
        let gpus = if r.devices.is_empty() {
            String::new()
        } else {
            format!(", devices {:?}", r.devices)
        };
        writeln!(
            s,
            "# Ranks: one process per rank, {} processes{gpus}",
            r.processes
        )
        .unwrap();
    } else if !r.devices.is_empty() {
        let one_gpu = r.devices.iter().all(|&d| d == r.devices[0]);
        let how = if one_gpu && r.devices.len() > 1 {
            format!("{} virtual ranks on GPU {}", r.devices.len(), r.devices[0])
        } else {
            format!("one rank per GPU, devices {:?}", r.devices)
        };
        writeln!(s, "# Ranks: {how}").unwrap();
    }
    writeln!(
        s,
        "# Device: {} (driver {}), execution: {}, kernels: {}",
        r.device, r.driver_version, r.execution, r.kernels
    )
    .unwrap();
    s
}

/// One [`AutoVsBest`] per (collective, size) that `Auto` and a forced
/// algorithm both ran; `per_algo` holds each sweep's rows (`None` or
/// `Some(Auto)` is `Auto`). Times are the mean of out-of-place and in-place.
pub fn compare_auto(per_algo: &[(Option<Algo>, Vec<Row>)]) -> Vec<AutoVsBest> {
    let mean = |r: &Row| (r.out_of_place.time_us + r.in_place.time_us) / 2.0;
    let is_auto = |a: &Option<Algo>| matches!(a, None | Some(Algo::Auto));
    let mut out = Vec::new();
    for (ai, (_, rows)) in per_algo.iter().enumerate().filter(|(_, (a, _))| is_auto(a)) {
        for r in rows {
            let best = per_algo
                .iter()
                .enumerate()
                .filter(|(_, (a, _))| !is_auto(a))
                .flat_map(|(i, (_, rows))| rows.iter().map(move |f| (i, f)))
                .filter(|(_, f)| f.collective == r.collective && f.size == r.size)
                .min_by(|x, y| mean(x.1).total_cmp(&mean(y.1)));
            if let Some((bi, b)) = best {
                out.push(AutoVsBest {
                    collective: r.collective.clone(),
                    size: r.size,
                    best: b.algorithm.clone(),
                    best_us: mean(b),
                    auto: r.algorithm.clone(),
                    auto_us: mean(r),
                    sweeps: (ai, bi),
                });
            }
        }
    }
    out
}

/// The `--algo all` table: per collective and size, the fastest forced
/// algorithm, what `Auto` chose, and how much slower it was; `how` says
/// how the times were taken.
pub fn auto_vs_best(rows: &[AutoVsBest], how: &str) -> String {
    let mut s = format!(
        "#\n# Auto against the fastest forced algorithm ({how}):\n#  collective          size       best  best(us)       auto  auto(us)  auto/best\n",
    );
    for r in rows {
        writeln!(
            s,
            "  {:<14} {:>10} {:>10} {:>9.2} {:>10} {:>9.2} {:>10.3}",
            r.collective,
            r.size,
            r.best,
            r.best_us,
            r.auto,
            r.auto_us,
            r.ratio()
        )
        .unwrap();
    }
    let worst = rows.iter().map(AutoVsBest::ratio).fold(0.0, f64::max);
    writeln!(s, "# Auto worst ratio to the best: {worst:.3}").unwrap();
    // Where Auto ran the best row's algorithm, two timings of one kernel
    // differ only by run-to-run noise (host stalls, on host-bound sizes);
    // the choice itself is judged where it ran another.
    let other: Vec<&AutoVsBest> = rows.iter().filter(|r| r.auto != r.best).collect();
    let worst_other = other.iter().map(|r| r.ratio()).fold(0.0, f64::max);
    writeln!(
        s,
        "# Auto ran the fastest algorithm at {} of {} sizes; worst ratio where it ran another: {}",
        rows.len() - other.len(),
        rows.len(),
        match other.is_empty() {
            true => "none".to_string(),
            false => format!("{worst_other:.3}"),
        }
    )
    .unwrap();
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn perf(t: f64, a: f64, b: f64, w: u64, r: f64) -> Perf {
        Perf {
            time_us: t,
            algbw: a,
            busbw: b,
            wrong: Some(w),
            busbw_vs_ceiling: Some(r),
            vs_device_copy: Some(r / 2.0),
            host_us: None,
        }
    }

    /// A golden rendering: column positions must match nccl-tests'
    /// (`%12li  %12li  %8s  %6s  %6i` then `  %7s  %6.2f  %6.2f  %6s` twice).
    #[test]
    fn golden_rows_and_footer() {
        let rows = vec![
            Row {
                collective: "reduce_scatter".into(),
                channels: 1,
                algorithm: "one-shot".into(),
                backend: "ringreduce".into(),
                size: 8,
                count: 0,
                dtype: "float".into(),
                op: "sum".into(),
                root: -1,
                out_of_place: perf(0.12, 0.0, 0.0, 0, 0.0),
                in_place: perf(0.11, 0.0, 0.0, 0, 0.0),
            },
            Row {
                collective: "reduce_scatter".into(),
                channels: 12,
                algorithm: "ring".into(),
                backend: "ringreduce".into(),
                size: 268435456,
                count: 16777216,
                dtype: "float".into(),
                op: "sum".into(),
                root: -1,
                out_of_place: perf(2345.678, 114.44, 85.83, 0, 0.7153),
                in_place: perf(12345.6, 21.74, 16.31, 3, 0.1359),
            },
        ];
        let got: Vec<String> = rows.iter().map(row).collect();
        assert_eq!(
            got[0],
            "           8             0     float     sum      -1     0.12    0.00    0.00       0     0.11    0.00    0.00       0   0.000   0.000     1   0.000   0.000"
        );
        assert_eq!(
            got[1],
            "   268435456      16777216     float     sum      -1   2345.7  114.44   85.83       0    12346   21.74   16.31       3   0.715   0.136    12   0.358   0.068"
        );
        assert_eq!(
            footer(&rows),
            "# Out of bounds values : 3 FAILED\n# Avg bus bandwidth    : 25.5350 \n#\n"
        );
        // The header's unit line lines up with the row columns.
        let h = header("1-block copy");
        let units = h.lines().nth(2).unwrap();
        assert_eq!(
            units.find("(us)").unwrap() + 4,
            got[1].find("2345.7").unwrap() + 6
        );
    }

    #[test]
    fn auto_is_compared_with_the_fastest_forced_algorithm() {
        let at = |alg: &str, size: u64, t: f64| Row {
            collective: "all_reduce".into(),
            channels: 1,
            algorithm: alg.into(),
            backend: "ringreduce".into(),
            size,
            count: size / 4,
            dtype: "float".into(),
            op: "sum".into(),
            root: -1,
            out_of_place: perf(t, 0.0, 0.0, 0, 0.0),
            in_place: perf(t + 2.0, 0.0, 0.0, 0, 0.0),
        };
        let per_algo = vec![
            (
                Some(Algo::Ring),
                vec![at("ring", 8, 20.0), at("ring", 1024, 20.0)],
            ),
            (
                Some(Algo::OneShot),
                vec![at("one-shot", 8, 4.0), at("one-shot", 1024, 30.0)],
            ),
            (
                Some(Algo::Auto),
                vec![at("one-shot", 8, 4.4), at("one-shot", 1024, 30.0)],
            ),
        ];
        let got = compare_auto(&per_algo);
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].best.as_str(), got[0].best_us), ("one-shot", 5.0));
        assert!((got[0].ratio() - 5.4 / 5.0).abs() < 1e-12);
        assert_eq!(
            (got[1].best.as_str(), got[1].auto.as_str()),
            ("ring", "one-shot")
        );
        assert!((got[1].ratio() - 31.0 / 21.0).abs() < 1e-12);
        assert_eq!((got[0].sweeps, got[1].sweeps), ((2, 1), (2, 0)));
        let text = auto_vs_best(&got, "mean");
        assert!(text.contains("worst ratio to the best: 1.476"));
        assert!(text.contains(
            "fastest algorithm at 1 of 2 sizes; worst ratio where it ran another: 1.476"
        ));
        let same = vec![per_algo[1].clone(), per_algo[2].clone()];
        let text = auto_vs_best(&compare_auto(&same), "mean");
        assert!(text.contains("at 2 of 2 sizes; worst ratio where it ran another: none"));
    }
}
