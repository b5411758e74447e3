//! The first call: how long a fresh process waits for its first f32 sum
//! all-reduce, then for its first collective of every other type, and
//! which kernel modules those calls loaded (their bytes and the driver's
//! time for each).
//!
//! Run it with an empty JIT cache (`CUDA_CACHE_PATH` a new empty folder)
//! and `CUDA_FORCE_PTX_JIT=1`, as the suite's `cold-start` part does, so
//! that neither the driver's cache nor embedded SASS hides the JIT.

use crate::exact::{fill, FromSmall};
use ringreduce::gpu::module::{force_ptx_jit, module_loads, ModuleLoad};
use ringreduce::{with_element_type, Collectives, Communicator, DataType, Op, Region};
use serde::Serialize;
use std::error::Error;
use std::path::Path;
use std::time::Instant;

/// One first call.
#[derive(Debug, Serialize)]
pub struct FirstCall {
    pub dtype: &'static str,
    pub collective: &'static str,
    /// Seconds since the process started when the call had ended (its
    /// results read back and checked).
    pub at_s: f64,
    /// Seconds the call took, its kernel loads included.
    pub took_s: f64,
}

/// One module the calls loaded.
#[derive(Debug, Serialize)]
pub struct Loaded {
    pub module: &'static str,
    pub bytes: usize,
    pub load_s: f64,
    pub image: String,
}

impl From<ModuleLoad> for Loaded {
    fn from(l: ModuleLoad) -> Self {
        Loaded {
            module: l.module,
            bytes: l.bytes,
            load_s: l.took.as_secs_f64(),
            image: l.image.to_string(),
        }
    }
}

/// What the probe writes.
#[derive(Debug, Serialize)]
pub struct ColdStart {
    pub ranks: usize,
    pub elems: usize,
    /// Seconds from the process's start to `main` (the loader and the
    /// library's statics), from the kernel's record of the start.
    pub to_main_s: f64,
    /// Seconds from the process's start to a created communicator.
    pub communicator_s: f64,
    /// The f32 sum all-reduce first, then one all-reduce (sum) of each
    /// other type.
    pub calls: Vec<FirstCall>,
    pub modules: Vec<Loaded>,
    pub cuda_cache_path: Option<String>,
    pub force_ptx_jit: bool,
}

/// Seconds since this process started, from `/proc` (clock ticks of
/// 10 ms); 0 where there is no `/proc`.
fn process_age_s() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let uptime = std::fs::read_to_string("/proc/uptime").unwrap_or_default();
    // The command may hold spaces: the fields after its `)` are plain.
    let start_ticks = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(19))
        .and_then(|v| v.parse::<f64>().ok());
    let up = uptime
        .split_whitespace()
        .next()
        .and_then(|v| v.parse::<f64>().ok());
    match (start_ticks, up) {
        // Linux reports the start in USER_HZ, 100 on every platform it
        // runs GPUs on.
        (Some(t), Some(up)) => (up - t / 100.0).max(0.0),
        _ => 0.0,
    }
}

/// One all-reduce (sum) of `n` elements of `T` on every rank, in place,
/// checked against the sum of the inputs in user-rank order.
fn all_reduce<T: FromSmall>(comm: &Communicator, n: usize) -> Result<(), Box<dyn Error>> {
    let k = comm.k();
    let inputs: Vec<Vec<T>> = (0..k).map(|r| fill::<T>(Op::Sum, k, r, n, 7)).collect();
    let mut bufs = inputs
        .iter()
        .enumerate()
        .map(|(u, d)| comm.upload(u, d))
        .collect::<Result<Vec<_>, _>>()?;
    let mut regions: Vec<Region<'_, _>> = bufs
        .iter_mut()
        .map(|b| Region::InPlace { buf: b, at: 0..n })
        .collect();
    Collectives::all_reduce(comm, &mut regions, Op::Sum)?;
    comm.synchronize()?;
    let want: Vec<T> = (0..n)
        .map(|i| {
            (1..k).fold(inputs[0][i], |a, r| {
                <T as ringreduce::Element>::red_sum(a, inputs[r][i])
            })
        })
        .collect();
    for (u, b) in bufs.iter().enumerate() {
        let got = comm.download(u, b)?;
        if bytemuck::cast_slice::<T, u8>(&got) != bytemuck::cast_slice::<T, u8>(&want) {
            return Err(format!("rank {u}: the first {:?} all-reduce is wrong", T::DTYPE).into());
        }
    }
    Ok(())
}

/// Runs the probe on GPU 0 with `ranks` virtual ranks and calls of
/// `elems` elements, prints each figure, and writes them as JSON to `out`.
pub fn run(ranks: usize, elems: usize, out: Option<&Path>) -> Result<(), Box<dyn Error>> {
    let to_main_s = process_age_s();
    let main = Instant::now();
    let since_start = |t: Instant| to_main_s + t.duration_since(main).as_secs_f64();
    let comm = Communicator::new(0, ranks)?;
    let communicator_s = since_start(Instant::now());
    println!("to main {to_main_s:.3} s; communicator of {ranks} ranks at {communicator_s:.3} s");
    let mut calls = Vec::new();
    let order = std::iter::once(DataType::F32)
        .chain(DataType::ALL.into_iter().filter(|&d| d != DataType::F32));
    for d in order {
        let t = Instant::now();
        with_element_type!(d, T => all_reduce::<T>(&comm, elems))?;
        let end = Instant::now();
        let call = FirstCall {
            dtype: d.name(),
            collective: "all-reduce",
            at_s: since_start(end),
            took_s: end.duration_since(t).as_secs_f64(),
        };
        println!(
            "first {} sum all-reduce: done at {:.3} s, took {:.3} s",
            call.dtype, call.at_s, call.took_s
        );
        calls.push(call);
    }
    let modules: Vec<Loaded> = module_loads(0).into_iter().map(Loaded::from).collect();
    for m in &modules {
        println!(
            "module {}: {} bytes, loaded in {:.3} s from {}",
            m.module, m.bytes, m.load_s, m.image
        );
    }
    let report = ColdStart {
        ranks,
        elems,
        to_main_s,
        communicator_s,
        calls,
        modules,
        cuda_cache_path: std::env::var("CUDA_CACHE_PATH").ok(),
        force_ptx_jit: force_ptx_jit(),
    };
    if let Some(out) = out {
        std::fs::write(out, serde_json::to_string_pretty(&report)?)?;
    }
    Ok(())
}
