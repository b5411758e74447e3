//! Target-specific pieces. All inline assembly lives in [`nvptx`]; the host
//! side needs none.

#[cfg(target_arch = "nvptx64")]
pub mod nvptx;

#[cfg(target_arch = "nvptx64")]
pub use nvptx::{f16_bits_to_f32, f32_to_f16_bits};

/// `f16` → `f32` (exact).
#[cfg(not(target_arch = "nvptx64"))]
#[inline(always)]
pub fn f16_bits_to_f32(b: u16) -> f32 {
    half::f16::from_bits(b).to_f32()
}

/// `f32` → `f16`, to nearest even.
#[cfg(not(target_arch = "nvptx64"))]
#[inline(always)]
pub fn f32_to_f16_bits(x: f32) -> u16 {
    half::f16::from_f32(x).to_bits()
}
