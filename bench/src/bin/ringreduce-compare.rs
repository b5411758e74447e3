//! Same-job A/B comparison of bench builds, for GPU hosts without a Rust
//! toolchain (`cargo xtask bundle` copies it out).

use clap::Parser;

fn main() {
    let args = ringreduce_bench::compare::CompareArgs::parse();
    std::process::exit(ringreduce_bench::compare::main_with(args));
}
