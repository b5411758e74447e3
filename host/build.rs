//! Builds the kernels to PTX and embeds them. The same executable is also
//! the PTX linker of that nested build (see `ringreduce_build`).

use ringreduce_build::{build_ptx, PtxBuild, ARCH_ENV, DEFAULT_ARCH, LINKER_ENV};
use ringreduce_kernels::plan::BLOCK_THREADS;
use std::path::PathBuf;

/// Use a prebuilt PTX file instead of building one (for toolchains without
/// the nvptx pieces).
const PREBUILT_ENV: &str = "RINGREDUCE_PTX_FILE";

fn main() {
    if std::env::var_os(LINKER_ENV).is_some() {
        ringreduce_build::link_main();
    }
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let kernels = manifest.join("../kernels-gpu");
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    println!("cargo:rerun-if-changed={}", kernels.join("src").display());
    println!(
        "cargo:rerun-if-changed={}",
        kernels.join("Cargo.toml").display()
    );
    println!("cargo:rerun-if-env-changed={ARCH_ENV}");
    println!("cargo:rerun-if-env-changed={PREBUILT_ENV}");

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
            linker: std::env::current_exe().expect("build script path"),
        };
        match build_ptx(&req) {
            Ok(p) => p,
            Err(e) => panic!("{e}"),
        }
    };
    let text = std::fs::read_to_string(&ptx).expect("read PTX");
    std::fs::write(
        out_dir.join("kernels.ptx"),
        with_module_additions(&text, BLOCK_THREADS),
    )
    .expect("write PTX into OUT_DIR");
}

/// Adds what Rust cannot express: the module-scope shared declarations the
/// kernels' inline assembly names (`ringreduce_kernels::arch`), and launch
/// bounds on every entry, what CUDA C++ writes as `__launch_bounds__(n, 1)`.
/// - `.maxntid`: without it ptxas may give a kernel more registers than a
///   block of `n` threads can have, and such a kernel cannot launch at all.
/// - `.minnctapersm 1`: one block per SM is all a rank ever has, so ptxas
///   need not save registers for a second one and can keep a whole unrolled
///   round of loads in flight (`bench/NOTES.md`).
fn with_module_additions(ptx: &str, n: u32) -> String {
    let mut out = String::with_capacity(ptx.len() + 4096);
    let mut in_entry_params = false;
    for line in ptx.lines() {
        if line.starts_with(".visible .entry") || line.starts_with(".entry") {
            in_entry_params = true;
        }
        out.push_str(line);
        out.push('\n');
        if line.starts_with(".address_size") {
            out.push_str(ringreduce_kernels::arch::SHARED_DECLARATIONS);
            out.push('\n');
        }
        if in_entry_params && line.trim_start().starts_with(')') {
            out.push_str(&format!(".maxntid {n}, 1, 1\n.minnctapersm 1\n"));
            in_entry_params = false;
        }
    }
    out
}
