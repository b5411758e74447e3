//! Element types usable in collectives.

use cudarc::driver::{DeviceRepr, ValidAsZeroBits};
pub use ringreduce_kernels::{DataType, Element};

mod sealed {
    pub trait Sealed {}
}

/// The ten element types: `i8`, `u8`, `i32`, `u32`, `i64`, `u64`,
/// `half::f16`, `half::bf16`, `f32`, `f64`. Sealed, because every type needs
/// kernels compiled for it.
pub trait RsElement:
    Element + DeviceRepr + ValidAsZeroBits + bytemuck::Pod + std::fmt::Debug + sealed::Sealed
{
}

macro_rules! rs_element {
    ($($t:ty),*) => {$(
        impl sealed::Sealed for $t {}
        impl RsElement for $t {}
    )*};
}
rs_element!(i8, u8, i32, u32, i64, u64, half::f16, half::bf16, f32, f64);
