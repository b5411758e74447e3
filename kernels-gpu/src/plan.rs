//! Sizing, chunking and padding rules, shared by the host planner and the
//! kernel. Everything is integer arithmetic on `u64` that cannot overflow for
//! inputs [`Sizing::new`] accepted.

/// Slices in flight per chunk: while one slice's flag travels to the
/// successor, the producers already move the other.
pub const NUM_SUBCHUNKS: u64 = 2;
/// Packs each producer thread keeps in registers per unrolled iteration.
pub const UNROLL: u64 = 8;
/// Width of the vector accesses of the fast path. 16 bytes is the widest
/// single load or store a thread can issue.
pub const PACK_BYTES: u64 = 16;
/// Slots in each channel's staging ring. A sender may run this many slices
/// ahead of its successor's consumption; it must be at least
/// `2 * NUM_SUBCHUNKS` for the control lane's one-slice lookahead to stay
/// deadlock-free (see `engine`), and 8 keeps the slot of a 2 MiB buffer at
/// the 256 KiB that one block moves best (`bench/NOTES.md`).
pub const STAGING_SLOTS: u64 = 8;
/// Default staging buffer per channel, as in NCCL 1.x.
pub const DEFAULT_BUFFER_BYTES: u64 = 2 << 20;

const _: () = assert!(STAGING_SLOTS >= 2 * NUM_SUBCHUNKS);

/// Why a collective cannot be planned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlanError {
    /// Element sizes must be 1, 2, 4 or 8 bytes.
    BadElementSize(u64),
    /// The staging buffer cannot hold one unrolled tile (plus padding) per
    /// slot.
    BufferTooSmall { need: u64, have: u64 },
    /// A byte count does not fit in 64 bits.
    Overflow,
}

/// Bytes of one unrolled tile: every producer lane moves `UNROLL` packs.
pub const fn tile_bytes(threads: u64) -> u64 {
    UNROLL * threads * PACK_BYTES
}

/// The smallest staging buffer per channel: a tile and a pack per slot.
pub const fn min_buffer_bytes(threads: u64) -> u64 {
    STAGING_SLOTS * (tile_bytes(threads) + PACK_BYTES)
}

/// The staging slots of one call. They depend on the element size, the
/// buffer and the padding, never on the message size, so a buffer that is
/// big enough is big enough for every call.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sizing {
    /// Elements in one unrolled tile (`UNROLL * threads * PACK_BYTES` bytes).
    pub tile_elems: u64,
    /// Elements one slot holds: whole tiles.
    pub slot_elems: u64,
    /// Bytes between slots: the same for every call on one buffer, and at
    /// least `slot_elems` plus one pack of padding when blocks start off a
    /// pack boundary (see [`needs_padding`]).
    pub slot_stride_bytes: u64,
}

impl Sizing {
    /// Slots for `elem_size`-byte elements in `buffer_bytes` of staging per
    /// channel, with `threads` producer lanes. `padded` reserves a pack per
    /// slot for the block residues (see [`needs_padding`]).
    ///
    /// The buffer must hold one tile plus the padding per slot even when
    /// `padded` is false, so that whether a communicator's buffer is big
    /// enough never depends on the message size or the pointers.
    pub fn new(
        elem_size: u64,
        buffer_bytes: u64,
        threads: u64,
        padded: bool,
    ) -> Result<Sizing, PlanError> {
        if !matches!(elem_size, 1 | 2 | 4 | 8) {
            return Err(PlanError::BadElementSize(elem_size));
        }
        let threads = threads.max(1);
        if threads > u32::MAX as u64 {
            return Err(PlanError::Overflow);
        }
        let tile = tile_bytes(threads);
        let per_slot = buffer_bytes / STAGING_SLOTS;
        if per_slot < tile + PACK_BYTES {
            return Err(PlanError::BufferTooSmall {
                need: min_buffer_bytes(threads),
                have: buffer_bytes,
            });
        }
        // The slots sit at the same place in every call, whatever its
        // element size or padding: a sender already in its next call fills
        // slot `j` while the receiver may still read the slots before it,
        // so a stride that changed between calls would overlap them. Slots
        // start on a 128-byte line where the buffer allows (a warp's access
        // then touches 4 lines, not 5). An unpadded 2 MiB buffer holds 8
        // tiles of 32 KiB per slot where a padded one holds 7: the 16 bytes
        // would otherwise cost a whole tile.
        let line = (per_slot / 128) * 128;
        let stride = if line >= tile + PACK_BYTES {
            line
        } else {
            (per_slot / PACK_BYTES) * PACK_BYTES
        };
        let pad = if padded { PACK_BYTES } else { 0 };
        let slot_tiles = (stride - pad) / tile;
        Ok(Sizing {
            tile_elems: tile / elem_size,
            slot_elems: slot_tiles * (tile / elem_size),
            slot_stride_bytes: stride,
        })
    }

