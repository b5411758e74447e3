//! Loading the embedded PTX, once per device.

use crate::error::Result;
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

/// Loading JIT-compiles the whole PTX for the device, which takes a while,
/// so each device's module is loaded once per process and shared.
fn modules() -> &'static Mutex<HashMap<usize, Arc<CudaModule>>> {
    static M: OnceLock<Mutex<HashMap<usize, Arc<CudaModule>>>> = OnceLock::new();
    M.get_or_init(|| Mutex::new(HashMap::new()))
}

pub fn module_for(ctx: &Arc<CudaContext>) -> Result<Arc<CudaModule>> {
    let mut m = modules().lock().unwrap_or_else(|e| e.into_inner());
    if let Some(module) = m.get(&ctx.ordinal()) {
        return Ok(module.clone());
    }
    let module = ctx.load_module(Ptx::from_src(PTX))?;
    m.insert(ctx.ordinal(), module.clone());
    Ok(module)
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
