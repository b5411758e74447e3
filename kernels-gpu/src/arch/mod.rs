//! Target-specific pieces. All inline assembly lives in `nvptx`; the host
//! side needs none.

#[cfg(target_arch = "nvptx64")]
pub mod nvptx;

/// The name of the block's shared `failed` words, one per release slot like
/// the work, through which the control lane tells released producers to
/// skip their slices: one word for every slice would be rewritten for the
/// next slice while a slow producer may still read it. Rust cannot place a
/// static in shared memory, so `host/build.rs` adds
/// [`SHARED_DECLARATIONS`] to the PTX at module scope.
#[macro_export]
macro_rules! block_failed_words {
    () => {
        "ringreduce_block_failed"
    };
}

/// The name of the block's shared count of released slices, which producers
/// poll before each slice in builds for GPUs older than sm_80 (declared like
/// [`block_failed_words`]).
#[macro_export]
macro_rules! block_released_word {
    () => {
        "ringreduce_block_released"
    };
}

/// The name of the block's [`RELEASE_SLOTS`](crate::device::RELEASE_SLOTS)
/// released slices' [`SliceWork`](crate::device::SliceWork), which the
/// control lane writes before each release (declared like
/// [`block_failed_words`]).
#[macro_export]
macro_rules! block_slices_array {
    () => {
        "ringreduce_block_slices"
    };
}

/// The name of the block's [`RELEASE_SLOTS`](crate::device::RELEASE_SLOTS)
/// `mbarrier` objects, one per release slot, through which the control
/// lane opens slices on sm_80 and newer (declared like
/// [`block_failed_words`]; unused before sm_80).
#[macro_export]
macro_rules! block_mbarriers {
    () => {
        "ringreduce_block_mbar"
    };
}

/// The name of the block's private histogram of the gradient layer's
/// radix select: [`SELECT_BINS`](crate::grad::abi::SELECT_BINS) `u32` bins.
#[macro_export]
macro_rules! block_hist_array {
    () => {
        "ringreduce_block_hist"
    };
}

/// The PTX module-scope declarations the kernels' inline assembly names.
pub const SHARED_DECLARATIONS: &str = concat!(
    ".shared .align 4 .u32 ",
    block_failed_words!(),
    "[2];\n.shared .align 4 .u32 ",
    block_released_word!(),
    ";\n.shared .align 16 .b8 ",
    block_slices_array!(),
    "[96];\n.shared .align 8 .b64 ",
    block_mbarriers!(),
    "[2];\n.shared .align 4 .b8 ",
    block_hist_array!(),
    "[1024];"
);
// The `failed` words and `mbarrier` objects declared above: one per
// release slot.
const _: () = assert!(crate::device::RELEASE_SLOTS == 2);
// The released slices' declared bytes above.
const _: () = assert!(crate::device::RELEASE_SLOTS * crate::device::SLICE_WORDS * 8 == 96);
// The histogram's declared bytes above.
const _: () = assert!(crate::grad::abi::SELECT_BINS * 4 == 1024);

#[cfg(target_arch = "nvptx64")]
pub use nvptx::{f16_bits_to_f32, f32_to_f16_bits};

/// `f16` → `f32` (exact).
#[cfg(not(target_arch = "nvptx64"))]
#[cfg_attr(target_arch = "nvptx64", inline(always))]
#[cfg_attr(not(target_arch = "nvptx64"), inline)]
pub fn f16_bits_to_f32(b: u16) -> f32 {
    half::f16::from_bits(b).to_f32()
}

/// `f32` → `f16`, to nearest even.
#[cfg(not(target_arch = "nvptx64"))]
#[cfg_attr(target_arch = "nvptx64", inline(always))]
#[cfg_attr(not(target_arch = "nvptx64"), inline)]
pub fn f32_to_f16_bits(x: f32) -> u16 {
    half::f16::from_f32(x).to_bits()
}
