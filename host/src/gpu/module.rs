//! Loading the kernels on demand: each entry of the kernel catalogue
//! (`ringreduce_kernels::catalogue`) is a module of its own, loaded on a
//! device the first time a call needs it, from SASS where it was built for
//! the device, else from the PTX.
//!
//! The driver JIT-compiles a PTX module whole when it is loaded, and lazy
//! loading does not defer that; so a process compiles only the entries it
//! runs, and a first call waits for one entry, not for all of them.

use crate::error::{Error, Result};
use cudarc::driver::{CudaContext, CudaFunction, CudaModule};
use cudarc::nvrtc::Ptx;
use ringreduce_kernels::catalogue::{self, Entry, COLLECTIVE_ENTRIES, OTHER_ENTRIES};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Every module's PTX, by name, built by `build.rs` from
/// `ringreduce-kernels`: one per catalogue module.
pub const MODULES: &[(&str, &str)] = include!(concat!(env!("OUT_DIR"), "/modules.rs"));

/// One GPU's embedded SASS: a cubin per module, by module name.
pub type SassModules = &'static [(&'static str, &'static [u8])];

/// SASS built with the library for the GPUs named in `RINGREDUCE_SASS` at
/// build time (none by default): (compute capability, a cubin per module).
pub const SASS: &[(u32, SassModules)] = include!(concat!(env!("OUT_DIR"), "/sass.rs"));

/// The PTX of module `name`.
pub fn ptx_of(name: &str) -> Option<&'static str> {
    MODULES.iter().find(|(n, _)| *n == name).map(|&(_, p)| p)
}

/// The embedded SASS of module `name` for compute capability `cc`, if any.
pub fn sass_for(cc: u32, name: &str) -> Option<&'static [u8]> {
    let (_, modules) = SASS.iter().find(|(c, _)| *c == cc)?;
    modules
        .iter()
        .find(|(n, _)| *n == name)
        .map(|&(_, bin)| bin)
}

/// Whether SASS for compute capability `cc` is embedded.
pub fn has_sass(cc: u32) -> bool {
    SASS.iter().any(|(c, _)| *c == cc)
}

/// What a device's kernels were loaded from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KernelImage {
    /// The embedded SASS for this compute capability: no JIT.
    Sass(u32),
    /// The PTX, JIT-compiled by the driver (cached by it across processes).
    /// `refused` holds the driver's error where SASS for the device was
    /// embedded but would not load.
    Ptx { refused: Option<String> },
}

impl std::fmt::Display for KernelImage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KernelImage::Sass(cc) => write!(f, "SASS sm_{cc}"),
            KernelImage::Ptx { refused: None } => write!(f, "PTX (driver JIT)"),
            KernelImage::Ptx { refused: Some(e) } => {
                write!(f, "PTX (driver JIT; its SASS was refused: {e})")
            }
        }
    }
}

/// One module's load on one device.
#[derive(Debug, Clone, PartialEq)]
pub struct ModuleLoad {
    pub module: &'static str,
    /// Bytes of the image loaded (PTX text or cubin).
    pub bytes: usize,
    /// How long the driver took (the JIT's time, for PTX).
    pub took: Duration,
    pub image: KernelImage,
}

/// Whether `CUDA_FORCE_PTX_JIT=1` asks for the PTX: the driver applies it
/// to the SASS of fat binaries only, not to a cubin the library loads
/// itself, so the loader honours it here.
pub fn force_ptx_jit() -> bool {
    static F: OnceLock<bool> = OnceLock::new();
    *F.get_or_init(|| std::env::var("CUDA_FORCE_PTX_JIT").is_ok_and(|v| v == "1"))
}

/// The index in [`MODULES`] of each catalogue entry's module, in the
/// order of `catalogue::all()`.
fn module_indices() -> &'static [usize] {
    static M: OnceLock<Vec<usize>> = OnceLock::new();
    M.get_or_init(|| {
        catalogue::all()
            .map(|e| {
                MODULES
                    .iter()
                    .position(|(n, _)| *n == e.module)
                    .expect("build.rs makes every catalogue module")
            })
            .collect()
    })
}

