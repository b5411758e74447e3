//! The gradient layer's rows (`--collective fused|half|sparse`): each
//! timed against its baseline in the same run, the ratio reported as
//! `speedup`.
//! - fused: ResNet-50's 161 gradients (`bench/data/resnet50_grads.tsv`),
//!   one fused all-reduce with the default 25 MiB buckets, and the
//!   streaming form (pushed in backward order, then `wait`), and both again
//!   with the gradients stored in the buckets (`bucketed`, no packing
//!   copies), against one all-reduce per tensor;
//! - half: the f16 and bf16 all-reduce of `f32` data, conversions
//!   included, against the `f32` all-reduce of the same data;
//! - sparse: top-K at a sweep of densities, against the dense `f32`
//!   all-reduce, and the break-even density.
//!
//! Beside them, the unit to read them by: `pass_us`, one elementwise pass
//! on every rank at once that reads two `f32` arrays of the row's length
//! and writes one (the error-feedback add). On virtual ranks all ranks
//! share one HBM, so a path that makes more such passes than the baseline
//! cannot beat it however little it sends.

use crate::metrics::CollectiveArg;
use crate::report::now_iso;
use ringreduce::grad::GradBackend;
use ringreduce::half::f16;
use ringreduce::kernels::grad::abi::{tiles_for, SelectState, Task, TaskKind, SELECT_PASSES};
use ringreduce::{Collective, GradConfig, GradSync, Op, Precision, Region, Sparsity};
use serde::{Deserialize, Serialize};
use std::time::Instant;

/// ResNet-50's gradient lengths, in `named_parameters()` order.
pub fn resnet50() -> Vec<usize> {
    include_str!("../data/resnet50_grads.tsv")
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.split('\t').nth(2)?.parse().ok())
        .collect()
}

/// Densities of the sparse sweep.
pub const DENSITIES: [f64; 8] = [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2];

/// One row of the table and the JSON.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GradRow {
    pub collective: String,
    pub variant: String,
    /// Bytes of `f32` gradients per rank.
    pub size: u64,
    pub count: u64,
    pub time_us: f64,
    pub baseline: String,
    pub baseline_us: f64,
    /// `baseline_us / time_us`.
    pub speedup: f64,
    /// Parts of the row timed alone in the same run (e.g. the `f16`
    /// all-reduce of a half row without its conversions).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<PartTime>,
}

/// One part of a row, timed alone.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PartTime {
    pub name: String,
    pub time_us: f64,
}

/// The JSON of a gradient-layer run.
#[derive(Debug, Serialize, Deserialize)]
pub struct GradReport {
    pub tool: String,
    pub command_line: Vec<String>,
    pub date: String,
    pub execution: String,
    pub device: String,
    pub ranks: usize,
    pub iters: usize,
    pub warmup: usize,
    pub rows: Vec<GradRow>,
    /// The lowest density of the sweep at which sparse was no faster than
    /// dense, if any.
    pub break_even_density: Option<f64>,
    /// One read-two-write-one pass over the half and sparse rows' size on
    /// every rank at once (see the module's doc), in microseconds.
    #[serde(default)]
    pub pass_us: Option<f64>,
}

/// What a run of [`rows`] measured.
#[derive(Debug, Default)]
pub struct Measured {
    pub rows: Vec<GradRow>,
    pub break_even: Option<f64>,
    pub pass_us: Option<f64>,
}

/// Mean time of one `f` over `iters` back-to-back calls, after `warmup`,
/// in microseconds (the backend synchronised before and after).
fn time<C: GradBackend>(
    comm: &C,
    warmup: usize,
    iters: usize,
    f: impl FnMut() -> ringreduce::Result<()>,
) -> Result<f64, String> {
    Ok(time_and_enqueue(comm, warmup, iters, f)?.0)
}