    /// Byte offset of the slot that slice number `seq` of a channel uses.
    #[inline]
    pub fn slot_offset(&self, seq: u64) -> u64 {
        (seq % STAGING_SLOTS) * self.slot_stride_bytes
    }

    /// Bytes of staging the slots span.
    pub fn staging_bytes(&self) -> u64 {
        STAGING_SLOTS * self.slot_stride_bytes
    }
}

/// How one channel's share of a block is cut into chunks of
/// `NUM_SUBCHUNKS` slices. Every block of a call uses the chunking of the
/// longest, so every rank runs the same number of slices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Chunking {
    /// Elements per slice of every chunk but the last.
    pub slice_elems: u64,
    /// `NUM_SUBCHUNKS * slice_elems`.
    pub chunk_elems: u64,
    pub num_chunks: u64,
    pub tile_elems: u64,
}

impl Chunking {
    /// Chunks for a share of at most `len` elements per block.
    pub fn new(s: &Sizing, len: u64) -> Chunking {
        let slot_tiles = s.slot_elems / s.tile_elems.max(1);
        let mut slice_elems = s.slot_elems;
        let mut chunk_elems = NUM_SUBCHUNKS * slice_elems;
        let rem = len % chunk_elems;
        let num_chunks = if len > chunk_elems
            && rem > 0
            && len < chunk_elems.saturating_mul(5)
            && 2 * rem < chunk_elems
            && slot_tiles >= 2
        {
            // One larger last chunk instead of a tiny one: halve the slices
            // (in whole tiles) and round the chunk count down. The slot keeps
            // the full size, which the larger last chunk needs.
            slice_elems = (slot_tiles / 2) * s.tile_elems;
            chunk_elems = NUM_SUBCHUNKS * slice_elems;
            len / chunk_elems
        } else {
            len.div_ceil(chunk_elems)
        };
        Chunking {
            slice_elems,
            chunk_elems,
            num_chunks,
            tile_elems: s.tile_elems,
        }
    }

    /// Whole tiles in `x` elements, and the elements left over. The GPU's
    /// tile is a power of two, and shifts spare the control lane a 64-bit
    /// division subroutine on every step of a short chunk.
    #[inline]
    fn tiles_of(&self, x: u64) -> (u64, u64) {
        let t = self.tile_elems;
        if t.is_power_of_two() {
            (x >> t.trailing_zeros(), x & (t - 1))
        } else {
            (x / t, x % t)
        }
    }

    /// Elements of each subchunk's slice in chunk `c` of a share of `len`
    /// elements. A full chunk is two full slices. A short one is cut into
    /// whole tiles shared as evenly as possible between the slices, the
    /// first slice taking the odd tile and the second the sub-tile tail, so
    /// that the second slice starts on a tile boundary and stays alignable.
    #[inline]
    pub fn slices(&self, c: u64, len: u64) -> [u64; NUM_SUBCHUNKS as usize] {
        let left = len.saturating_sub(c * self.chunk_elems);
        if c + 1 < self.num_chunks && left >= self.chunk_elems {
            return [self.slice_elems, self.slice_elems];
        }
        let (tiles, tail) = self.tiles_of(left);
        [
            tiles.div_ceil(2) * self.tile_elems,
            (tiles / 2) * self.tile_elems + tail,
        ]
    }
}

/// Where a call's data lies: the `k` blocks of the ring, and each channel's
/// contiguous share of every block. No element's block depends on the
/// number of channels, so neither does its fold order.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Geometry {
    /// Elements over all blocks.
    pub total: u64,
    /// Elements of every block but the trailing ones (which may be shorter
    /// or empty in an all-reduce).
    pub block_elems: u64,
    /// Elements between blocks in the input (0: only the own block is read).
    pub in_stride: u64,
    /// Elements between blocks in the output (0: only the own block is
    /// written).
    pub out_stride: u64,
    /// Elements of a block each channel moves: whole tiles, so every
    /// channel's data keeps the block's alignment.
    pub share: u64,
}