/// The position of `e`, one of [`OTHER_ENTRIES`], in `catalogue::all()`.
fn other_index(e: &Entry) -> Result<usize> {
    let i = OTHER_ENTRIES
        .iter()
        .position(|o| o.name == e.name)
        .ok_or_else(|| {
            Error::Driver(format!(
                "{} is not one of the catalogue's other entries (a collective entry is \
                 loaded by its index)",
                e.name
            ))
        })?;
    Ok(COLLECTIVE_ENTRIES.len() + i)
}

/// The kernels of one device: every catalogue entry, each loaded the first
/// time it is asked for. Shared by every communicator on the device in this
/// process (see [`Kernels::of`]).
pub struct Kernels {
    ctx: Arc<CudaContext>,
    cc: u32,
    modules: Vec<OnceLock<Arc<CudaModule>>>,
    /// By position in `catalogue::all()`.
    functions: Vec<OnceLock<CudaFunction>>,
    /// Held while a module loads, so that concurrent first calls load it
    /// once; every later call reads its `OnceLock` without it.
    loading: Mutex<Vec<ModuleLoad>>,
}

/// Each device's kernels, by ordinal.
fn devices() -> &'static Mutex<HashMap<usize, Arc<Kernels>>> {
    static D: OnceLock<Mutex<HashMap<usize, Arc<Kernels>>>> = OnceLock::new();
    D.get_or_init(|| Mutex::new(HashMap::new()))
}

impl Kernels {
    /// The kernels of `ctx`'s device, loading nothing yet; a typed error if
    /// the device is older than the PTX's target.
    pub fn of(ctx: &Arc<CudaContext>) -> Result<Arc<Kernels>> {
        let mut d = devices().lock().unwrap_or_else(|e| e.into_inner());
        if let Some(k) = d.get(&ctx.ordinal()) {
            return Ok(k.clone());
        }
        let (major, minor) = ctx.compute_capability()?;
        let cc = (major * 10 + minor) as u32;
        let target = MODULES.first().and_then(|(_, p)| ptx_target(p));
        check_target(ctx.ordinal(), cc, target)?;
        let k = Arc::new(Kernels {
            ctx: ctx.clone(),
            cc,
            modules: MODULES.iter().map(|_| OnceLock::new()).collect(),
            functions: catalogue::all().map(|_| OnceLock::new()).collect(),
            loading: Mutex::new(Vec::new()),
        });
        d.insert(ctx.ordinal(), k.clone());
        Ok(k)
    }

    /// The collective entry at `index` of `COLLECTIVE_ENTRIES` (see
    /// `catalogue::collective_index`), loaded if it was not.
    #[inline]
    pub fn collective(&self, index: usize) -> Result<&CudaFunction> {
        if index >= COLLECTIVE_ENTRIES.len() {
            return Err(Error::Driver(format!(
                "no collective entry {index} (the catalogue has {})",
                COLLECTIVE_ENTRIES.len()
            )));
        }
        self.function(index)
    }

    /// `e`, one of the catalogue's other entries (the task, the ceilings),
    /// loaded if it was not.
    pub fn other(&self, e: &Entry) -> Result<&CudaFunction> {
        self.function(other_index(e)?)
    }

    /// The function at position `i` of `catalogue::all()`.
    fn function(&self, i: usize) -> Result<&CudaFunction> {
        if let Some(f) = self.functions[i].get() {
            return Ok(f);
        }
        let e = catalogue::all().nth(i).expect("an index of the catalogue");
        let module = self.module(module_indices()[i])?;
        let f = module.load_function(e.name)?;
        // The launch bounds promise the co-residency the communicator was
        // sized with, before anything was loaded: hold the driver to it.
        let fits = super::driver::blocks_per_sm(&f, e.threads)?;
        if fits < e.min_blocks_per_sm as usize {
            return Err(Error::Driver(format!(
                "kernel {} fits {fits} blocks of {} threads per SM, fewer than its launch \
                 bounds' {}",
                e.name, e.threads, e.min_blocks_per_sm
            )));
        }
        Ok(self.functions[i].get_or_init(|| f))
    }

