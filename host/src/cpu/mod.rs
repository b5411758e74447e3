//! The CPU execution: the GPU's ring kernels run by OS threads.

mod buffer;
mod comm;
mod setup;
mod tasks;

pub use buffer::{HostBuffer, HostView};
pub use comm::{CpuBackend, CpuBuffers, CpuCommunicator};
pub use tasks::{Hold, CPU_TASK_LANES};
