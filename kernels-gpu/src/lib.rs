//! The ring collectives of `ringreduce`, written once.
//!
//! This crate is `no_std` and compiles for two targets:
//! * `nvptx64-nvidia-cuda`, where `arch::nvptx` maps the [`Device`] and
//!   [`Handoff`] traits to PTX and `kernels` exports one entry point per
//!   (type, op);
//! * the host, where `ringreduce` implements them with OS threads and runs
//!   the very same [`engine::run`] (the CPU execution).
//!
//! It reads top down: [`entry`] picks the algorithm; a collective's
//! [`schedule`], the ring [`engine`] that runs any schedule, the step
//! [`primitives`] and their one [`transfer`] loop; or the [`direct`]
//! collectives over the same loops, or the [`local`] ones, which need no
//! protocol at all; then the [`flags`] protocol and the
//! [`Device`] intrinsics. The ABI
//! ([`abi`]) and every sizing and padding rule ([`plan`]) live here, so
//! host and kernel cannot disagree on them.
//!
//! Inlining: the GPU's code is forced inline (`inline(always)` on nvptx64),
//! since a call there costs registers and local memory. On the CPU the same
//! functions are only `#[inline]`: that is what lets rustc compile each
//! generic instance in the codegen unit of the table row that calls it
//! (`cpu::dispatch`), so the CPU kernel table builds on every core (26 s on
//! 2 cores, release, instead of 62 s on one).
#![no_std]
#![cfg_attr(target_arch = "nvptx64", feature(abi_ptx, asm_experimental_arch))]

// The CPU execution (`cpu`) runs on OS threads.
#[cfg(feature = "cpu")]
extern crate std;

/// Where this crate's source is: the host build script builds the kernels
/// from here, in the workspace and from a registry alike.
pub const MANIFEST_DIR: &str = env!("CARGO_MANIFEST_DIR");

pub mod abi;
pub mod arch;
pub mod catalogue;
#[cfg(feature = "cpu")]
pub mod cpu;
pub mod device;
pub mod direct;
pub mod element;
pub mod engine;
pub mod entry;
pub mod flags;
pub mod grad;
pub mod groups;
pub mod local;
pub mod op;
pub mod plan;
pub mod primitives;
pub mod ring;
pub mod schedule;
pub mod transfer;
pub mod types;
mod unroll;

#[cfg(target_arch = "nvptx64")]
mod kernels;

pub use abi::{
    ChannelConn, DirectPeer, RankConn, RankInfo, StatusRecord, WaitKind, WaitOutcome, Work,
};
pub use device::{Device, Handoff, SliceWork, RELEASE_SLOTS, SLICE_WORDS};
pub use element::Element;
pub use op::{Avg, Max, Min, Prod, ReduceOp, Sum};
pub use plan::{Chunking, Geometry, PlanError, Sizing};
pub use types::{Algorithm, Collective, DataType, Op, Scope};
