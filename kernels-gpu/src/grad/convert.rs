//! Element-wise tasks: `f32` to and from half precision, error feedback,
//! and fill.

use super::for_each_index;
use crate::abi::{HalfFormat, Task};
use crate::arch::{f16_bits_to_f32, f32_to_f16_bits};
use crate::device::Lanes;
use crate::element::{bf16_bits_to_f32, f32_to_bf16_bits};

fn format(arg: u64) -> HalfFormat {
    if arg & 0xffff_ffff == HalfFormat::Bf16 as u64 {
        HalfFormat::Bf16
    } else {
        HalfFormat::F16
    }
}

/// `dst[i] = half(src[i] / divisor)`: one division, then one rounding to
/// nearest even (no division when the divisor is 1).
///
/// # Safety
/// As for [`super::run_phase`].
pub unsafe fn to_half<L: Lanes>(g: &L, t: &Task) {
    let (src, dst) = (t.src as *const f32, t.dst as *mut u16);
    let divisor = f32::from_bits((t.arg >> 32) as u32);
    let scale = divisor != 1.0;
    let f = format(t.arg);
    for_each_index(g, t.n, |i| {
        let mut x = src.add(i as usize).read();
        if scale {
            x /= divisor;
        }
        let h = match f {
            HalfFormat::F16 => f32_to_f16_bits(x),
            HalfFormat::Bf16 => f32_to_bf16_bits(x),
        };
        dst.add(i as usize).write(h);
    });
}

/// `dst[i] = f32(src[i])` (exact).
///
/// # Safety
/// As for [`super::run_phase`].
pub unsafe fn from_half<L: Lanes>(g: &L, t: &Task) {
    let (src, dst) = (t.src as *const u16, t.dst as *mut f32);
    let f = format(t.arg);
    for_each_index(g, t.n, |i| {
        let h = src.add(i as usize).read();
        let x = match f {
            HalfFormat::F16 => f16_bits_to_f32(h),
            HalfFormat::Bf16 => bf16_bits_to_f32(h),
        };
        dst.add(i as usize).write(x);
    });
}

/// `dst[i] = src[i] + aux[i]`, or a copy without `aux`.
///
/// # Safety
/// As for [`super::run_phase`]; `dst` may be `src` or `aux`.
pub unsafe fn feedback<L: Lanes>(g: &L, t: &Task) {
    let (src, res, dst) = (t.src as *const f32, t.aux as *const f32, t.dst as *mut f32);
    for_each_index(g, t.n, |i| {
        let mut x = src.add(i as usize).read();
        if !res.is_null() {
            x += res.add(i as usize).read();
        }
        dst.add(i as usize).write(x);
    });
}

/// `n` 32-bit words at `dst` set to `arg`.
///
/// # Safety
/// As for [`super::run_phase`].
pub unsafe fn fill<L: Lanes>(g: &L, t: &Task) {
    let dst = t.dst as *mut u32;
    for_each_index(g, t.n, |i| dst.add(i as usize).write(t.arg as u32));
}
