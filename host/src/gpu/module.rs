//! Loading the embedded kernels, once per device: SASS where it was built
//! for the device, else the PTX.

use crate::error::{Error, Result};
use cudarc::driver::{CudaContext, CudaFunction, CudaModule};
use cudarc::nvrtc::Ptx;
use ringreduce_kernels::abi::{kernel_name, local_kernel_name};
use ringreduce_kernels::{DataType, Op};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// The PTX of every kernel, built by `build.rs` from `ringreduce-kernels`.
pub const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/kernels.ptx"));

/// Names of the kernels the bench runner measures its ceilings with.
pub const COPY_BLOCK_KERNEL: &str = "ringreduce_copy_block";
pub const COPY_GRID_KERNEL: &str = "ringreduce_copy_grid";
pub const PINGPONG_KERNEL: &str = "ringreduce_pingpong";
pub const REDUCE_BLOCK_KERNEL: &str = "ringreduce_reduce_block";
/// The gradient layer's one entry (`ringreduce_kernels::grad`).
pub const TASK_KERNEL: &str = ringreduce_kernels::abi::TASK_ENTRY;

/// Every kernel entry the PTX must contain.
pub fn all_kernel_names() -> Vec<String> {
    let mut v: Vec<String> = DataType::ALL
        .iter()
        .flat_map(|&d| {
            Op::ALL
                .iter()
                .flat_map(move |&o| [kernel_name(d, o), local_kernel_name(d, o)].map(String::from))
        })
        .collect();
    v.extend(
        [
            COPY_BLOCK_KERNEL,
            COPY_GRID_KERNEL,
            PINGPONG_KERNEL,
            REDUCE_BLOCK_KERNEL,
            TASK_KERNEL,
        ]
        .map(String::from),
    );
    v
}

/// SASS built with the library for the GPUs named in `RINGREDUCE_SASS` at
/// build time (none by default): (compute capability, cubin).
pub const SASS: &[(u32, &[u8])] = include!(concat!(env!("OUT_DIR"), "/sass.rs"));

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

/// The embedded SASS for compute capability `cc`, if any.
pub fn sass_for(cc: u32) -> Option<&'static [u8]> {
    SASS.iter().find(|(c, _)| *c == cc).map(|&(_, bin)| bin)
}

/// Each device's module, by ordinal, and what it was loaded from.
type Loaded = HashMap<usize, (Arc<CudaModule>, KernelImage)>;

/// Loading JIT-compiles the whole PTX for the device, which takes a while
/// (unless SASS for it is embedded), so each device's module is loaded once
/// per process and shared.
fn modules() -> &'static Mutex<Loaded> {
    static M: OnceLock<Mutex<Loaded>> = OnceLock::new();
    M.get_or_init(|| Mutex::new(HashMap::new()))
}

pub fn module_for(ctx: &Arc<CudaContext>) -> Result<Arc<CudaModule>> {
    let mut m = modules().lock().unwrap_or_else(|e| e.into_inner());
    if let Some((module, _)) = m.get(&ctx.ordinal()) {
        return Ok(module.clone());
    }
    let (major, minor) = ctx.compute_capability()?;
    let cc = (major * 10 + minor) as u32;
    check_target(ctx.ordinal(), cc, ptx_target(PTX))?;
    // A driver older than the ptxas that built the SASS may refuse it; the
    // PTX still loads there, only slower.
    let (module, image) =
        match sass_for(cc).map(|bin| ctx.load_module(Ptx::from_binary(bin.to_vec()))) {
            Some(Ok(module)) => (module, KernelImage::Sass(cc)),
            refused => (
                ctx.load_module(Ptx::from_src(PTX))?,
                KernelImage::Ptx {
                    refused: refused.and_then(|r| r.err()).map(|e| e.to_string()),
                },
            ),
        };
    m.insert(ctx.ordinal(), (module.clone(), image));
    Ok(module)
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

/// What device `ordinal`'s kernels were loaded from, once loaded.
pub fn kernel_image(ordinal: usize) -> Option<KernelImage> {
    let m = modules().lock().unwrap_or_else(|e| e.into_inner());
    m.get(&ordinal).map(|(_, image)| image.clone())
}

/// The collective kernels of one device, by (type, op).
pub struct Kernels {
    pub module: Arc<CudaModule>,
    by_key: HashMap<(DataType, Op), CudaFunction>,
    /// The local kernels (`ringreduce_kernels::local`), by (type, op).
    local: HashMap<(DataType, Op), CudaFunction>,
    /// The gradient layer's task entry.
    pub task: CudaFunction,
}

impl Kernels {
    pub fn load(ctx: &Arc<CudaContext>) -> Result<Self> {
        let module = module_for(ctx)?;
        let mut by_key = HashMap::new();
        let mut local = HashMap::new();
        for &d in &DataType::ALL {
            for &o in &Op::ALL {
                by_key.insert((d, o), module.load_function(kernel_name(d, o))?);
                local.insert((d, o), module.load_function(local_kernel_name(d, o))?);
            }
        }
        let task = module.load_function(TASK_KERNEL)?;
        Ok(Kernels {
            module,
            by_key,
            local,
            task,
        })
    }

    /// The local kernel for (type, op).
    pub fn local(&self, dtype: DataType, op: Op) -> &CudaFunction {
        &self.local[&(dtype, op)]
    }

    /// Every local kernel.
    pub fn all_local(&self) -> impl Iterator<Item = &CudaFunction> {
        self.local.values()
    }

    pub fn get(&self, dtype: DataType, op: Op) -> &CudaFunction {
        &self.by_key[&(dtype, op)]
    }

    /// Every collective (ring and direct) kernel.
    pub fn all(&self) -> impl Iterator<Item = &CudaFunction> {
        self.by_key.values()
    }
}
