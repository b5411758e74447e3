//! The nested `cargo` build of the kernel crate for `nvptx64-nvidia-cuda`,
//! in the style of Rust-CUDA's `cuda_builder`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::toolchain::{ensure_toolchain, find_rustup, KERNEL_COMPONENTS, KERNEL_TOOLCHAIN};

/// Set in the nested build's environment; the host build script checks it
/// first and, when set, behaves as the PTX linker.
pub const LINKER_ENV: &str = "RINGREDUCE_PTX_LINKER";
/// Overrides the PTX target architecture (`sm_80` by default).
pub const ARCH_ENV: &str = "RINGREDUCE_PTX_ARCH";
/// Ampere is the oldest GPU with the `mbarrier` the ring hands its slices
/// over with, a hand-off compute-sanitizer's racecheck can check; the
/// driver JIT-compiles sm_80 PTX for anything newer. `sm_70` and `sm_75`
/// still build, with a polled hand-off instead.
pub const DEFAULT_ARCH: &str = "sm_80";

const TARGET: &str = "nvptx64-nvidia-cuda";

/// The PTX ISA version the kernels are written in: 7.1, the first with
/// `mbarrier.test_wait.parity` (CUDA 11.1 drivers, 455, and newer load
/// it). LLVM would otherwise pick 7.0 for sm_80.
pub const PTX_ISA: &str = "ptx71";

/// A prebuilt PTX file to embed instead of building one (for machines
/// without rustup, or to try an edited PTX).
pub const PREBUILT_ENV: &str = "RINGREDUCE_PTX_FILE";

/// One PTX build request.
#[derive(Debug, Clone)]
pub struct PtxBuild {
    /// Directory holding the kernel crate's `Cargo.toml`.
    pub kernel_crate: PathBuf,
    /// Cargo package name of the kernel crate (its lib is `name` with `_`).
    pub package: String,
    /// Features to enable in the kernel crate.
    pub features: Vec<String>,
    /// `sm_XX`.
    pub arch: String,
    /// Where the nested build keeps its own target directory. Keeping it
    /// outside `OUT_DIR` lets debug, test and release builds share one cached
    /// `core`.
    pub target_dir: PathBuf,
    /// The executable rustc should call as the linker (the build script).
    pub linker: PathBuf,
}

#[derive(Debug)]
pub enum PtxBuildError {
    /// The pinned toolchain is missing and could not be installed.
    Toolchain(String),
    Spawn(std::io::Error),
    Failed(String),
    Missing(PathBuf),
}

impl std::fmt::Display for PtxBuildError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PtxBuildError::Toolchain(s) => write!(
                f,
                "the kernels need the toolchain {KERNEL_TOOLCHAIN} with {}: {s}. Without rustup, \
                 set {PREBUILT_ENV} to a prebuilt kernels.ptx",
                KERNEL_COMPONENTS.join(" and ")
            ),
            PtxBuildError::Spawn(e) => write!(
                f,
                "could not start the nested cargo build: {e}. Without cargo or rustup, set \
                 {PREBUILT_ENV} to a prebuilt kernels.ptx"
            ),
            PtxBuildError::Failed(s) => write!(
                f,
                "building the kernels for {TARGET} failed ({s}). They need the toolchain \
                 {KERNEL_TOOLCHAIN} with {}; without rustup, set {PREBUILT_ENV} to a prebuilt \
                 kernels.ptx",
                KERNEL_COMPONENTS.join(" and ")
            ),
            PtxBuildError::Missing(p) => {
                write!(f, "the nested build wrote no PTX at {}", p.display())
            }
        }
    }
}

impl std::error::Error for PtxBuildError {}

/// Finds a stable place for the nested target directory: beside the outer
/// `target/<profile>` directory, derived from `OUT_DIR`.
pub fn shared_target_dir(out_dir: &Path) -> PathBuf {
    if let Some(d) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(d).join("ringreduce-ptx");
    }
    // OUT_DIR = <target>/[<triple>/]<profile>/build/<pkg>-<hash>/out
    let mut p = out_dir;
    while let Some(parent) = p.parent() {
        if p.file_name().map(|n| n == "build").unwrap_or(false) {
            if let Some(target) = parent.parent() {
                return target.join("ringreduce-ptx");
            }
        }
        p = parent;
    }
    out_dir.join("ringreduce-ptx")
}

