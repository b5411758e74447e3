//! The bench runner as a standalone binary, for GPU hosts without a Rust
//! toolchain (`cargo xtask bundle <dir>` copies it out).

use clap::Parser;
use ringreduce_bench::{nccl, run, BenchArgs};

fn main() {
    let argv: Vec<String> = std::env::args().collect();
    let args = BenchArgs::parse();
    if args.vs_nccl {
        nccl::prepare_library();
    }
    std::process::exit(run::run(args, argv));
}
