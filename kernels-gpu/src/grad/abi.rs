//! The gradient layer's kernel arguments: one [`Task`] by value per launch
//! of the `ringreduce_task` entry, the copy descriptors it reads, and the
//! selection state the sparse tasks share through device memory.

/// What a [`Task`] does. Every task reads and writes `f32` gradients,
/// except the copy (bytes) and the half conversions.
#[repr(u64)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskKind {
    /// `n` [`CopyDesc`]s at `src`: one batched copy for a bucket's packing
    /// or unpacking.
    Copy = 0,
    /// `dst[i] = to_half(src[i] / divisor)`, `arg` = [`half_arg`].
    ToHalf = 1,
    /// `dst[i] = to_f32(src[i])`, `arg` = the [`HalfFormat`].
    FromHalf = 2,
    /// Error feedback: `dst[i] = src[i] + aux[i]` (`aux` may be 0: a copy).
    /// With `state` not 0, also the radix select's pass 0 over the sums, of
    /// a top-K selection just started there.
    Feedback = 3,
    /// Starts a top-`arg` selection in the [`SelectState`] at `state`.
    SelectTopK = 4,
    /// Starts a threshold selection: every magnitude with bits `>= arg`.
    SelectThreshold = 5,
    /// Radix-select pass `arg`: histogram of the next digit of the
    /// magnitudes of `src` that match the state's prefix. With `aux2` not
    /// 0, a candidate list of [`candidates_for`]`(n)` words: pass
    /// [`NARROW_PASS`] also appends the matching magnitudes to it, and the
    /// later passes read it instead of `src` where it held them all.
    Histogram = 6,
    /// Radix-select pass `arg`, one lane: picks the digit whose bin holds
    /// the K-th largest magnitude.
    PickDigit = 7,
    /// Per tile of `src`: magnitudes above the threshold and equal to it,
    /// into the tile counts at `aux`.
    CountTiles = 8,
    /// One block: the tile counts at `aux` to exclusive offsets, and the
    /// selected count into the state.
    ScanTiles = 9,
    /// The selected `(index, value)` pairs of `src`, in index order, to
    /// `dst` (padded to `arg` pairs), and the residual `aux2` (if not 0)
    /// of the elements tied with the threshold; or with `arg == u64::MAX`
    /// the selection as a dense array to `dst` and every element's
    /// residual.
    WriteSelected = 10,
    /// `n` words at `dst` set to `arg`.
    Fill = 11,
    /// `dst[index - aux] += value` for the `n` pairs at `src` whose index
    /// is in `aux..arg` (a padding pair's index is [`PAD_INDEX`]): `dst`
    /// holds that range of the elements the pairs index.
    ScatterAdd = 12,
    /// `n` bytes from `src` to `dst` by every lane: one tensor's packing,
    /// with nothing to upload first.
    CopyRange = 13,
    /// The residual `aux2` of the elements of `src` not tied with the
    /// threshold (0 above it, the value below), element-wise and coalesced;
    /// [`TaskKind::WriteSelected`] writes the tied ones, which need their
    /// rank among the ties.
    ResidualUntied = 14,
    /// Top-K's pairs in one coalesced pass, where the selection takes every
    /// element tied with the threshold (as nearly always): the pairs of
    /// `src` to `dst` in any order (at most `arg`), the count, and the
    /// residual `aux2` (if not 0) of every element; it marks the state so
    /// that [`CountTiles`](Self::CountTiles), [`ScanTiles`](Self::ScanTiles)
    /// and [`ResidualUntied`](Self::ResidualUntied) after it do nothing and
    /// [`WriteSelected`](Self::WriteSelected) only pads. Where only some
    /// ties are taken it does nothing, and those tasks do the work.
    WriteAnyOrder = 15,
}

crate::types::all_in_value_order!(TaskKind);

impl TaskKind {
    pub const ALL: [TaskKind; 16] = [
        TaskKind::Copy,
        TaskKind::ToHalf,
        TaskKind::FromHalf,
        TaskKind::Feedback,
        TaskKind::SelectTopK,
        TaskKind::SelectThreshold,
        TaskKind::Histogram,
        TaskKind::PickDigit,
        TaskKind::CountTiles,
        TaskKind::ScanTiles,
        TaskKind::WriteSelected,
        TaskKind::Fill,
        TaskKind::ScatterAdd,
        TaskKind::CopyRange,
        TaskKind::ResidualUntied,
        TaskKind::WriteAnyOrder,
    ];

    pub fn from_u64(v: u64) -> Option<Self> {
        Self::ALL.get(v as usize).copied()
    }

    /// Whether the task must run as one block: it has phases separated by
    /// block barriers, or one lane does all of it.
    pub const fn one_block(self) -> bool {
        matches!(
            self,
            TaskKind::SelectTopK
                | TaskKind::SelectThreshold
                | TaskKind::PickDigit
                | TaskKind::ScanTiles
        )
    }

    /// Phases, each after a barrier of the whole (single) block.
    pub const fn phases(self) -> u32 {
        match self {
            TaskKind::ScanTiles => 3,
            _ => 1,
        }
    }
}

