//! The bench's command line, mirroring nccl-tests where they overlap.

use crate::metrics::CollectiveArg;
use crate::sizes::parse_size;
use clap::Parser;
use ringreduce::{Algo, DataType, Op};
use std::path::PathBuf;

/// `--algo`: one algorithm, or `all` of them one after the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlgoArg {
    One(Algo),
    All,
}

fn algo_arg(s: &str) -> Result<AlgoArg, String> {
    if s == "all" {
        return Ok(AlgoArg::All);
    }
    Algo::parse(s).map(AlgoArg::One).map_err(|e| e.to_string())
}

fn size_arg(s: &str) -> Result<u64, String> {
    parse_size(s)
}

fn bool01(s: &str) -> Result<bool, String> {
    match s {
        "0" | "false" => Ok(false),
        "1" | "true" => Ok(true),
        _ => Err(format!("expected 0 or 1, got {s:?}")),
    }
}

/// Benchmarks ringreduce's collectives in the nccl-tests format.
#[derive(Parser, Debug, Clone)]
#[command(name = "ringreduce-bench", version)]
pub struct BenchArgs {
    /// Minimum size, with K/M/G suffix: nccl-tests' size, the per-rank input
    /// of a reduce-scatter, the per-rank output of an all-gather, the
    /// buffer of an all-reduce.
    #[arg(short = 'b', long = "minbytes", default_value = "32M", value_parser = size_arg)]
    pub min_bytes: u64,
    /// Maximum size.
    #[arg(short = 'e', long = "maxbytes", default_value = "32M", value_parser = size_arg)]
    pub max_bytes: u64,
    /// Multiplication factor between sizes.
    #[arg(short = 'f', long = "stepfactor", default_value_t = 2)]
    pub factor: u64,
    /// Fixed increment between sizes (overrides -f).
    #[arg(short = 'i', long = "stepbytes", value_parser = size_arg)]
    pub increment: Option<u64>,
    /// Number of ranks: one per GPU when the machine has at least that many
    /// GPUs, else virtual ranks on GPU 0 (or CPU threads without a GPU).
    #[arg(short = 'g', long = "ngpus", default_value_t = 1)]
    pub ranks: usize,
    /// Data type (int8 uint8 int32 uint32 int64 uint64 half bfloat16 float
    /// double), or all.
    #[arg(short = 'd', long = "datatype", default_value = "float")]
    pub dtype: String,
    /// Reduction op (sum prod max min avg), or all.
    #[arg(short = 'o', long = "op", default_value = "sum")]
    pub op: String,
    /// Timed iterations per size.
    #[arg(short = 'n', long = "iters", default_value_t = 20)]
    pub iters: usize,
    /// Warm-up iterations per size.
    #[arg(short = 'w', long = "warmup_iters", default_value_t = 5)]
    pub warmup: usize,
    /// Timed windows of `iters` per size and placement; the time reported
    /// is the median window's, so that one scheduling hiccup of the host
    /// does not set a small size's figure.
    #[arg(long = "repeats", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=99))]
    pub repeats: u64,
    /// Check results (0/1).
    #[arg(short = 'c', long = "check", default_value = "1", value_parser = bool01, action = clap::ArgAction::Set)]
    pub check: bool,
    /// Blocking: synchronise after every collective (0/1).
    #[arg(short = 'z', long = "blocking", default_value = "0", value_parser = bool01, action = clap::ArgAction::Set)]
    pub blocking: bool,
    /// Staging buffer per channel; by default the library's choice (an
    /// equal share of 64 MiB for every block resident on the GPU, at most
    /// 2M).
    #[arg(long = "buffsize", value_parser = size_arg)]
    pub buffsize: Option<u64>,
    /// Channels (blocks) per rank; automatic when not given.
    #[arg(short = 'C', long = "channels")]
    pub channels: Option<u32>,
    /// The algorithm: auto (by placement and size), ring, one-shot,
    /// two-shot or local (every rank in one launch); default
    /// RINGREDUCE_ALGO or auto. `all` runs the sweep with each forced in
    /// turn, then auto, and compares auto with the best of them per size.
    #[arg(long = "algo", value_parser = algo_arg)]
    pub algo: Option<AlgoArg>,
    /// With `--algo all`: time `Auto` and the fastest forced algorithm
    /// again at each size, in this many alternating windows each per
    /// placement, so that drift between the sweeps cancels (0: off).
    #[arg(long = "rematch", default_value_t = 0)]
    pub rematch: usize,
    /// Direct staging per rank (each of its two halves); default the
    /// library's (`DEFAULT_DIRECT_HALF_BYTES`, 8 MiB). A forced direct
    /// algorithm needs the call to fit.
    #[arg(long = "direct-bytes", value_parser = size_arg)]
    pub direct_bytes: Option<u64>,
    /// Ring order: user ranks in ring order, comma separated.
    #[arg(long = "ring-order", value_delimiter = ',')]
    pub ring_order: Option<Vec<u32>>,
    /// Force the CPU execution even when a GPU is present.
    #[arg(long)]
    pub cpu: bool,
    /// The collective to run, or all three.
    #[arg(long = "collective", value_enum, default_value = "reduce-scatter")]
    pub collective: CollectiveArg,
    /// Write every row, the ceilings and the setup as JSON.
    #[arg(short = 'J', long = "json")]
    pub json: Option<PathBuf>,
    /// Write a PNG of busbw against size.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Run nothing: draw `--plot` from this earlier `-J` report (to redraw
    /// committed results after the plot changes).
    #[arg(long, value_name = "JSON", requires = "plot")]
    pub replot: Option<PathBuf>,
    /// Turn off the waits' abort and timeout polling (to measure its cost).
    #[arg(long = "no-watchdog")]
    pub no_watchdog: bool,
    /// Prefetch each rank's input into L2 this many unrolled rounds ahead
    /// (0: off; default: RINGREDUCE_PREFETCH_ROUNDS or 0)
    #[arg(long = "prefetch")]
    pub prefetch: Option<u8>,
    /// Time each size's iterations as one CUDA graph replay (captured once
    /// after the warm-up), as inference engines launch them (virtual ranks
    /// on one GPU).
    #[arg(long = "graph")]
    pub graph: bool,
    /// Also run the sweep through NCCL (needs one GPU per rank).
    #[arg(long = "vs-nccl")]
    pub vs_nccl: bool,
    /// Spawn this many processes of this bench, one rank each, and run as
    /// their job (as `mpirun -np N` runs nccl-tests with `-g 1`); rank 0
    /// prints. A bench started by a launcher (torchrun, mpirun, srun) with
    /// more than one process runs as its job without this.
    #[arg(long = "procs", value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub procs: Option<u32>,
    /// What runs the collectives of a job of processes, one or several in
    /// turn (their rows side by side in the report): ringreduce (flat, our
    /// kernels), nccl (flat NCCL), hier (our kernels inside a node, the
    /// step between nodes over NCCL on GPUs).
    #[arg(long = "backend", value_delimiter = ',', default_value = "ringreduce")]
    pub backend: Vec<BackendArg>,
    /// With --procs: simulate this many hosts on this machine (node-major
    /// ranks; each process its own NCCL_HOSTID, NCCL's socket transport on
    /// loopback), for --backend hier and nccl.
    #[arg(long = "nodes", value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub nodes: Option<u32>,
}

