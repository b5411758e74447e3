//! The CPU execution's device and kernel table (feature `cpu`, which needs
//! `std`): the very kernel code the GPU runs, on OS threads. It lives here,
//! not in the library, so that cargo compiles its hundred-odd kernel
//! instances while the library's build script builds the PTX, instead of
//! after it.

mod dispatch;
mod lane;

pub use dispatch::{run_local, run_rank};
pub use lane::{ArriveBarrier, BlockSync, Lane, OrBarrier, Trap, Trapped};
