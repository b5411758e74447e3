//! # ringreduce
//!
//! Ring collectives for NVIDIA GPUs (reduce-scatter, all-gather and
//! all-reduce, with several channels per rank), written entirely in Rust:
//! the kernels are the `no_std` crate `ringreduce-kernels` compiled to PTX
//! by rustc's `nvptx64-nvidia-cuda` target and embedded in this crate at
//! build time.
//!
//! * [`Communicator`]: `k` ranks, each on a GPU: one rank per GPU with
//!   peer-to-peer writes between neighbours, several virtual ranks on one
//!   GPU, or a mix.
//! * [`CpuCommunicator`]: the same kernel code on CPU threads, for machines
//!   without a GPU and for tests.
//! * [`Collectives`]: the trait both implement, for code written once.
//!
//! ## Example
//! A reduce-scatter on four ranks of the CPU execution (on a GPU,
//! [`Communicator`] takes the same calls on cudarc buffers and streams):
//! ```
//! use ringreduce::{CpuBuffers, CpuCommunicator, HostBuffer, Op};
//! let (k, n) = (4, 1000);
//! let comm = CpuCommunicator::new(k)?;
//! let send: Vec<_> = (0..k).map(|r| HostBuffer::from_slice(&vec![r as f32; k * n])).collect();
//! let recv: Vec<_> = (0..k).map(|_| HostBuffer::<f32>::zeroed(n)).collect();
//! let bufs: Vec<_> = (0..k)
//!     .map(|u| CpuBuffers::out_of_place(send[u].as_view(), recv[u].as_view()))
//!     .collect();
//! comm.reduce_scatter(&bufs, Op::Sum)?; // queued on the ranks' threads
//! comm.synchronize()?; // waits, and reports timeouts and aborts
//! assert!(recv.iter().all(|r| r.to_vec() == vec![6.0; n])); // 0 + 1 + 2 + 3
//! # Ok::<(), ringreduce::Error>(())
//! ```
//!
//! ## Semantics (NCCL's)
//! For a count `n`:
//! * **reduce-scatter**: `send` holds `k` blocks of `n`, `recv` holds `n`;
//!   `recv` of user rank `u` is `op` over all ranks of block `u`. In place:
//!   `recv = send + u * n`.
//! * **all-gather**: `send` holds `n`, `recv` holds `k * n`; block `u` of
//!   every `recv` is user rank `u`'s `send`. In place: `send = recv + u * n`.
//! * **all-reduce**: `send` and `recv` hold `n` (any `n`); every `recv` is
//!   `op` over all ranks' `send`, bitwise the same on every rank. In place:
//!   `send == recv`.
//!
//! The fold order of every element is fixed by the algorithm and does not
//! depend on the number of channels or on timing, so float results are
//! deterministic run to run and identical between the GPU and the CPU
//! execution. The ring folds in ring order; the direct algorithms (small
//! messages) and the local one (every rank on one device, one launch) fold
//! in user-rank order `0..k` (see [`Algo`]). So with `Auto`
//! a float result can change in its last bits where the size crosses from
//! one algorithm to the other; force one with [`CommConfig::algorithm`]
//! where that matters.
//!
//! ## Arithmetic
//! Integers wrap. Floats round to nearest even after every operation. `f16`
//! and `bf16` are reduced in their own precision like NCCL's
//! `__hadd2`/`__hmul2`: each operation is computed in `f32` and rounded once,
//! which is bit-identical to native half arithmetic. `Max`/`Min` ignore a
//! NaN operand (like `fmaxf`) and order `-0 < +0`. `Avg` sums and divides
//! once by `k` at the last step (integers truncate toward zero).

#![deny(missing_docs)]

mod across;
pub mod algorithm;
pub mod bootstrap;
mod channels;
mod collectives;
pub mod config;
pub mod cpu;
pub mod element;
pub mod error;
mod front;
pub mod gpu;
pub mod grad;
mod hier;
mod hooks;
mod job;
mod layout;
mod memo;
#[cfg(feature = "nccl")]
pub mod nccl;
#[cfg(feature = "nccl")]
mod nccl_comm;
pub mod nodes;
mod planner;
pub mod reference;
mod region;
pub mod ring;
mod shm;
mod state;
mod status;
mod topology;

/// Not part of the API: the planner, for this repository's own tests and
/// fuzzer (the kernel module, for the bench, is the hidden `gpu::module`).
/// Either may change in any release.
#[doc(hidden)]
pub mod internals {
    pub use crate::algorithm::direct_layout;
    pub use crate::channels::*;
    pub use crate::planner::*;
}

pub use algorithm::Algo;
pub use collectives::Collectives;
pub use config::CommConfig;
pub use cpu::{CpuBackend, CpuBuffers, CpuCommunicator, HostBuffer, HostView};
pub use element::{DataType, Element, RsElement};
pub use error::{AbortSeen, Error, Result, TimeoutInfo};
pub use front::{Backend, Comm};
pub use gpu::{Buffers, Communicator, GpuBackend, RawBuffers};
pub use grad::{GradConfig, GradSync, Precision, Sparsity};
pub use half;
pub use hier::HierComm;
#[cfg(feature = "nccl")]
pub use nccl_comm::NcclCommunicator;
pub use region::Region;
pub use ring::RingOrder;
pub use ringreduce_kernels as kernels;
pub use ringreduce_kernels::abi::BATCH_RANKS;
pub use ringreduce_kernels::{Algorithm, Collective, Op, WaitKind};

/// The README's examples, compiled (and run, where they need no GPU) as
/// doc tests, so that the first code a user copies works.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeExamples;

/// The usage guide's examples, tested the same way.
#[cfg(doctest)]
#[doc = include_str!("../../docs/usage.md")]
pub struct UsageExamples;
