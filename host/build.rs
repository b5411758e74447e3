//! Builds the kernels to PTX and embeds them. The same executable is also
//! the PTX linker of that nested build (see `ringreduce_build`).

use ringreduce_build::{build_ptx, PtxBuild, ARCH_ENV, DEFAULT_ARCH, LINKER_ENV};
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
    println!("cargo:rerun-if-changed={}", kernels.join("Cargo.toml").display());
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
    std::fs::copy(&ptx, out_dir.join("kernels.ptx")).expect("copy PTX into OUT_DIR");
}
