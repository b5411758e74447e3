//! Build support for `ringreduce`: compiles `ringreduce-kernels` to PTX,
//! and optionally that PTX to SASS for named GPUs.
//!
//! rustc's `nvptx64-nvidia-cuda` target normally links with the
//! `llvm-bitcode-linker` component, which cannot be installed everywhere we
//! build. rustc lets us name any linker, so the host crate's build script
//! names *itself*: when it is started with [`LINKER_ENV`] set, it runs
//! [`link_main`] instead of building. That keeps the whole pipeline inside
//! plain `cargo build`, with no tool to install and no step by hand.

mod linker;
mod modules;
mod nested;
mod progress;
pub mod ptx;
mod sass;
mod shipped;
mod toolchain;

pub use linker::{link_main, parse_link_args, partition, LinkArgs, LinkError, PART_MARKER};
pub use modules::{make_modules, EntrySpec, ModuleSpec};
pub use nested::{
    build_ptx, shared_target_dir, PtxBuild, PtxBuildError, ARCH_ENV, DEFAULT_ARCH, LINKER_ENV,
    PREBUILT_ENV,
};
pub use progress::{par_map, Progress};
pub use sass::{compile_sass, parse_sass_archs, PTXAS_ENV, SASS_ENV};
pub use shipped::{
    read_shipped, shipped_files, source_key, write_shipped, Shipped, ShippedFiles, FROM_SOURCE_ENV,
};
pub use toolchain::{KERNEL_COMPONENTS, KERNEL_TOOLCHAIN};

/// This crate's folder: its sources are part of the shipped PTX's key
/// ([`source_key`]), since its linker shapes that PTX.
pub const MANIFEST_DIR: &str = env!("CARGO_MANIFEST_DIR");
