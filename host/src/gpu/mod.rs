//! The GPU side: driver access, the embedded kernels and the communicator,
//! read as setup (resources) → launch → API.

mod buffers;
mod checks;
mod comm;
pub(crate) mod driver;
mod inner;
mod job;
mod launch;
#[doc(hidden)]
pub mod module;
mod setup;

pub use buffers::{Buffers, RawBuffers};
pub use comm::{Communicator, GpuBackend};
pub use driver::capture;
pub use driver::{device_count, driver_available, open_device};
pub(crate) use launch::launch_task;
pub use launch::task_blocks;
#[doc(hidden)]
pub use setup::resident_blocks_of;