/// [`time`], and the mean time the host took to enqueue one `f` (what
/// the calls cost before the final synchronisation). When the two are
/// close, the host, not the device, sets the pace.
fn time_and_enqueue<C: GradBackend>(
    comm: &C,
    warmup: usize,
    iters: usize,
    mut f: impl FnMut() -> ringreduce::Result<()>,
) -> Result<(f64, f64), String> {
    let e = |e: ringreduce::Error| e.to_string();
    for _ in 0..warmup {
        f().map_err(e)?;
    }
    comm.synchronize().map_err(e)?;
    let t0 = Instant::now();
    for _ in 0..iters {
        f().map_err(e)?;
    }
    let enqueued = t0.elapsed();
    comm.synchronize().map_err(e)?;
    let per = |d: std::time::Duration| d.as_secs_f64() * 1e6 / iters.max(1) as f64;
    Ok((per(t0.elapsed()), per(enqueued)))
}

fn tensor<C: GradBackend>(comm: &C, n: usize, seed: u32) -> Result<Vec<C::Buf<f32>>, String> {
    comm.local_ranks()
        .map(|u| {
            let v: Vec<f32> = (0..n)
                .map(|i| ((i as u32 ^ seed ^ (u as u32 * 7919)) % 61) as f32 - 30.0)
                .collect();
            comm.upload(u, &v).map_err(|e| e.to_string())
        })
        .collect()
}

/// Gradient-like data for the sparse rows: signed magnitudes spread over
/// six decades, so that the selection's digits fall as they do for real
/// gradients rather than on the few integers of [`tensor`].
fn spread_tensor<C: GradBackend>(
    comm: &C,
    n: usize,
    seed: u32,
) -> Result<Vec<C::Buf<f32>>, String> {
    comm.local_ranks()
        .map(|u| {
            let v: Vec<f32> = (0..n)
                .map(|i| {
                    let x = (i as u32 ^ seed.rotate_left(16) ^ (u as u32).rotate_left(24))
                        .wrapping_mul(0x9e37_79b9);
                    let x = x ^ (x >> 15);
                    let m = 1.0 + (x >> 9) as f32 / (1u32 << 23) as f32;
                    let v = m * (-(((x >> 1) % 20) as f32)).exp2();
                    if x & 1 == 1 {
                        -v
                    } else {
                        v
                    }
                })
                .collect();
            comm.upload(u, &v).map_err(|e| e.to_string())
        })
        .collect()
}

/// Mean time of `task(u)` run on every rank `u`'s own queue at once.
///
/// # Safety
/// Every task's addresses must be valid for it on its rank until the
/// timing returns (it synchronises before it does).
unsafe fn time_tasks<C: GradBackend>(
    comm: &C,
    warmup: usize,
    iters: usize,
    task: impl Fn(usize) -> Task,
) -> Result<f64, String> {
    let own = comm.own_queues();
    time(comm, warmup, iters, || {
        for (u, q) in own.iter().enumerate() {
            // SAFETY: the caller's promise.
            unsafe { comm.run_task(u, q, task(u), Vec::new())? };
        }
        Ok(())
    })
}

/// `n` elements of `T` on every rank, zeroed.
fn zeroed<C: GradBackend, T: ringreduce::RsElement>(
    comm: &C,
    n: usize,
) -> Result<Vec<C::Buf<T>>, String> {
    let own = comm.own_queues();
    own.iter()
        .enumerate()
        .map(|(u, q)| comm.alloc::<T>(u, q, n).map_err(|e| e.to_string()))
        .collect()
}

/// [`pass_us`](GradReport::pass_us) at `n` elements: the error-feedback
/// add `w = a + b` on every rank's own queue at once.
fn time_pass<C: GradBackend>(
    comm: &C,
    n: usize,
    warmup: usize,
    iters: usize,
) -> Result<f64, String> {
    let (a, b) = (tensor(comm, n, 5)?, tensor(comm, n, 6)?);
    let w = zeroed::<C, f32>(comm, n)?;
    let t = |u: usize| Task {
        kind: TaskKind::Feedback as u64,
        src: comm.addr(u, &a[u]),
        aux: comm.addr(u, &b[u]),
        dst: comm.addr(u, &w[u]),
        n: n as u64,
        ..Task::default()
    };
    // SAFETY: `a`, `b` and `w` hold `n` f32s on each rank and outlive it.
    unsafe { time_tasks(comm, warmup, iters, t) }
}

