//! Deterministic test inputs.

use half::{bf16, f16};
use ringreduce::RsElement;

/// SplitMix64: small, fast and good enough to fill buffers.
#[derive(Clone)]
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }
}

/// Element types that can be generated. Floats are finite, of mixed sign
/// and magnitude (so sums round and products stay mostly finite); the
/// reference folds in the ring's order, so results must match to the bit.
pub trait Gen: RsElement {
    fn gen(r: &mut Rng) -> Self;
}

macro_rules! gen_int {
    ($($t:ty),*) => {$(
        impl Gen for $t {
            fn gen(r: &mut Rng) -> Self {
                r.next_u64() as $t
            }
        }
    )*};
}
gen_int!(i8, u8, i32, u32, i64, u64);

fn unit(r: &mut Rng) -> f64 {
    // Mantissa-rich values in roughly [-4, 4], occasionally tiny or large.
    let m = (r.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
    let e = (r.below(9) as i32) - 4;
    let s = if r.next_u64() & 1 == 0 { 1.0 } else { -1.0 };
    s * (0.5 + m) * 2f64.powi(e)
}

impl Gen for f32 {
    fn gen(r: &mut Rng) -> Self {
        unit(r) as f32
    }
}
impl Gen for f64 {
    fn gen(r: &mut Rng) -> Self {
        unit(r)
    }
}
impl Gen for f16 {
    fn gen(r: &mut Rng) -> Self {
        f16::from_f64(unit(r))
    }
}
impl Gen for bf16 {
    fn gen(r: &mut Rng) -> Self {
        bf16::from_f64(unit(r))
    }
}

/// `k` inputs of `len` elements each.
pub fn inputs<T: Gen>(seed: u64, k: usize, len: usize) -> Vec<Vec<T>> {
    let mut r = Rng(seed);
    (0..k)
        .map(|_| (0..len).map(|_| T::gen(&mut r)).collect())
        .collect()
}

pub use ringreduce::with_element_type as with_type;
