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

/// Runs `$body` with `$t` bound to the Rust element type of a [`DataType`]
/// value, for code that picks the type at run time:
///
/// ```
/// use ringreduce::{with_element_type, DataType};
/// let size = with_element_type!(DataType::Bf16, T => std::mem::size_of::<T>());
/// assert_eq!(size, 2);
/// ```
#[macro_export]
macro_rules! with_element_type {
    ($dtype:expr, $t:ident => $body:expr) => {{
        use $crate::DataType as D;
        match $dtype {
            D::I8 => {
                type $t = i8;
                $body
            }
            D::U8 => {
                type $t = u8;
                $body
            }
            D::I32 => {
                type $t = i32;
                $body
            }
            D::U32 => {
                type $t = u32;
                $body
            }
            D::I64 => {
                type $t = i64;
                $body
            }
            D::U64 => {
                type $t = u64;
                $body
            }
            D::F16 => {
                type $t = $crate::half::f16;
                $body
            }
            D::Bf16 => {
                type $t = $crate::half::bf16;
                $body
            }
            D::F32 => {
                type $t = f32;
                $body
            }
            D::F64 => {
                type $t = f64;
                $body
            }
        }
    }};
}
