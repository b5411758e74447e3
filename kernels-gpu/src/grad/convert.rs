//! Element-wise tasks: `f32` to and from half precision, error feedback,
//! and fill.

use super::lanes::Lanes;
use super::{all_aligned, for_each_quad, map_quads, HalfQuad, Quad};
use crate::arch::{f16_bits_to_f32, f32_to_f16_bits};
use crate::element::{bf16_bits_to_f32, f32_to_bf16_bits};
use crate::grad::abi::{HalfFormat, Task};

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
    // By a power of two, the product with the (exact) reciprocal is the
    // same real number as the quotient, so it rounds the same, and costs
    // one multiply instead of a division.
    let recip = 1.0 / divisor;
    let exact = divisor.is_normal() && recip.is_normal() && divisor.to_bits() & 0x7f_ffff == 0;
    let f = format(t.arg);
    let conv = |mut x: f32| {
        if exact {
            x *= recip;
        } else if scale {
            x /= divisor;
        }
        match f {
            HalfFormat::F16 => f32_to_f16_bits(x),
            HalfFormat::Bf16 => f32_to_bf16_bits(x),
        }
    };
    map_quads(
        g,
        t.n,
        all_aligned(&[(t.src, 16), (t.dst, 8)]),
        // Converted in `store`, so a lane's four loads issue back to back.
        |i| (src.add(i as usize) as *const Quad<f32>).read().0,
        |i, x| {
            let h = HalfQuad([conv(x[0]), conv(x[1]), conv(x[2]), conv(x[3])]);
            (dst.add(i as usize) as *mut HalfQuad).write(h)
        },
        |i| dst.add(i as usize).write(conv(src.add(i as usize).read())),
    );
}

/// `dst[i] = f32(src[i])` (exact).
///
/// # Safety
/// As for [`super::run_phase`].
pub unsafe fn from_half<L: Lanes>(g: &L, t: &Task) {
    let (src, dst) = (t.src as *const u16, t.dst as *mut f32);
    let f = format(t.arg);
    let conv = |h: u16| match f {
        HalfFormat::F16 => f16_bits_to_f32(h),
        HalfFormat::Bf16 => bf16_bits_to_f32(h),
    };
    map_quads(
        g,
        t.n,
        all_aligned(&[(t.src, 8), (t.dst, 16)]),
        |i| (src.add(i as usize) as *const HalfQuad).read().0,
        |i, h| {
            let x = Quad([conv(h[0]), conv(h[1]), conv(h[2]), conv(h[3])]);
            (dst.add(i as usize) as *mut Quad<f32>).write(x)
        },
        |i| dst.add(i as usize).write(conv(src.add(i as usize).read())),
    );
}

/// `dst[i] = src[i] + aux[i]`, or a copy without `aux`.
///
/// # Safety
/// As for [`super::run_phase`]; `dst` may be `src` or `aux`.
pub unsafe fn feedback<L: Lanes>(g: &L, t: &Task) {
    let (src, res, dst) = (t.src as *const f32, t.aux as *const f32, t.dst as *mut f32);
    let one = |i: u64| {
        let mut x = src.add(i as usize).read();
        if !res.is_null() {
            x += res.add(i as usize).read();
        }
        dst.add(i as usize).write(x);
    };
    map_quads(
        g,
        t.n,
        all_aligned(&[(t.src, 16), (t.aux, 16), (t.dst, 16)]),
        |i| {
            let x = (src.add(i as usize) as *const Quad<f32>).read().0;
            if res.is_null() {
                return x;
            }
            let r = (res.add(i as usize) as *const Quad<f32>).read().0;
            [x[0] + r[0], x[1] + r[1], x[2] + r[2], x[3] + r[3]]
        },
        |i, x| (dst.add(i as usize) as *mut Quad<f32>).write(Quad(x)),
        one,
    );
}

/// `n` 32-bit words at `dst` set to `arg`.
///
/// # Safety
/// As for [`super::run_phase`].
pub unsafe fn fill<L: Lanes>(g: &L, t: &Task) {
    let dst = t.dst as *mut u32;
    let v = t.arg as u32;
    for_each_quad(
        g,
        t.n,
        all_aligned(&[(t.dst, 16)]),
        |i| (dst.add(i as usize) as *mut Quad<u32>).write(Quad([v; 4])),
        |i| dst.add(i as usize).write(v),
    );
}