    /// Module `m` of [`MODULES`], loaded once: SASS where it was built for
    /// this device, else the PTX. A driver older than the ptxas that built
    /// the SASS may refuse it; the PTX still loads there, only slower.
    fn module(&self, m: usize) -> Result<Arc<CudaModule>> {
        if let Some(module) = self.modules[m].get() {
            return Ok(module.clone());
        }
        let mut loads = self.loading.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(module) = self.modules[m].get() {
            return Ok(module.clone());
        }
        let (name, ptx) = MODULES[m];
        let start = Instant::now();
        let sass = sass_for(self.cc, name).filter(|_| !force_ptx_jit());
        let (module, image, bytes) =
            match sass.map(|bin| self.ctx.load_module(Ptx::from_binary(bin.to_vec()))) {
                Some(Ok(module)) => (
                    module,
                    KernelImage::Sass(self.cc),
                    sass.map_or(0, |b| b.len()),
                ),
                refused => (
                    self.ctx.load_module(Ptx::from_src(ptx))?,
                    KernelImage::Ptx {
                        refused: refused.and_then(|r| r.err()).map(|e| e.to_string()),
                    },
                    ptx.len(),
                ),
            };
        loads.push(ModuleLoad {
            module: name,
            bytes,
            took: start.elapsed(),
            image,
        });
        Ok(self.modules[m].get_or_init(|| module).clone())
    }

    /// Every module loaded on this device so far, in load order.
    pub fn loads(&self) -> Vec<ModuleLoad> {
        self.loading
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// The modules loaded on device `ordinal` so far, in load order (none if
/// no communicator used it).
pub fn module_loads(ordinal: usize) -> Vec<ModuleLoad> {
    let d = devices().lock().unwrap_or_else(|e| e.into_inner());
    d.get(&ordinal).map(|k| k.loads()).unwrap_or_default()
}

/// What device `ordinal`'s kernels were loaded from, once any was: SASS
/// if every module so far came from SASS, else the PTX (with the first
/// refusal, if SASS was refused).
pub fn kernel_image(ordinal: usize) -> Option<KernelImage> {
    let loads = module_loads(ordinal);
    let first = loads.first()?;
    Some(
        loads
            .iter()
            .find(|l| matches!(l.image, KernelImage::Ptx { .. }))
            .unwrap_or(first)
            .image
            .clone(),
    )
}

/// The architecture a PTX text targets (`.target sm_80` gives 80).
pub fn ptx_target(ptx: &str) -> Option<u32> {
    let line = ptx.lines().find(|l| l.starts_with(".target "))?;
    let sm = line[".target ".len()..].split([',', ' ']).next()?;
    sm.strip_prefix("sm_")?.parse().ok()
}

/// A typed error, before the driver's opaque one, when device `device` of
/// compute capability `cc` is older than the PTX's target: neither the JIT
/// nor ptxas compiles PTX down to an older GPU.
pub fn check_target(device: usize, cc: u32, target: Option<u32>) -> Result<()> {
    match target {
        Some(ptx) if cc < ptx => Err(Error::GpuTooOld { device, cc, ptx }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The task and the ceilings follow the collective entries in
    /// `catalogue::all()`; a collective entry asked for as one of them is
    /// a typed error, not a panic.
    #[test]
    fn other_entries_follow_the_collective_ones() {
        for (i, e) in OTHER_ENTRIES.iter().enumerate() {
            let at = other_index(e).expect("an other entry");
            assert_eq!(at, COLLECTIVE_ENTRIES.len() + i);
            assert_eq!(catalogue::all().nth(at).map(|x| x.name), Some(e.name));
        }
        assert!(matches!(
            other_index(&COLLECTIVE_ENTRIES[0]),
            Err(Error::Driver(_))
        ));
        // Every entry's module is one of the built ones.
        assert_eq!(module_indices().len(), catalogue::all().count());
    }
}
