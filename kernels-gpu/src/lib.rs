//! The ring reduce-scatter of `ringreduce`, written once.
//!
//! This crate is `no_std` and compiles for two targets:
//! * `nvptx64-nvidia-cuda`, where [`arch::nvptx`] maps the [`Device`] trait to
//!   PTX and `kernels` exports one entry point per (type, op);
//! * the host, where `ringreduce` implements [`Device`] with OS threads and
//!   runs the very same [`algorithm::reduce_scatter`] (the CPU execution).
//!
//! The kernel-argument struct ([`KernelArgs`]) and every sizing and padding
//! rule ([`plan`]) live here, so host and kernel cannot disagree on them.
#![no_std]
#![cfg_attr(
    target_arch = "nvptx64",
    feature(abi_ptx, stdarch_nvptx, asm_experimental_arch)
)]

/// Where this crate's source is: the host build script builds the kernels
/// from here, in the workspace and from a registry alike.
pub const MANIFEST_DIR: &str = env!("CARGO_MANIFEST_DIR");

pub mod algorithm;
pub mod arch;
pub mod args;
pub mod device;
pub mod element;
pub mod op;
pub mod plan;
pub mod primitives;
pub mod ring;

#[cfg(target_arch = "nvptx64")]
mod kernels;

pub use args::{KernelArgs, StatusRecord, WaitKind, WaitOutcome};
pub use device::{Device, Scope};
pub use element::{DataType, Element};
pub use op::{Avg, Max, Min, Op, Prod, ReduceOp, Sum};
pub use plan::{PlanError, Sizing};
