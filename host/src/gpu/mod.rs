//! The GPU side: driver access, the embedded kernels and the communicator.

mod comm;
pub mod driver;
pub mod module;

pub use comm::{Communicator, RawBuffers, RsBuffers};
pub use driver::{device_count, driver_available, open_device};
