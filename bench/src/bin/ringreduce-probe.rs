//! Runs one of the small-call probes (`ringreduce_bench::probe`) on GPU 0.

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(about = "Splits a small collective's time: the local kernel's own, and the host's")]
struct Args {
    #[command(subcommand)]
    probe: Probe,
}

#[derive(Subcommand)]
enum Probe {
    /// The local kernel's GPU time per launch by shape, from CUDA graph
    /// replays, beside hand-written entries that each do one part of it.
    Kernel {
        /// Virtual ranks.
        #[arg(short = 'g', long, default_value_t = 8)]
        ranks: usize,
        /// Launches per graph.
        #[arg(long, default_value_t = 1000)]
        reps: usize,
        /// Replays of each graph; the best is printed.
        #[arg(long, default_value_t = 5)]
        replays: usize,
    },
    /// The library's local all-reduce of 2 f32 per call, the same kernel
    /// launched raw, and an empty launch: host clock and events.
    Host {
        /// Virtual ranks.
        #[arg(short = 'g', long, default_value_t = 8)]
        ranks: usize,
        /// Calls per round of each loop (fewer for a profiler).
        #[arg(long, default_value_t = 100_000)]
        iters: usize,
    },
    /// A fresh process's first f32 sum all-reduce, then its first
    /// all-reduce of every other type, and the kernel modules they
    /// loaded. Run it with an empty `CUDA_CACHE_PATH` and
    /// `CUDA_FORCE_PTX_JIT=1` to see the JIT's whole cost.
    Cold {
        /// Virtual ranks.
        #[arg(short = 'g', long, default_value_t = 8)]
        ranks: usize,
        /// Elements per rank of each call.
        #[arg(short = 'n', long, default_value_t = 1 << 20)]
        elems: usize,
        /// Writes the figures as JSON here.
        #[arg(short = 'J', long)]
        json: Option<std::path::PathBuf>,
    },
}

fn main() {
    let r = match Args::parse().probe {
        Probe::Kernel {
            ranks,
            reps,
            replays,
        } => ringreduce_bench::probe::kernel::run(ranks, reps, replays),
        Probe::Host { ranks, iters } => ringreduce_bench::probe::host::run(ranks, iters.max(1)),
        Probe::Cold { ranks, elems, json } => {
            ringreduce_bench::probe::cold::run(ranks, elems, json.as_deref())
        }
    };
    if let Err(e) = r {
        eprintln!("ringreduce-probe: {e}");
        std::process::exit(1);
    }
}