/// Environment variables of the outer build that must not leak into the
/// nested one (they carry host flags, wrappers such as clippy-driver, or a
/// target of their own).
const SCRUB: &[&str] = &[
    "CARGO_ENCODED_RUSTFLAGS",
    "RUSTFLAGS",
    "RUSTC_WRAPPER",
    "RUSTC_WORKSPACE_WRAPPER",
    "CARGO_TARGET_DIR",
    "CARGO_BUILD_TARGET",
    "CARGO_BUILD_RUSTFLAGS",
    "CARGO_PRIMARY_PACKAGE",
    "CARGO_LLVM_COV",
    "LLVM_PROFILE_FILE",
    "CARGO_BUILD_RUSTC_WRAPPER",
    "RUSTDOCFLAGS",
    // The outer toolchain's own tools: the nested build runs the pinned one.
    "RUSTC",
    "RUSTDOC",
    "RUSTC_LINKER",
    "RUSTUP_TOOLCHAIN",
    "CARGO",
];

/// Runs the nested build and returns the path of the PTX it wrote.
pub fn build_ptx(b: &PtxBuild) -> Result<PathBuf, PtxBuildError> {
    // The pinned toolchain through rustup where there is one, whatever
    // channel builds the dependent crate; else whatever cargo this is.
    let mut cmd = match find_rustup() {
        Some(rustup) => {
            ensure_toolchain(&rustup).map_err(PtxBuildError::Toolchain)?;
            let mut c = Command::new(rustup);
            c.args(["run", KERNEL_TOOLCHAIN, "cargo"]);
            c
        }
        None => Command::new(std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"))),
    };
    cmd.arg("rustc")
        .arg("--manifest-path")
        .arg(b.kernel_crate.join("Cargo.toml"))
        .args([
            "--lib",
            "--release",
            "--crate-type",
            "cdylib",
            "--target",
            TARGET,
        ])
        .arg("-Zbuild-std=core")
        .arg("--target-dir")
        .arg(&b.target_dir);
    if !b.features.is_empty() {
        cmd.arg("--features").arg(b.features.join(","));
    }
    for v in SCRUB {
        cmd.env_remove(v);
    }
    for (k, _) in std::env::vars_os() {
        if let Some(k) = k.to_str() {
            if k.starts_with("CARGO_FEATURE_") || k.starts_with("CARGO_CFG_") {
                cmd.env_remove(k);
            }
        }
    }
    let flags = [
        format!("-Clinker={}", b.linker.display()),
        format!("-Ctarget-cpu={}", b.arch),
        format!("-Ctarget-feature=+{PTX_ISA}"),
    ];
    cmd.env("CARGO_ENCODED_RUSTFLAGS", flags.join("\u{1f}"));
    cmd.env(LINKER_ENV, "1");
    let status = cmd.status().map_err(PtxBuildError::Spawn)?;
    if !status.success() {
        return Err(PtxBuildError::Failed(status.to_string()));
    }
    let ptx = b
        .target_dir
        .join(TARGET)
        .join("release")
        .join(format!("{}.ptx", b.package.replace('-', "_")));
    if ptx.exists() {
        Ok(ptx)
    } else {
        Err(PtxBuildError::Missing(ptx))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_dir_sits_beside_the_profile_dirs() {
        std::env::remove_var("CARGO_TARGET_DIR");
        let out = Path::new("/w/target/debug/build/ringreduce-abc/out");
        assert_eq!(
            shared_target_dir(out),
            PathBuf::from("/w/target/ringreduce-ptx")
        );
        let out = Path::new("/w/target/x86_64-unknown-linux-gnu/release/build/r-1/out");
        assert_eq!(
            shared_target_dir(out),
            PathBuf::from("/w/target/x86_64-unknown-linux-gnu/ringreduce-ptx")
        );
    }
}
