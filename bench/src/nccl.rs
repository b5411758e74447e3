//! `--vs-nccl`: the same sweep through NCCL, in the same process.
//!
//! NCCL runs one rank per GPU, so it needs as many GPUs as ranks. cudarc
//! looks for `libnccl.so`, while NCCL wheels ship only `libnccl.so.2`: when
//! the library cannot be loaded, [`prepare_library`] finds the wheel's copy,
//! links it as `libnccl.so` in a temporary directory and re-executes the
//! bench with that directory on `LD_LIBRARY_PATH` (the loader reads the
//! variable only at start-up).

use crate::cli::BenchArgs;
use crate::exact::FromSmall;
use crate::metrics::name;
use crate::point::{perf, with_elem, Judge, Point};
use crate::report::{Perf, Row};
use cudarc::driver::{sys, CudaContext, CudaSlice, CudaStream, DevicePtr};
use cudarc::nccl::{result as nresult, sys as nsys};
use ringreduce::nccl::{nccl_op, nccl_type};
use ringreduce::{Collective, RsElement};
use std::sync::Arc;

const REEXEC_ENV: &str = "RINGREDUCE_BENCH_NCCL_REEXEC";

/// Whether NCCL can run this sweep; the error is the note to print.
pub fn availability(ranks: usize, devices: usize, gpu: bool) -> Result<(), String> {
    if !gpu {
        return Err("skipped: NCCL needs GPUs, and this run is the CPU execution".into());
    }
    if ranks < 2 || devices < ranks {
        return Err(format!(
            "skipped: NCCL needs one GPU per rank; -g {ranks} asks for {ranks} and this machine has {devices}"
        ));
    }
    // SAFETY: only tries to load the library.
    if !unsafe { cudarc::nccl::sys::is_culib_present() } {
        return Err(
            "skipped: libnccl.so could not be loaded (see the bench's docs for the symlink)".into(),
        );
    }
    Ok(())
}

/// Makes libnccl loadable, re-executing the process if needed. Returns only
/// when nothing had to change (or nothing could be done).
pub fn prepare_library() {
    // SAFETY: only tries to load the library.
    if unsafe { cudarc::nccl::sys::is_culib_present() } || std::env::var_os(REEXEC_ENV).is_some() {
        return;
    }
    let Some(lib) = find_wheel_nccl() else { return };
    let dir = std::env::temp_dir().join(format!("ringreduce-nccl-{}", std::process::id()));
    if std::fs::create_dir_all(&dir).is_err() {
        return;
    }
    let link = dir.join("libnccl.so");
    let _ = std::fs::remove_file(&link);
    #[cfg(unix)]
    if std::os::unix::fs::symlink(&lib, &link).is_err() {
        return;
    }
    let mut path = dir.display().to_string();
    if let Ok(old) = std::env::var("LD_LIBRARY_PATH") {
        path = format!("{path}:{old}");
    }
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(_) => return,
    };
    let status = std::process::Command::new(exe)
        .args(std::env::args_os().skip(1))
        .env("LD_LIBRARY_PATH", path)
        .env(REEXEC_ENV, "1")
        .status();
    if let Ok(s) = status {
        std::process::exit(s.code().unwrap_or(1));
    }
}

/// `nvidia/nccl/lib/libnccl.so.2` from the Python wheels, where python3 is.
pub fn find_wheel_nccl() -> Option<std::path::PathBuf> {
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib', 'libnccl.so.2'))",
        ])
        .output()
        .ok()?;
    let p = std::path::PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    p.exists().then_some(p)
}

/// NCCL communicators, one per device, destroyed on drop.
struct Comms(Vec<nsys::ncclComm_t>);

impl Drop for Comms {
    fn drop(&mut self) {
        for &c in &self.0 {
            // SAFETY: created by ncclCommInitAll, destroyed once.
            unsafe {
                let _ = nresult::comm_destroy(c);
            }
        }
    }
}

pub fn sweep(args: &BenchArgs, pts: &[Point], judge: Judge) -> Result<Vec<Row>, String> {
    // NVLink multicast stays off on shared machines.
    std::env::set_var("NCCL_NVLS_ENABLE", "0");
    let k = args.ranks;
    let ctxs: Vec<Arc<CudaContext>> = (0..k)
        .map(CudaContext::new)
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    for c in &ctxs {
        // SAFETY: this sweep synchronises its own streams.
        unsafe { c.disable_event_tracking() };
    }
    let streams: Vec<Arc<CudaStream>> = ctxs
        .iter()
        .map(|c| c.new_stream())
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    let mut raw = vec![std::ptr::null_mut(); k];
    let devs: Vec<std::ffi::c_int> = (0..k as std::ffi::c_int).collect();
    // SAFETY: `raw` has room for k communicators.
    unsafe { nresult::comm_init_all(raw.as_mut_ptr(), k as _, devs.as_ptr()) }
        .map_err(|e| format!("ncclCommInitAll: {e:?}"))?;
    let comms = Comms(raw);
    let mut rows = Vec::new();
    for p in pts {
        let r = with_elem!(p.dtype, T => point::<T>(args, &comms, &streams, p, judge));
        rows.push(r?);
    }
    Ok(rows)
}

