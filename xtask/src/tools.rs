//! NVIDIA's ptxas, nvdisasm and cuobjdump from their PyPI wheels, so no CUDA
//! toolkit is needed: `sass` reads register counts with them, and the
//! release builds (`with_sass`) build the kernels' SASS with them.

use crate::util::{fail, target_dir};
use ringreduce_build::{parse_sass_archs, PTXAS_ENV, SASS_ENV};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The CUDA release of ptxas: 13.0, that of the 580 drivers the project's
/// GPU hosts run, so the bundle's SASS comes from the same compiler as
/// those drivers' own JIT.
pub const CUDA_TOOLS: &str = "13.0";

/// The folder holding `ptxas`, `nvdisasm` and `cuobjdump`, fetched on first
/// use into `target/cuda-tools/<CUDA_TOOLS>/`; exits if they cannot be.
pub fn cuda_tools(root: &Path) -> PathBuf {
    fetch_cuda_tools(root).unwrap_or_else(|e| fail(e))
}

/// [`cuda_tools`], or why they could not be fetched (no `python3`, no pip,
/// no network), for callers that can do without them.
pub fn fetch_cuda_tools(root: &Path) -> Result<PathBuf, String> {
    let tools = target_dir(root).join("cuda-tools").join(CUDA_TOOLS);
    let bin = tools.join("bin");
    let names = ["ptxas", "nvdisasm", "cuobjdump"];
    if names.iter().all(|b| bin.join(b).is_file()) {
        return Ok(bin);
    }
    println!(
        "fetching NVIDIA's CUDA {CUDA_TOOLS} ptxas, nvdisasm and cuobjdump wheels from PyPI into {}",
        tools.display()
    );
    let run = |c: &mut Command| -> Result<(), String> {
        let st = c
            .status()
            .map_err(|e| format!("{:?}: {e}", c.get_program()))?;
        st.success()
            .then_some(())
            .ok_or_else(|| format!("{:?} {:?}: {st}", c.get_program(), c.get_args()))
    };
    let wheels = tools.join("wheels");
    // Only ptxas makes what ships; the disassemblers (no 13.0 wheels on
    // PyPI) read older cubins, so theirs are the newest.
    run(Command::new("python3")
        .args(["-m", "pip", "download", "-q", "--no-deps", "-d"])
        .arg(&wheels)
        .args([
            format!("nvidia-cuda-nvcc=={CUDA_TOOLS}.*"),
            "nvidia-cuda-nvdisasm".into(),
            "nvidia-cuda-cuobjdump".into(),
        ]))?;
    std::fs::create_dir_all(&bin).map_err(|e| format!("{}: {e}", bin.display()))?;
    let listed = std::fs::read_dir(&wheels).map_err(|e| format!("{}: {e}", wheels.display()))?;
    for w in listed.flatten() {
        run(Command::new("python3")
            .args(["-m", "zipfile", "-e"])
            .arg(w.path())
            .arg(tools.join("x")))?;
    }
    for b in names {
        let found = find_file(&tools.join("x"), b).ok_or(format!("no {b} in the wheels"))?;
        let _ = std::fs::remove_file(bin.join(b));
        std::fs::copy(&found, bin.join(b)).map_err(|e| format!("{}: {e}", found.display()))?;
        run(Command::new("chmod").arg("+x").arg(bin.join(b)))?;
    }
    Ok(bin)
}

/// The GPUs release builds embed SASS for unless `RINGREDUCE_SASS` says
/// otherwise: the H200s (sm_90) the evidence is gathered on, whose first
/// process would otherwise spend about 100 s in the driver's JIT.
const BUNDLE_SASS: &str = "sm_90";

/// Sets a release build's SASS request: the caller's `RINGREDUCE_SASS` if
/// set (`none` for none), else [`BUNDLE_SASS`], and ptxas from the pinned
/// wheels unless `RINGREDUCE_PTXAS` names one. Where the wheels cannot be
/// fetched and the caller asked for nothing, it builds without SASS and
/// says so: the PTX still runs everywhere.
pub fn with_sass(c: &mut Command, root: &Path) {
    let asked = std::env::var(SASS_ENV).ok();
    let archs = asked.clone().unwrap_or_else(|| BUNDLE_SASS.to_string());
    let wanted = !parse_sass_archs(&archs)
        .unwrap_or_else(|e| fail(e))
        .is_empty();
    c.env(SASS_ENV, &archs);
    if !wanted || std::env::var_os(PTXAS_ENV).is_some() {
        return;
    }
    match (fetch_cuda_tools(root), asked) {
        (Ok(bin), _) => {
            c.env(PTXAS_ENV, bin.join("ptxas"));
        }
        (Err(e), Some(_)) => fail(format!("{SASS_ENV}={archs} needs ptxas: {e}")),
        (Err(e), None) => {
            println!(
                "xtask: no ptxas ({e}); building without SASS, so the first process on each \
                 machine waits for the driver's JIT"
            );
            c.env(SASS_ENV, "none");
        }
    }
}

fn find_file(dir: &Path, name: &str) -> Option<PathBuf> {
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        let p = e.path();
        if p.is_dir() {
            if let Some(f) = find_file(&p, name) {
                return Some(f);
            }
        } else if p.file_name().is_some_and(|n| n == name) {
            return Some(p);
        }
    }
    None
}
