//! Builds the kernels to PTX and embeds them, with SASS for the GPUs named
//! in `RINGREDUCE_SASS` if any. The same executable is also the PTX linker
//! of that nested build (see `ringreduce_build`).

use ringreduce_build::{
    build_ptx, compile_sass, parse_sass_archs, PtxBuild, ARCH_ENV, DEFAULT_ARCH, LINKER_ENV,
    PREBUILT_ENV, PTXAS_ENV, SASS_ENV,
};
use ringreduce_kernels::abi::BLOCK_THREADS;
use std::path::PathBuf;

/// Ends the build script with `msg` on cargo's error output: a clear
/// message rather than a panic's backtrace.
fn fail(msg: impl std::fmt::Display) -> ! {
    eprintln!("error: ringreduce: {msg}");
    std::process::exit(1)
}

fn main() {
    if std::env::var_os(LINKER_ENV).is_some() {
        ringreduce_build::link_main();
    }
    // The kernel source comes with the `ringreduce-kernels` build dependency,
    // so a packaged `ringreduce` finds it in the registry as in the workspace.
    let kernels = PathBuf::from(ringreduce_kernels::MANIFEST_DIR);
    let out_dir =
        PathBuf::from(std::env::var_os("OUT_DIR").unwrap_or_else(|| fail("OUT_DIR is not set")));
    println!("cargo:rerun-if-changed={}", kernels.join("src").display());
    println!(
        "cargo:rerun-if-changed={}",
        kernels.join("Cargo.toml").display()
    );
    println!("cargo:rerun-if-env-changed={ARCH_ENV}");
    println!("cargo:rerun-if-env-changed={PREBUILT_ENV}");
    println!("cargo:rerun-if-env-changed={SASS_ENV}");
    println!("cargo:rerun-if-env-changed={PTXAS_ENV}");

    let ptx = if let Some(p) = std::env::var_os(PREBUILT_ENV) {
        PathBuf::from(p)
    } else {
        let mut features = Vec::new();
        if std::env::var_os("CARGO_FEATURE_FAULT_INJECTION").is_some() {
            features.push("fault-injection".to_string());
        }
        let arch = std::env::var(ARCH_ENV).unwrap_or_else(|_| DEFAULT_ARCH.to_string());
        let mut target_dir = ringreduce_build::shared_target_dir(&out_dir);
        if !features.is_empty() {
            target_dir = target_dir.join(features.join("-"));
        }
        let req = PtxBuild {
            kernel_crate: kernels,
            package: "ringreduce-kernels".into(),
            features,
            arch,
            target_dir,
            linker: std::env::current_exe()
                .unwrap_or_else(|e| fail(format!("the build script's own path: {e}"))),
        };
        build_ptx(&req).unwrap_or_else(|e| fail(e))
    };
    let text = std::fs::read_to_string(&ptx)
        .unwrap_or_else(|e| fail(format!("reading {}: {e}", ptx.display())));
    let final_ptx = out_dir.join("kernels.ptx");
    std::fs::write(&final_ptx, with_module_additions(&text, BLOCK_THREADS)).unwrap_or_else(|e| {
        fail(format!(
            "writing kernels.ptx into {}: {e}",
            out_dir.display()
        ))
    });
    embed_sass(&final_ptx, &out_dir);
}

/// Writes `sass.rs`, the table `gpu::module` includes: one (compute
/// capability, cubin) entry per GPU named in `RINGREDUCE_SASS`, each built
/// from the final PTX (launch bounds included). Empty by default, so a
/// build needs no CUDA tools.
fn embed_sass(ptx: &std::path::Path, out_dir: &std::path::Path) {
    let archs =
        parse_sass_archs(&std::env::var(SASS_ENV).unwrap_or_default()).unwrap_or_else(|e| fail(e));
    let ptxas = std::env::var_os(PTXAS_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("ptxas"));
    let mut table = String::from("&[\n");
    for cc in archs {
        let cubin = out_dir.join(format!("kernels.sm_{cc}.cubin"));
        compile_sass(&ptxas, ptx, cc, &cubin).unwrap_or_else(|e| fail(e));
        table.push_str(&format!("    ({cc}, include_bytes!({:?})),\n", cubin));
    }
    table.push(']');
    std::fs::write(out_dir.join("sass.rs"), table)
        .unwrap_or_else(|e| fail(format!("writing sass.rs into {}: {e}", out_dir.display())));
}

/// Adds what Rust cannot express: the module-scope shared declarations the
/// kernels' inline assembly names (`ringreduce_kernels::arch`), and launch
/// bounds on every entry, what CUDA C++ writes as `__launch_bounds__(n, 1)`.
/// - `.maxntid`: without it ptxas may give a kernel more registers than a
///   block of `n` threads can have, and such a kernel cannot launch at all.
/// - `.minnctapersm 1`: one block per SM is all a rank ever has, so ptxas
///   need not save registers for a second one and can keep a whole unrolled
///   round of loads in flight (`bench/NOTES.md`).
///
/// The task entry (`abi::TASK_ENTRY`), whose launches are many blocks of
/// `TASK_THREADS`, gets `TASK_MIN_BLOCKS_PER_SM` instead, and the local
/// entries (`abi::LOCAL_ENTRY_PREFIX`) `LOCAL_THREADS` and
/// `LOCAL_MIN_BLOCKS_PER_SM`.
fn with_module_additions(ptx: &str, n: u32) -> String {
    use ringreduce_kernels::abi::{
        LOCAL_ENTRY_PREFIX, LOCAL_MIN_BLOCKS_PER_SM, LOCAL_THREADS, TASK_ENTRY,
        TASK_MIN_BLOCKS_PER_SM, TASK_THREADS,
    };
    let mut out = String::with_capacity(ptx.len() + 4096);
    let mut in_entry_params = false;
    let mut bounds = (n, 1);
    for line in ptx.lines() {
        if line.starts_with(".visible .entry") || line.starts_with(".entry") {
            in_entry_params = true;
            let task = line.contains(&format!(" {TASK_ENTRY}("));
            let local = line.contains(&format!(" {LOCAL_ENTRY_PREFIX}"));
            bounds = if task {
                (TASK_THREADS, TASK_MIN_BLOCKS_PER_SM)
            } else if local {
                (LOCAL_THREADS, LOCAL_MIN_BLOCKS_PER_SM)
            } else {
                (n, 1)
            };
        }
        out.push_str(line);
        out.push('\n');
        if line.starts_with(".address_size") {
            out.push_str(ringreduce_kernels::arch::SHARED_DECLARATIONS);
            out.push('\n');
        }
        if in_entry_params && line.trim_start().starts_with(')') {
            let (threads, blocks) = bounds;
            out.push_str(&format!(
                ".maxntid {threads}, 1, 1\n.minnctapersm {blocks}\n"
            ));
            in_entry_params = false;
        }
    }
    out
}