impl Geometry {
    /// The blocks of `collective` over `k` ranks with `n` elements per rank
    /// (the receive count of a reduce-scatter, the send count of the
    /// others), cut into `channels` shares of whole tiles.
    pub fn new(
        collective: crate::types::Collective,
        k: u64,
        n: u64,
        elem_size: u64,
        tile_elems: u64,
        channels: u64,
    ) -> Geometry {
        use crate::types::Collective::*;
        let (total, block_elems, in_stride, out_stride) = match collective {
            ReduceScatter => (k * n, n, n, 0),
            AllGather => (k * n, n, 0, n),
            AllReduce => {
                // Blocks of whole packs, so every block keeps the buffers'
                // alignment; the last ones take what is left.
                let lanes = PACK_BYTES / elem_size;
                let b = n.div_ceil(k.max(1)).div_ceil(lanes) * lanes;
                (n, b, b, b)
            }
        };
        let share = block_elems
            .div_ceil(channels.max(1))
            .div_ceil(tile_elems.max(1))
            * tile_elems.max(1);
        Geometry {
            total,
            block_elems,
            in_stride,
            out_stride,
            share,
        }
    }

    /// Elements of block `b`.
    #[inline]
    pub fn block_len(&self, b: u64) -> u64 {
        self.block_elems
            .min(self.total.saturating_sub(b * self.block_elems))
    }

    /// Channel `ch`'s share of a block of `len` elements: (offset, length).
    #[inline]
    pub fn channel_part(&self, ch: u64, len: u64) -> (u64, u64) {
        let off = ch * self.share;
        (off, self.share.min(len.saturating_sub(off)))
    }

    /// The longest share channel `ch` has of any block (block 0's).
    #[inline]
    pub fn channel_len(&self, ch: u64) -> u64 {
        self.channel_part(ch, self.block_len(0)).1
    }
}

/// Whether staging slots need a pack of padding: only on the wide-pack path
/// (`residue` is `Some`, see [`common_residue`]) and only when some block's
/// data starts off a pack boundary, since a slot's data starts at its
/// block's residue. With `k >= 2` that is when the buffers are misaligned or
/// a block is not a whole number of packs. The scalar path starts every
/// slot's data at its beginning.
#[inline]
pub fn needs_padding(residue: Option<u64>, block_elems: u64, elem_size: u64) -> bool {
    match residue {
        Some(r) => {
            !r.is_multiple_of(PACK_BYTES)
                || !block_elems
                    .wrapping_mul(elem_size)
                    .is_multiple_of(PACK_BYTES)
        }
        None => false,
    }
}

/// Alignment residue of block `block`: the byte offset modulo
/// [`PACK_BYTES`] at which that block's data starts in every rank's
/// buffers, and so in the staging slots. Only meaningful when the call is
/// aligned (see [`common_residue`]); wrapping arithmetic is exact modulo
/// 2^64, and 2^64 is a multiple of the pack size.
#[inline]
pub fn block_residue(residue: u64, block: u64, block_elems: u64, elem_size: u64) -> u64 {
    residue.wrapping_add(block.wrapping_mul(block_elems).wrapping_mul(elem_size)) % PACK_BYTES
}

