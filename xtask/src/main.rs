//! `cargo xtask <command>`: the developer commands. Everything that runs on
//! a GPU host lives in the `ringreduce-bench` crate; this only builds,
//! bundles and starts it.

mod bundle;
mod package;
mod ptx;
mod sass;
mod tools;
mod util;

use std::process::{exit, Command};
use util::{cargo, exec, workspace_root};

const HELP: &str = "\
cargo xtask <command> [options]

Commands:
  example                 the three collectives through the Collectives trait: on
                          the GPU if one is present, then on the CPU execution
  bench [FLAGS]           build the bench (release, no SASS) and run it;
                          nccl-tests flags, see `cargo xtask bench --help`
  bundle [--dev] [--variant REV|WORKTREE [--name NAME]] DIR
                          copy what a GPU host without Rust needs into DIR:
                          ringreduce-bench, gpu-suite, ringreduce-compare and the
                          test binaries (DIR/tests/). With --variant, build only
                          the bench of a branch, commit or worktree into
                          DIR/var/NAME/ (for compare). --dev: the debug profile
                          and every feature, as CI's test build. Release bundles
                          embed sm_90 SASS (RINGREDUCE_SASS overrides, `none`
                          for none) with ptxas 13.0 from NVIDIA's PyPI wheel,
                          built in target/sass so that other builds keep theirs
  gpu-suite [ARGS]        bundle into target/bundle, then run its gpu-suite: all
                          GPU evidence (tests, faults, sanitizers, soaks, bench
                          sweeps) into one dated folder with a summary. --cpu runs
                          it on the CPU execution (what CI does). See
                          `cargo xtask gpu-suite --help`
  compare BASE VARIANT... [ARGS]
                          bundle, then run ringreduce-compare: bench builds
                          against each other in one job, interleaved, base first
                          and last. See `cargo xtask compare --help`
  sass [--arch sm_90] [ENTRY...]
                          register counts and SASS of the embedded PTX, no GPU
                          needed (ptxas/cuobjdump from NVIDIA's PyPI wheels)
  ptx [--check]           build the kernels' PTX from source and ship it with the
                          kernel crate (kernels-gpu/prebuilt/), so that builds skip
                          the nested nvptx build; --check fails unless the shipped
                          PTX is what the sources build (CI runs it)
  package-check           `cargo package` the kernel, build-support and library
                          crates, then build and run a small crate outside the
                          workspace on stable Rust against them (a CPU collective)
  help                    this text
";

fn main() {
    ptx::link_if_asked();
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let root = workspace_root();
    if args.is_empty() {
        eprint!("{HELP}");
        exit(2);
    }
    let cmd = args.remove(0);
    match cmd.as_str() {
        "help" | "--help" | "-h" => print!("{HELP}"),
        "example" => {
            // A dev build, as `cargo run --example` makes: with the PTX the
            // kernel crate ships it is about half a minute on 2 cores, where
            // the optimised CPU kernel table alone would take longer. Built
            // first, with a line on the terminal every few seconds, since
            // cargo's bar stands still while one crate compiles.
            let example = ["-p", "ringreduce", "--example", "collectives"];
            let mut build = Command::new(cargo());
            build.current_dir(&root).arg("build").args(example);
            ringreduce_build::Progress::to_terminal()
                .step("building the library and the example", || {
                    util::check(&mut build)
                });
            exec(
                Command::new(cargo())
                    .current_dir(&root)
                    .arg("run")
                    .args(example),
            )
        }
        // A release build without SASS (a module's JIT is about a second),
        // so that `--help` builds nothing else.
        "bench" => {
            let bins = bundle::build_tools(&root, bundle::Profile::Plain);
            exec(Command::new(bins.join("ringreduce-bench")).args(args))
        }
        "bundle" => bundle::cmd_bundle(&root, args),
        "gpu-suite" => bundle::run_bundled(&root, "gpu-suite", args),
        "compare" => bundle::run_bundled(&root, "ringreduce-compare", args),
        "sass" => sass::cmd_sass(&root, args),
        "package-check" => package::cmd_package_check(&root),
        "ptx" => ptx::cmd_ptx(&root, args),
        other => {
            eprint!("xtask: unknown command {other:?}\n\n{HELP}");
            exit(2);
        }
    }
}
