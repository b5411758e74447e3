//! The GPU evidence suite as a standalone binary; `cargo xtask bundle DIR`
//! puts it beside the bench and the test binaries it runs.

fn main() {
    let argv: Vec<String> = std::env::args().collect();
    let args = ringreduce_bench::suite::parse_args();
    std::process::exit(ringreduce_bench::suite::main_with(args, argv));
}
