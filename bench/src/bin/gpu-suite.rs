//! The GPU evidence suite as a standalone binary; `cargo xtask bundle DIR`
//! puts it beside the bench and the test binaries it runs.

fn main() {
    let argv: Vec<String> = std::env::args().collect();
    let args = ringreduce_bench::suite::parse_args();
    // The hierarchical parts' processes load NCCL: a pip wheel's
    // libnccl.so.2 is off the loader's path, so name it for them.
    let named = ringreduce::nccl::LIBRARY_ENV;
    if std::env::var_os(named).is_none() {
        if let Some(p) = ringreduce_bench::nccl::find_wheel_nccl() {
            // SAFETY: set before any thread starts.
            unsafe { std::env::set_var(named, p) };
        }
    }
    std::process::exit(ringreduce_bench::suite::main_with(args, argv));
}
