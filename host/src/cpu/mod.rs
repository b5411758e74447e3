//! The CPU execution: the GPU's ring kernels run by OS threads.

mod buffer;
mod comm;
mod lane;

pub use buffer::{HostBuffer, HostView};
pub use comm::{CpuBuffers, CpuCommunicator};