/// The sparse path's selection and compaction tasks timed alone at `n`
/// elements (a selection of `cap` pairs, on gradient-like data), each on
/// every rank at once: where a sparse call's time goes before the
/// exchange.
fn time_sparse_parts<C: GradBackend>(
    comm: &C,
    n: usize,
    cap: usize,
    warmup: usize,
    iters: usize,
) -> Result<Vec<PartTime>, String> {
    let x = spread_tensor(comm, n, 9)?;
    let w = zeroed::<C, f32>(comm, n)?;
    let state = zeroed::<C, u64>(comm, SelectState::BYTES.div_ceil(8))?;
    let tiles = tiles_for(n as u64);
    let counts = zeroed::<C, u64>(comm, 2 * tiles as usize)?;
    let pairs = zeroed::<C, u64>(comm, cap)?;
    let base = |u: usize| Task {
        src: comm.addr(u, &x[u]),
        state: comm.addr(u, &state[u]),
        aux: comm.addr(u, &counts[u]),
        n: n as u64,
        tiles,
        ..Task::default()
    };
    // (part, kind, arg, writes the pairs, writes the residual to `w`);
    // the fill writes `w`.
    let kinds = [
        ("histogram pass", TaskKind::Histogram, 0, false, false),
        ("count tiles", TaskKind::CountTiles, 0, false, false),
        (
            "scan tiles (one block)",
            TaskKind::ScanTiles,
            0,
            false,
            false,
        ),
        (
            "write pairs (and tied residuals)",
            TaskKind::WriteSelected,
            cap as u64,
            true,
            true,
        ),
        (
            "residual of the untied",
            TaskKind::ResidualUntied,
            0,
            false,
            true,
        ),
        ("fill", TaskKind::Fill, 0, false, false),
    ];
    let mut out = Vec::new();
    for (name, kind, arg, to_pairs, to_residual) in kinds {
        let t = |u: usize| {
            let (w, p) = (comm.addr(u, &w[u]), comm.addr(u, &pairs[u]));
            let dst = match kind {
                TaskKind::Fill => w,
                _ if to_pairs => p,
                _ => 0,
            };
            Task {
                kind: kind as u64,
                arg,
                dst,
                aux2: if to_residual { w } else { 0 },
                ..base(u)
            }
        };
        // SAFETY: every buffer is sized for its task and outlives it; a
        // zeroed state selects every non-zero element, of which the
        // pairs keep the first `cap`.
        let time_us = unsafe { time_tasks(comm, warmup, iters, t)? };
        out.push(PartTime {
            name: name.into(),
            time_us,
        });
    }
    // The pass top-K takes where every tie is taken, after a real top-`cap`
    // selection of the same data, and last: it marks the state, after which
    // the ordered tasks above would do nothing.
    let select = |kind: TaskKind, arg: u64| {
        move |u: usize| Task {
            kind: kind as u64,
            arg,
            ..base(u)
        }
    };
    // SAFETY: as above; the selection reads `x` and writes the state.
    unsafe {
        time_tasks(comm, 0, 1, select(TaskKind::SelectTopK, cap as u64))?;
        for p in 0..SELECT_PASSES {
            time_tasks(comm, 0, 1, select(TaskKind::Histogram, p))?;
            time_tasks(comm, 0, 1, select(TaskKind::PickDigit, p))?;
        }
    }
    let any_order = |u: usize| Task {
        kind: TaskKind::WriteAnyOrder as u64,
        dst: comm.addr(u, &pairs[u]),
        aux2: comm.addr(u, &w[u]),
        arg: cap as u64,
        ..base(u)
    };
    // SAFETY: as above; the pairs hold `cap`, the residual `w` holds `n`.
    let time_us = unsafe { time_tasks(comm, warmup, iters, any_order)? };
    out.push(PartTime {
        name: "write pairs in any order (and every residual)".into(),
        time_us,
    });
    Ok(out)
}