/// Decides whether the wide-pack path can run, and returns the common
/// residue of block 0 when it can (`None`: the scalar path must run).
///
/// Each rank has a *strided* buffer, which holds every block (the input of
/// a reduce-scatter, the output of an all-gather, both buffers of an
/// all-reduce), and an *own* buffer, which holds only its own block.
/// Block `b` sits at the same residue on every rank when all strided
/// buffers share their address modulo [`PACK_BYTES`], and each user rank's
/// own buffer must start at its own block's residue. Then every transfer's
/// pointers agree modulo the pack size, and so do the staging slots.
///
/// `ranks` yields `(user_rank, strided_addr, own_addr)`.
pub fn common_residue<I>(ranks: I, block_elems: u64, elem_size: u64) -> Option<u64>
where
    I: IntoIterator<Item = (u64, u64, u64)>,
{
    let mut common = None;
    for (user, strided, own) in ranks {
        let s = strided % PACK_BYTES;
        match common {
            None => common = Some(s),
            Some(c) if c != s => return None,
            _ => {}
        }
        if own % PACK_BYTES != block_residue(s, user, block_elems, elem_size) {
            return None;
        }
    }
    common
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::{CPU_THREADS, GPU_THREADS};
    use crate::types::Collective;

    #[test]
    fn tiles_of_divides_by_any_tile() {
        for t in [1u64, 3, 512, 768, 4096, 8192, 1 << 20] {
            let c = Chunking {
                tile_elems: t,
                ..Chunking::default()
            };
            for x in [0u64, 1, t - 1, t, t + 1, 7 * t + 5, u64::MAX] {
                assert_eq!(c.tiles_of(x), (x / t, x % t), "tile {t} x {x}");
            }
        }
    }

    #[test]
    fn default_buffer_f32() {
        let s = Sizing::new(4, DEFAULT_BUFFER_BYTES, GPU_THREADS, true).unwrap();
        // 2 MiB / 8 slots = 256 KiB per slot; minus a pack, rounded down to
        // 32 KiB tiles: 7 tiles.
        assert_eq!(s.tile_elems, 8192);
        assert_eq!(s.slot_elems, 7 * 8192);
        assert_eq!(s.slot_stride_bytes, 8 * 32768);
        assert!(s.staging_bytes() <= DEFAULT_BUFFER_BYTES);
        let c = Chunking::new(&s, 1 << 26);
        assert_eq!(c.num_chunks, (1u64 << 26).div_ceil(2 * 7 * 8192));
        // Aligned blocks need no padding: the whole 8 tiles fit.
        let s = Sizing::new(4, DEFAULT_BUFFER_BYTES, GPU_THREADS, false).unwrap();
        assert_eq!(s.slot_elems, 8 * 8192);
        assert_eq!(s.staging_bytes(), DEFAULT_BUFFER_BYTES);
        assert_eq!(s.slot_offset(9), s.slot_stride_bytes);
    }

    /// Every call on one buffer lays the slots out alike, so a sender in
    /// its next call never writes into a slot the receiver still reads
    /// (the H200 soak found that when padded and unpadded calls alternated).
    #[test]
    fn slots_lie_alike_in_every_call() {
        for threads in [CPU_THREADS, GPU_THREADS] {
            let min = min_buffer_bytes(threads);
            for buffer in [
                min,
                min + 1,
                min + 129,
                3 * min + 17,
                1 << 20,
                699_050,
                2 << 20,
            ] {
                let mut strides = [0u64; 8];
                let mut i = 0;
                for elem in [1u64, 2, 4, 8] {
                    for padded in [false, true] {
                        let Ok(s) = Sizing::new(elem, buffer, threads, padded) else {
                            continue;
                        };
                        let pad = if padded { PACK_BYTES } else { 0 };
                        assert!(s.slot_elems * elem + pad <= s.slot_stride_bytes);
                        assert_eq!(s.slot_stride_bytes % PACK_BYTES, 0);
                        strides[i] = s.slot_stride_bytes;
                        i += 1;
                    }
                }
                assert!(
                    strides[..i].iter().all(|&x| x == strides[0]),
                    "{buffer} B, {threads} threads: strides {strides:?}"
                );
            }
        }
    }

    #[test]
    fn padding_only_for_residues() {
        assert!(!needs_padding(None, 3, 4));
        assert!(!needs_padding(Some(0), 1 << 26, 4));
        assert!(needs_padding(Some(4), 1 << 26, 4));
        assert!(needs_padding(Some(0), 3, 4));
        assert!(!needs_padding(Some(0), 2, 8));
    }

    #[test]
    fn remainder_rule_halves_and_rounds_down() {
        // chunk = 2 slices of 7 tiles; n = 2 chunks + a quarter chunk.
        let t = 8192u64;
        let chunk = 14 * t;
        let n = 2 * chunk + chunk / 4;
        let s = Sizing::new(4, DEFAULT_BUFFER_BYTES, GPU_THREADS, true).unwrap();
        let c = Chunking::new(&s, n);
        assert_eq!(c.slice_elems, 3 * t);
        assert_eq!(c.chunk_elems, 6 * t);
        assert_eq!(c.num_chunks, n / (6 * t));
        let last = c.slices(c.num_chunks - 1, n);
        assert_eq!(
            last.iter().sum::<u64>(),
            n - (c.num_chunks - 1) * c.chunk_elems
        );
        assert!(last[0] * 4 + PACK_BYTES <= s.slot_stride_bytes);
    }

    #[test]
    fn last_chunk_split_evenly_in_tiles() {
        let s = Sizing::new(1, 1 << 20, CPU_THREADS, true).unwrap();
        assert_eq!(s.tile_elems, 512);
        let c = Chunking::new(&s, 5 * 512 + 3);
        assert_eq!(c.num_chunks, 1);
        assert_eq!(c.slices(0, 5 * 512 + 3), [3 * 512, 2 * 512 + 3]);
        assert_eq!(Chunking::new(&s, 100).slices(0, 100), [0, 100]);
        // A shorter block in the same chunking: what it has, in tiles.
        assert_eq!(c.slices(0, 700), [512, 188]);
        assert_eq!(c.slices(1, 700), [0, 0]);
    }

    #[test]
    fn errors() {
        assert_eq!(
            Sizing::new(3, 1 << 21, 256, true),
            Err(PlanError::BadElementSize(3))
        );
        assert_eq!(
            Sizing::new(4, 1 << 17, 256, false),
            Err(PlanError::BufferTooSmall {
                need: 8 * (32768 + 16),
                have: 1 << 17
            })
        );
        assert_eq!(min_buffer_bytes(256), 8 * (32768 + 16));
    }

    #[test]
    fn geometry_of_each_collective() {
        let g = Geometry::new(Collective::ReduceScatter, 4, 10, 4, 512, 1);
        assert_eq!(
            (g.total, g.block_elems, g.in_stride, g.out_stride),
            (40, 10, 10, 0)
        );
        let g = Geometry::new(Collective::AllGather, 4, 10, 4, 512, 1);
        assert_eq!(
            (g.total, g.block_elems, g.in_stride, g.out_stride),
            (40, 10, 0, 10)
        );
        // 1000 f32 over 8 ranks: blocks of 128 (whole packs), the last 104.
        let g = Geometry::new(Collective::AllReduce, 8, 1000, 4, 512, 1);
        assert_eq!(g.block_elems, 128);
        assert_eq!(g.block_len(6), 128);
        assert_eq!(g.block_len(7), 104);
        // Fewer elements than ranks: block 0 has them all.
        let g = Geometry::new(Collective::AllReduce, 8, 3, 4, 512, 1);
        assert_eq!((g.block_len(0), g.block_len(1), g.block_len(7)), (3, 0, 0));
    }

    #[test]
    fn channels_cover_every_block_once_in_whole_tiles() {
        for ch in 1..=5u64 {
            for n in [0u64, 1, 511, 512, 513, 5000, 40_000] {
                for coll in Collective::ALL {
                    let g = Geometry::new(coll, 3, n, 4, 512, ch);
                    assert_eq!(g.share % 512, 0);
                    for b in 0..3 {
                        let len = g.block_len(b);
                        let mut next = 0;
                        for c in 0..ch {
                            let (off, l) = g.channel_part(c, len);
                            if l > 0 {
                                assert_eq!(off, next);
                                next += l;
                            }
                            assert!(l <= g.channel_len(c));
                        }
                        assert_eq!(next, len, "{coll:?} n={n} C={ch} block {b}");
                    }
                }
            }
        }
    }

    #[test]
    fn residues() {
        // Aligned buffers: common residue 0.
        assert_eq!(common_residue([(0, 0, 0), (1, 256, 512)], 4, 4), Some(0));
        // Strided buffers disagree: scalar.
        assert_eq!(common_residue([(0, 0, 0), (1, 4, 16)], 4, 4), None);
        // own of user 1 must sit at residue 4*4 % 16 = 0 for n = 4 f32; n=1 → 4.
        assert_eq!(common_residue([(0, 0, 0), (1, 64, 4)], 1, 4), Some(0));
        assert_eq!(common_residue([(0, 0, 0), (1, 64, 8)], 1, 4), None);
    }
}