fn point<T: RsElement + FromSmall>(
    args: &BenchArgs,
    comms: &Comms,
    streams: &[Arc<CudaStream>],
    p: &Point,
    judge: Judge,
) -> Result<Row, String> {
    let k = streams.len();
    let n = p.count as usize;
    let sz = std::mem::size_of::<T>() as u64;
    let c = p.collective;
    let (sl, rl) = c.lengths(k as u64, n as u64);
    let (send_len, recv_len) = (sl as usize, rl as usize);
    let e = |e: cudarc::driver::DriverError| e.to_string();
    let mut send: Vec<CudaSlice<T>> = Vec::new();
    let mut recv: Vec<CudaSlice<T>> = Vec::new();
    for (u, s) in streams.iter().enumerate() {
        let whole = send_len.max(recv_len).max(1);
        send.push(
            s.clone_htod(&crate::exact::fill::<T>(p.op, k, u, whole, 7))
                .map_err(e)?,
        );
        recv.push(s.alloc_zeros::<T>(whole).map_err(e)?);
    }
    let sp: Vec<u64> = send
        .iter()
        .zip(streams)
        .map(|(b, s)| b.device_ptr(s).0)
        .collect();
    let rp: Vec<u64> = recv
        .iter()
        .zip(streams)
        .map(|(b, s)| b.device_ptr(s).0)
        .collect();
    let op = nccl_op(p.op);
    let dt = nccl_type(p.dtype);
    let mut out = [None, None];
    for (pi, in_place) in [false, true].into_iter().enumerate() {
        if n == 0 {
            out[pi] = Some(perf(k, p, 0.0, None, judge));
            continue;
        }
        let once = || -> Result<(), String> {
            nresult::group_start().map_err(|e| format!("{e:?}"))?;
            for u in 0..k {
                // NCCL's in-place layouts: recv = send + rank * count for a
                // reduce-scatter, send = recv + rank * count for an
                // all-gather, send == recv for an all-reduce.
                let block = u as u64 * n as u64 * sz;
                let (src, dst) = match (in_place, c) {
                    (false, _) => (sp[u], rp[u]),
                    (true, Collective::ReduceScatter) => (sp[u], sp[u] + block),
                    (true, Collective::AllGather) => (sp[u] + block, sp[u]),
                    (true, Collective::AllReduce) => (sp[u], sp[u]),
                };
                let stream = streams[u].cu_stream() as _;
                // SAFETY: device buffers of the collective's lengths on rank
                // u's device.
                unsafe {
                    match c {
                        Collective::ReduceScatter => nresult::reduce_scatter(
                            src as *const _,
                            dst as *mut _,
                            n,
                            dt,
                            op,
                            comms.0[u],
                            stream,
                        ),
                        Collective::AllGather => nresult::all_gather(
                            src as *const _,
                            dst as *mut _,
                            n,
                            dt,
                            comms.0[u],
                            stream,
                        ),
                        Collective::AllReduce => nresult::all_reduce(
                            src as *const _,
                            dst as *mut _,
                            n,
                            dt,
                            op,
                            comms.0[u],
                            stream,
                        ),
                    }
                }
                .map_err(|e| format!("NCCL {}: {e:?}", name(c)))?;
            }
            nresult::group_end().map_err(|e| format!("{e:?}"))?;
            Ok(())
        };
        for _ in 0..args.warmup {
            once()?;
        }
        for s in streams {
            s.synchronize().map_err(e)?;
        }
        let t = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
        let starts: Vec<_> = streams
            .iter()
            .map(|s| s.record_event(t))
            .collect::<Result<_, _>>()
            .map_err(e)?;
        for _ in 0..args.iters {
            once()?;
            if args.blocking {
                for s in streams {
                    s.synchronize().map_err(e)?;
                }
            }
        }
        let stops: Vec<_> = streams
            .iter()
            .map(|s| s.record_event(t))
            .collect::<Result<_, _>>()
            .map_err(e)?;
        let mut worst = 0.0f64;
        for (a, b) in starts.iter().zip(&stops) {
            b.synchronize().map_err(e)?;
            worst = worst.max(a.elapsed_ms(b).map_err(e)? as f64 * 1e3);
        }
        out[pi] = Some(perf(k, p, worst / args.iters.max(1) as f64, None, judge));
    }
    let [oop, ip] = out;
    Ok(Row {
        collective: name(c).into(),
        size: p.size,
        count: p.count,
        dtype: p.dtype.name().into(),
        op: p.op.name().into(),
        root: -1,
        channels: 0,
        algorithm: "nccl".into(),
        backend: "nccl".into(),
        out_of_place: oop.unwrap_or_else(zero),
        in_place: ip.unwrap_or_else(zero),
    })
}

fn zero() -> Perf {
    Perf {
        time_us: 0.0,
        algbw: 0.0,
        busbw: 0.0,
        wrong: None,
        busbw_vs_ceiling: None,
        vs_device_copy: None,
        host_us: None,
    }
}

/// Our busbw over NCCL's, row by row.
pub fn ratio_table(ours: &[Row], nccl: &[Row]) -> String {
    let mut s = String::from("# ringreduce / NCCL busbw (out-of-place, in-place):\n");
    for (a, b) in ours.iter().zip(nccl) {
        let r = |x: f64, y: f64| {
            if y > 0.0 {
                format!("{:6.3}", x / y)
            } else {
                format!("{:>6}", "-")
            }
        };
        s.push_str(&format!(
            "#{:>11}  {:>8}  {:>6}  {}  {}\n",
            a.size,
            a.dtype,
            a.op,
            r(a.out_of_place.busbw, b.out_of_place.busbw),
            r(a.in_place.busbw, b.in_place.busbw)
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::availability;

    #[test]
    fn nccl_needs_one_gpu_per_rank() {
        let cpu = availability(4, 0, false).unwrap_err();
        assert!(cpu.contains("CPU execution"), "{cpu}");
        let one = availability(4, 1, true).unwrap_err();
        assert!(
            one.contains("one GPU per rank") && one.contains("has 1"),
            "{one}"
        );
        let single_rank = availability(1, 8, true).unwrap_err();
        assert!(single_rank.contains("one GPU per rank"), "{single_rank}");
    }
}
