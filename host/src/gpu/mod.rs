//! The GPU side: driver access, the embedded kernels and the communicator.

mod comm;
mod driver;
#[doc(hidden)]
pub mod module;

pub use comm::{Communicator, RawBuffers, RsBuffers};
pub use driver::{device_count, driver_available, open_device};