/// A backend of `--backend`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendArg {
    /// Our kernels, every rank one flat ring or direct job.
    Ringreduce,
    /// Flat NCCL.
    Nccl,
    /// Our kernels inside a node, the step between nodes over NCCL.
    Hier,
}

impl BackendArg {
    /// The name in reports.
    pub fn name(self) -> &'static str {
        match self {
            BackendArg::Ringreduce => "ringreduce",
            BackendArg::Nccl => "nccl",
            BackendArg::Hier => "hier",
        }
    }
}

impl BenchArgs {
    /// The algorithms to sweep with, in order (`None`: the configured one).
    pub fn algos(&self) -> Vec<Option<Algo>> {
        match self.algo {
            None => vec![None],
            Some(AlgoArg::One(a)) => vec![Some(a)],
            Some(AlgoArg::All) => [
                Algo::Ring,
                Algo::OneShot,
                Algo::TwoShot,
                Algo::Local,
                Algo::Auto,
            ]
            .map(Some)
            .to_vec(),
        }
    }

    pub fn dtypes(&self) -> Result<Vec<DataType>, String> {
        if self.dtype == "all" {
            return Ok(DataType::ALL.to_vec());
        }
        self.dtype
            .split(',')
            .map(|s| {
                DataType::ALL
                    .iter()
                    .copied()
                    .find(|d| d.name() == s || alias(*d) == s)
                    .ok_or_else(|| format!("unknown data type {s:?}"))
            })
            .collect()
    }

    pub fn ops(&self) -> Result<Vec<Op>, String> {
        if self.op == "all" {
            return Ok(Op::ALL.to_vec());
        }
        self.op
            .split(',')
            .map(|s| {
                Op::ALL
                    .iter()
                    .copied()
                    .find(|o| o.name() == s)
                    .ok_or_else(|| format!("unknown op {s:?}"))
            })
            .collect()
    }
}

/// Short Rust-style names accepted besides the nccl-tests ones.
fn alias(d: DataType) -> &'static str {
    match d {
        DataType::I8 => "i8",
        DataType::U8 => "u8",
        DataType::I32 => "i32",
        DataType::U32 => "u32",
        DataType::I64 => "i64",
        DataType::U64 => "u64",
        DataType::F16 => "f16",
        DataType::Bf16 => "bf16",
        DataType::F32 => "f32",
        DataType::F64 => "f64",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_nccl_tests_flags() {
        let a = BenchArgs::try_parse_from([
            "b",
            "-b",
            "8",
            "-e",
            "1G",
            "-f",
            "4",
            "-g",
            "4",
            "-d",
            "f32",
            "-o",
            "sum",
            "-n",
            "7",
            "-w",
            "2",
            "-c",
            "0",
            "-z",
            "1",
            "--buffsize",
            "4M",
            "--ring-order",
            "1,2,0,3",
            "-C",
            "3",
            "--collective",
            "all",
        ])
        .unwrap();
        assert_eq!(
            (a.min_bytes, a.max_bytes, a.factor, a.ranks),
            (8, 1 << 30, 4, 4)
        );
        assert_eq!(a.dtypes().unwrap(), vec![DataType::F32]);
        assert_eq!(a.ops().unwrap(), vec![Op::Sum]);
        assert_eq!(
            (a.iters, a.warmup, a.check, a.blocking),
            (7, 2, false, true)
        );
        assert_eq!(a.buffsize, Some(4 << 20));
        assert_eq!(a.ring_order, Some(vec![1, 2, 0, 3]));
        assert_eq!(a.channels, Some(3));
        assert_eq!(a.collective, CollectiveArg::All);
        let a = BenchArgs::try_parse_from(["b", "-d", "all", "-o", "all"]).unwrap();
        assert_eq!(a.dtypes().unwrap().len(), 10);
        assert_eq!(a.ops().unwrap().len(), 5);
        let a = BenchArgs::try_parse_from(["b", "-d", "float16"]).unwrap();
        assert!(a.dtypes().is_err());
        assert!(BenchArgs::try_parse_from(["b", "-b", "12Q"]).is_err());
    }
}