/// The `f16` all-reduce of `n` elements alone, on the own queues (timed
/// once for both half rows: bf16 moves the same bytes).
fn time_half_all_reduce<C: GradBackend>(
    comm: &C,
    n: usize,
    warmup: usize,
    iters: usize,
) -> Result<f64, String> {
    let own = comm.own_queues();
    let mut h = zeroed::<C, f16>(comm, n)?;
    time(comm, warmup, iters, || {
        let mut regions: Vec<Region<'_, C::Buf<f16>>> = h
            .iter_mut()
            .map(|buf| Region::InPlace { buf, at: 0..n })
            .collect();
        comm.collective_on(Collective::AllReduce, &mut regions, Op::Sum, &own)
    })
}

fn row(c: &str, variant: &str, count: usize, t: f64, base: &str, b: f64) -> GradRow {
    GradRow {
        collective: c.into(),
        variant: variant.into(),
        size: 4 * count as u64,
        count: count as u64,
        time_us: t,
        baseline: base.into(),
        baseline_us: b,
        speedup: b / t,
        parts: Vec::new(),
    }
}

/// The rows of `which` on `comm`, at `sizes` (bytes per rank; fused uses
/// the ResNet-50 list, its first `fused_tensors` tensors).
pub fn rows<C: GradBackend>(
    comm: &C,
    which: CollectiveArg,
    sizes: &[u64],
    warmup: usize,
    iters: usize,
    fused_tensors: usize,
) -> Result<Measured, String> {
    let e = |e: ringreduce::Error| e.to_string();
    let avg = GradConfig {
        average: true,
        ..GradConfig::default()
    };
    let mut g = GradSync::new(comm, avg.clone()).map_err(e)?;
    let mut out = Vec::new();
    let mut break_even = None;
    let mut pass = None;
    match which {
        CollectiveArg::Fused => {
            let lens: Vec<usize> = resnet50().into_iter().take(fused_tensors).collect();
            let total: usize = lens.iter().sum();
            let mut list = Vec::new();
            for (i, &n) in lens.iter().enumerate() {
                list.push(tensor(comm, n, i as u32)?);
            }
            let (base, base_host) = time_and_enqueue(comm, warmup, iters, || {
                list.iter_mut().try_for_each(|t| g.all_reduce(t))
            })?;
            let (fused, fused_host) =
                time_and_enqueue(comm, warmup, iters, || g.fused_all_reduce(&mut list))?;
            let own = comm.own_queues();
            let (stream, stream_host) = time_and_enqueue(comm, warmup, iters, || {
                let mut s = g.session(own.clone())?;
                for t in list.iter_mut().rev() {
                    s.push(t)?;
                }
                s.wait(&own)
            })?;
            // Gradients stored in their buckets (DDP's
            // `gradient_as_bucket_view`): the same buckets, no copies.
            let mut grads = g.bucketed(&lens).map_err(e)?;
            for b in 0..grads.buckets() {
                for (i, u) in comm.local_ranks().enumerate() {
                    let buf = &mut grads.bucket_mut(b)[i];
                    let ones = vec![1.0f32; C::len_of(buf)];
                    comm.write(u, buf, 0, &ones).map_err(e)?;
                }
            }
            let (view, view_host) =
                time_and_enqueue(comm, warmup, iters, || g.all_reduce_bucketed(&mut grads))?;
            let (view_stream, view_stream_host) = time_and_enqueue(comm, warmup, iters, || {
                let mut s = g.bucketed_session(&mut grads, own.clone())?;
                for t in (0..lens.len()).rev() {
                    s.ready(t)?;
                }
                s.wait(&own)
            })?;
            // The ceiling of every fused form: one all-reduce of as many
            // elements as the whole list, in one call with nothing to pack,
            // which no form that moves the same bytes in order beats.
            let mut whole = tensor(comm, total, 7)?;
            let (one, one_host) =
                time_and_enqueue(comm, warmup, iters, || g.all_reduce(&mut whole))?;
            let what = format!("resnet50 x{}", lens.len());
            let host = |own: f64| {
                vec![
                    PartTime {
                        name: "host enqueue".into(),
                        time_us: own,
                    },
                    PartTime {
                        name: "baseline host enqueue".into(),
                        time_us: base_host,
                    },
                ]
            };
            let mut r = row("fused", &what, total, fused, "per-tensor", base);
            r.parts = host(fused_host);
            out.push(r);
            let mut r = row(
                "fused",
                &format!("{what} stream"),
                total,
                stream,
                "per-tensor",
                base,
            );
            r.parts = host(stream_host);
            out.push(r);
            for (form, t, h) in [
                ("bucket view", view, view_host),
                ("bucket view stream", view_stream, view_stream_host),
                ("ceiling: one all-reduce of every element", one, one_host),
            ] {
                let mut r = row(
                    "fused",
                    &format!("{what} {form}"),
                    total,
                    t,
                    "per-tensor",
                    base,
                );
                r.parts = host(h);
                out.push(r);
            }
        }
        CollectiveArg::Half => {
            for &s in sizes {
                let n = (s / 4) as usize;
                let mut t = tensor(comm, n, 1)?;
                let base = time(comm, warmup, iters, || g.all_reduce(&mut t))?;
                let alone = time_half_all_reduce(comm, n, warmup, iters)?;
                pass = Some(time_pass(comm, n, warmup, iters)?);
                for (p, name) in [(Precision::F16, "f16"), (Precision::Bf16, "bf16")] {
                    let h = time(comm, warmup, iters, || g.all_reduce_half(&mut t, p, true))?;
                    let mut r = row("half", name, n, h, "f32 all-reduce", base);
                    r.parts.push(PartTime {
                        name: "16-bit all-reduce alone".into(),
                        time_us: alone,
                    });
                    out.push(r);
                }
            }
        }
        CollectiveArg::Sparse => {
            for &s in sizes {
                let n = (s / 4) as usize;
                let mut t = spread_tensor(comm, n, 2)?;
                let mut r = spread_tensor(comm, n, 3)?;
                let base = time(comm, warmup, iters, || g.all_reduce(&mut t))?;
                pass = Some(time_pass(comm, n, warmup, iters)?);
                let parts = time_sparse_parts(comm, n, n.div_ceil(100), warmup, iters)?;
                // Sparse forced at every density, to find the break-even.
                let mut sg = GradSync::new(
                    comm,
                    GradConfig {
                        dense_above: 1.0,
                        ..avg.clone()
                    },
                )
                .map_err(e)?;
                for d in DENSITIES {
                    let sp = time(comm, warmup, iters, || {
                        sg.sparse_all_reduce(&mut t, Sparsity::TopK(d), Some(&mut r))
                            .map(|_| ())
                    })?;
                    if sp >= base && break_even.is_none() {
                        break_even = Some(d);
                    }
                    let name = format!("top-k {}%", d * 100.0);
                    let mut r = row("sparse", &name, n, sp, "f32 all-reduce", base);
                    if d == 0.01 {
                        r.parts = parts.clone();
                    }
                    out.push(r);
                }
            }
        }
        _ => return Err("not a gradient-layer collective".into()),
    }
    Ok(Measured {
        rows: out,
        break_even,
        pass_us: pass,
    })
}