/// The two half-precision formats of the gradient layer.
#[repr(u64)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HalfFormat {
    F16 = 0,
    Bf16 = 1,
}

/// The `arg` of [`TaskKind::ToHalf`]: the format, and the divisor's bits
/// (`1.0` for none) in the high word.
pub const fn half_arg(format: HalfFormat, divisor: f32) -> u64 {
    (format as u64) | ((divisor.to_bits() as u64) << 32)
}

/// One gradient-layer launch, passed by value. Unused fields are 0.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Task {
    /// A [`TaskKind`].
    pub kind: u64,
    pub src: u64,
    pub dst: u64,
    pub aux: u64,
    pub aux2: u64,
    /// Address of the [`SelectState`] of a sparse task.
    pub state: u64,
    /// Elements (or descriptors, or pairs).
    pub n: u64,
    pub arg: u64,
    /// Tiles of a compaction (see [`tiles_for`]).
    pub tiles: u64,
}

/// One contiguous copy of a batched [`TaskKind::Copy`]. The host cuts
/// copies into pieces of at most [`COPY_PIECE_BYTES`], so that blocks get
/// even shares of a list of very unequal tensors.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CopyDesc {
    pub src: u64,
    pub dst: u64,
    pub bytes: u64,
}

/// The largest piece one block copies.
pub const COPY_PIECE_BYTES: u64 = 64 * 1024;

/// The pair index of padding, which the scatter-add skips; so a tensor of
/// the sparse path holds fewer elements.
pub const PAD_INDEX: u32 = u32::MAX;

/// Lanes of the one-block scan (the GPU's block size for tasks; the CPU
/// runs fewer).
pub const SCAN_LANES: usize = 256;

/// Threads per block of a task launch.
pub const TASK_THREADS: u32 = 256;

/// Blocks of a task launch that must fit on one SM at once: its launch
/// bounds, so ptxas keeps it within 128 registers. At 134 (one block per
/// SM) the histogram, compaction and residual passes ran 1.3-1.8x slower
/// (`bench/NOTES.md`, 2026-12-04: gradients in their buckets); at 3 or more it spills.
pub const TASK_MIN_BLOCKS_PER_SM: u32 = 2;

/// A radix select's digits: 8 bits each over the 31 magnitude bits.
pub const SELECT_PASSES: u64 = 4;
pub const SELECT_BINS: usize = 256;

/// The pass that lists the magnitudes it counts, once the first digit has
/// narrowed them to one exponent's octave, so that the later passes read
/// that list rather than every element again.
pub const NARROW_PASS: u64 = 1;

/// Words of a selection's candidate list over `n` elements: a quarter,
/// which holds the octave of the K-th largest magnitude of normally
/// distributed values at densities up to 2% (at most 22% of them fall in
/// that octave); where it holds more, the later passes read every element.
pub const fn candidates_for(n: u64) -> u64 {
    n / 4 + 4
}

/// The selection a sparse call builds up on the device, so that no step
/// waits for the host: the radix select narrows `prefix`, then the
/// compaction counts.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SelectState {
    /// Magnitude bits (`|x|` as `u32`) of the threshold: magnitudes above
    /// it are selected, and the first `take_equal` equal to it, by index.
    pub threshold: u64,
    pub take_equal: u64,
    /// Radix select: elements still to pick among those matching `prefix`.
    pub remaining: u64,
    /// Selected elements (after the scan).
    pub count: u64,
    /// Magnitudes the narrowing pass listed (more than the list holds
    /// when it overflowed).
    pub candidates: u64,
    /// Magnitudes equal to the threshold, as the radix select's last pass
    /// counted them: where `take_equal` reaches it, every tie is taken.
    pub ties: u64,
    /// Not 0 once [`TaskKind::WriteAnyOrder`] has written the selection.
    pub unordered: u64,
    pub hist: [u32; SELECT_BINS],
    /// The scan's per-lane totals: above, equal.
    pub lane_totals: [[u64; 2]; SCAN_LANES],
}

impl SelectState {
    pub const BYTES: usize = core::mem::size_of::<SelectState>();
    /// The 8-byte word that holds [`count`](Self::count), which the host
    /// all-gathers to size a threshold exchange.
    pub const COUNT_WORD: usize = core::mem::offset_of!(SelectState, count) / 8;
}

/// Tiles of a compaction of `n` elements: enough that every lane of a
/// full GPU has some, each long enough to walk alone. Count and write use
/// the same tiles, so the lanes a launch has do not change the result.
pub const fn tiles_for(n: u64) -> u64 {
    let t = n / 512;
    if t == 0 {
        1
    } else if t > 65536 {
        65536
    } else {
        t
    }
}

/// The element range of tile `t` of `tiles` over `n`.
pub const fn tile_range(t: u64, tiles: u64, n: u64) -> (u64, u64) {
    (t * n / tiles, (t + 1) * n / tiles)
}

/// The magnitude bits of an `f32`: order-preserving for `|x|`, with NaNs
/// above infinity.
pub const fn magnitude(bits: u32) -> u32 {
    bits & 0x7fff_ffff
}