/// Beside each row of a job over `nodes` simulated hosts of `per_node`
/// ranks, the wire alone: every rank at once sending, over loopback TCP,
/// what the dense step between hosts sends for the row's size (its shard
/// to each other node). Rank 0 measures it once every row is timed and
/// the job has left, so no collective shares the sockets.
pub fn with_wire(m: &mut Measured, nodes: usize, per_node: usize) -> Result<(), String> {
    if nodes < 2 || per_node == 0 {
        return Ok(());
    }
    let mut sizes: Vec<u64> = m.rows.iter().map(|r| r.size).collect();
    sizes.sort_unstable();
    sizes.dedup();
    for size in sizes {
        let bytes = size as usize / per_node * (nodes - 1);
        let w = crate::wire::loopback(nodes * per_node, bytes)?;
        for r in m.rows.iter_mut().filter(|r| r.size == size) {
            r.parts.push(PartTime {
                name: w.label(),
                time_us: w.us(),
            });
        }
    }
    Ok(())
}

/// The table, in the bench's column style.
pub fn table(m: &Measured) -> String {
    let (rows, break_even) = (&m.rows, m.break_even);
    // As wide as the longest variant, so the columns stay aligned.
    let w = rows.iter().map(|r| r.variant.len()).fold(22, usize::max);
    let mut s = format!(
        "#{:>11} {:>w$} {:>12} {:>10} {:>11} {:>16} {:>11} {:>8}\n",
        "collective", "variant", "size(B)", "count", "time(us)", "baseline", "base(us)", "speedup"
    );
    for r in rows {
        s += &format!(
            " {:>11} {:>w$} {:>12} {:>10} {:>11.2} {:>16} {:>11.2} {:>8.3}\n",
            r.collective,
            r.variant,
            r.size,
            r.count,
            r.time_us,
            r.baseline,
            r.baseline_us,
            r.speedup
        );
    }
    for r in rows {
        for p in &r.parts {
            s += &format!(
                "# {} {}: {} {:.2} us\n",
                r.collective, r.variant, p.name, p.time_us
            );
        }
    }
    if let Some(p) = m.pass_us {
        s += &format!(
            "# One pass (read 2 f32 arrays, write 1, every rank at once): {p:.2} us; the f32 all-reduce = {:.2} passes\n",
            rows.first().map_or(0.0, |r| r.baseline_us / p)
        );
    }
    if rows.iter().any(|r| r.collective == "sparse") {
        s += &match break_even {
            Some(d) => format!(
                "# Sparse break-even: from {}% of the elements on, top-K was no faster than the dense all-reduce\n",
                d * 100.0
            ),
            None => "# Sparse break-even: top-K was faster than dense at every density swept\n".into(),
        };
    }
    s
}

/// A report with the run's header fields.
pub fn report(
    argv: Vec<String>,
    gpu: bool,
    device: String,
    ranks: usize,
    iters: usize,
    warmup: usize,
) -> GradReport {
    GradReport {
        tool: "ringreduce-bench".into(),
        command_line: argv,
        date: now_iso(),
        execution: if gpu { "gpu" } else { "cpu" }.into(),
        device,
        ranks,
        iters,
        warmup,
        rows: Vec::new(),
        break_even_density: None,
        pass_us: None,
    }
}

/// The suite's judgement of a run: it passed if the bench exited well
/// and wrote rows; the key figure is each row's speedup.
pub fn summary(r: &GradReport) -> String {
    let mut parts: Vec<String> = r
        .rows
        .iter()
        .take(6)
        .map(|x| format!("{} {} {:.2}x", x.collective, x.variant, x.speedup))
        .collect();
    if r.rows.len() > 6 {
        parts.push(format!("… {} rows", r.rows.len()));
    }
    parts.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resnet50_has_its_published_shape_count() {
        let l = resnet50();
        assert_eq!(l.len(), 161);
        assert_eq!(l.iter().sum::<usize>(), 25_557_032);
    }

    #[test]
    fn the_cpu_rows_carry_their_speedup() {
        let comm = ringreduce::CpuCommunicator::new(2).unwrap();
        for which in [
            CollectiveArg::Fused,
            CollectiveArg::Half,
            CollectiveArg::Sparse,
        ] {
            let m = rows(&comm, which, &[4096], 0, 1, 12).unwrap();
            assert!(!m.rows.is_empty());
            assert_eq!(m.pass_us.is_some(), which != CollectiveArg::Fused);
            for r in &m.rows {
                assert!(r.time_us > 0.0 && r.baseline_us > 0.0);
                assert!((r.speedup - r.baseline_us / r.time_us).abs() < 1e-9);
            }
        }
        assert!(table(&Measured::default()).starts_with('#'));
    }
}
