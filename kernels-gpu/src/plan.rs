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
/// Producer threads per rank on the GPU (the block has one more: the
/// control lane).
pub const GPU_THREADS: u64 = 256;
/// Threads per block of every kernel: the producers and the control lane.
/// The launches, the launch bounds `build.rs` writes and the bench's
/// ceilings all use this one figure.
pub const BLOCK_THREADS: u32 = GPU_THREADS as u32 + 1;
/// Producer threads per rank in the CPU execution: small, so that each lane
/// can be an OS thread, but more than one so that the striding and the
/// barriers are exercised.
pub const CPU_THREADS: u64 = 4;
/// Default staging buffer per rank, as in NCCL 1.x.
pub const DEFAULT_BUFFER_BYTES: u64 = 2 << 20;

/// Why a collective cannot be planned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlanError {
    /// No ranks.
    ZeroRanks,
    /// Element sizes must be 1, 2, 4 or 8 bytes.
    BadElementSize(u64),
    /// The staging buffer cannot hold one unrolled slice (plus padding) per
    /// block and subchunk.
    BufferTooSmall { need: u64, have: u64 },
    /// A byte count does not fit in 64 bits.
    Overflow,
}

/// The sizing of one collective: what the kernel needs besides pointers.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sizing {
    /// Elements per block (`recvcount`).
    pub n: u64,
    /// Elements per slice of every chunk but the last.
    pub slice_elems: u64,
    /// `NUM_SUBCHUNKS * slice_elems`.
    pub chunk_elems: u64,
    pub num_chunks: u64,
    /// Elements in one unrolled tile (`UNROLL * threads * PACK_BYTES` bytes).
    pub tile_elems: u64,
    /// Bytes between staging slots. It is the slice size before any halving
    /// (so the larger last chunk still fits), plus one pack of padding when
    /// the blocks' data starts off a pack boundary (see [`needs_padding`]).
    pub slot_stride_bytes: u64,
}

impl Sizing {
    /// Plans a collective over `k` ranks of `n` elements of `elem_size` bytes
    /// per block, with `buffer_bytes` of staging per rank and `threads`
    /// producer threads. `padded` reserves a pack per slot for the block
    /// residues (see [`needs_padding`]).
    ///
    /// The buffer must hold one tile plus the padding per slot even when
    /// `padded` is false, so that whether a communicator's buffer is big
    /// enough never depends on the message size or the pointers.
    pub fn new(
        k: u64,
        n: u64,
        elem_size: u64,
        buffer_bytes: u64,
        threads: u64,
        padded: bool,
    ) -> Result<Sizing, PlanError> {
        if k == 0 {
            return Err(PlanError::ZeroRanks);
        }
        if !matches!(elem_size, 1 | 2 | 4 | 8) {
            return Err(PlanError::BadElementSize(elem_size));
        }
        let threads = threads.max(1);
        let tile_bytes = UNROLL
            .checked_mul(threads)
            .and_then(|x| x.checked_mul(PACK_BYTES))
            .ok_or(PlanError::Overflow)?;
        let tile_elems = tile_bytes / elem_size;
        // Bytes of payload in a block must be addressable, and so must the
        // whole send buffer of k blocks.
        n.checked_mul(elem_size)
            .and_then(|b| b.checked_mul(k))
            .ok_or(PlanError::Overflow)?;
        let slots = k.checked_mul(NUM_SUBCHUNKS).ok_or(PlanError::Overflow)?;
        let need = (tile_bytes + PACK_BYTES)
            .checked_mul(slots)
            .ok_or(PlanError::Overflow)?;
        let per_slot = buffer_bytes / slots;
        if per_slot < tile_bytes + PACK_BYTES {
            return Err(PlanError::BufferTooSmall {
                need,
                have: buffer_bytes,
            });
        }
        // An unpadded 2 MiB buffer over 8 slots holds 8 tiles of 32 KiB per
        // slice where a padded one holds 7: the 16 bytes would otherwise cost
        // a whole tile, and an eighth more slices (each with its own flags).
        let pad = if padded { PACK_BYTES } else { 0 };
        let slice_tiles = (per_slot - pad) / tile_bytes;
        let slot_stride_bytes = slice_tiles * tile_bytes + pad;
        let mut slice_elems = slice_tiles * tile_elems;
        let mut chunk_elems = NUM_SUBCHUNKS * slice_elems;
        let rem = n % chunk_elems;
        let num_chunks = if n > chunk_elems
            && rem > 0
            && n < chunk_elems.saturating_mul(5)
            && 2 * rem < chunk_elems
            && slice_tiles >= 2
        {
            // One larger last chunk instead of a tiny one: halve the slices
            // (in whole tiles) and round the chunk count down. The stride keeps
            // the full slice size, which the larger last chunk needs.
            slice_elems = (slice_tiles / 2) * tile_elems;
            chunk_elems = NUM_SUBCHUNKS * slice_elems;
            n / chunk_elems
        } else {
            n.div_ceil(chunk_elems)
        };
        Ok(Sizing {
            n,
            slice_elems,
            chunk_elems,
            num_chunks,
            tile_elems,
            slot_stride_bytes,
        })
    }

    /// Elements of each subchunk's slice in chunk `c`. Every chunk but the
    /// last is two full slices. The last one is cut into whole tiles shared as
    /// evenly as possible between the slices, the first slice taking the odd
    /// tile and the second the sub-tile tail, so that the second slice starts
    /// on a tile boundary and stays alignable.
    #[inline]
    pub fn slices(&self, c: u64) -> [u64; NUM_SUBCHUNKS as usize] {
        if c + 1 < self.num_chunks {
            return [self.slice_elems, self.slice_elems];
        }
        let left = self.n - c * self.chunk_elems;
        let tiles = left / self.tile_elems;
        let tail = left % self.tile_elems;
        [
            tiles.div_ceil(2) * self.tile_elems,
            (tiles / 2) * self.tile_elems + tail,
        ]
    }

    /// Byte offset of the staging slot for `block`, subchunk `sub`, before the
    /// block's alignment residue is added.
    #[inline]
    pub fn slot_offset(&self, block: u64, sub: u64) -> u64 {
        (block * NUM_SUBCHUNKS + sub) * self.slot_stride_bytes
    }

    /// Bytes of staging the plan touches at most: `2k` slots.
    pub fn staging_bytes(&self, k: u64) -> u64 {
        k * NUM_SUBCHUNKS * self.slot_stride_bytes
    }

    /// The "new data" flag value after (chunk, step, sub) was pushed.
    #[inline]
    pub fn new_data_value(k: u64, chunk: u64, step: u64, sub: u64) -> u64 {
        NUM_SUBCHUNKS * (chunk * k + step) + sub + 1
    }

    /// The "chunk done" flag value after the successor finished (chunk, sub).
    #[inline]
    pub fn chunk_done_value(chunk: u64, sub: u64) -> u64 {
        NUM_SUBCHUNKS * chunk + sub + 1
    }

    /// The last "new data" value the predecessor writes in a collective.
    #[inline]
    pub fn final_new_data_value(&self, k: u64) -> u64 {
        NUM_SUBCHUNKS * self.num_chunks * k
    }
}

/// Whether staging slots need a pack of padding: only on the wide-pack path
/// (`send_residue` is `Some`, see [`common_residue`]) and only when some
/// block's data starts off a pack boundary, since a slot's data starts at its
/// block's residue. With `k >= 2` that is when the sends are misaligned or a
/// block is not a whole number of packs. The scalar path starts every slot's
/// data at its beginning.
#[inline]
pub fn needs_padding(send_residue: Option<u64>, n: u64, elem_size: u64) -> bool {
    match send_residue {
        Some(r) => {
            !r.is_multiple_of(PACK_BYTES) || !n.wrapping_mul(elem_size).is_multiple_of(PACK_BYTES)
        }
        None => false,
    }
}

/// Alignment residue of block `block` in the staging buffer: the byte offset
/// modulo [`PACK_BYTES`] at which that block's data starts in every rank's
/// input. Only meaningful when the collective is aligned (see
/// [`common_residue`]); wrapping arithmetic is exact modulo 2^64, and 2^64 is
/// a multiple of the pack size.
#[inline]
pub fn block_residue(send_residue: u64, block: u64, n: u64, elem_size: u64) -> u64 {
    send_residue.wrapping_add(block.wrapping_mul(n).wrapping_mul(elem_size)) % PACK_BYTES
}

/// Decides whether the wide-pack path can run. It can when every rank's
/// `send` has the same address modulo [`PACK_BYTES`] (so block `b` starts at
/// the same residue on every rank, and its staging slot can share it), and
/// each user rank's `recv` has the residue of its own block. Returns that
/// common send residue, or `None` when the pointers can never be brought into
/// alignment and the scalar path must run.
///
/// `ranks` yields `(user_rank, send_addr, recv_addr)`.
pub fn common_residue<I>(ranks: I, n: u64, elem_size: u64) -> Option<u64>
where
    I: IntoIterator<Item = (u64, u64, u64)>,
{
    let mut common = None;
    for (user, send, recv) in ranks {
        let s = send % PACK_BYTES;
        match common {
            None => common = Some(s),
            Some(c) if c != s => return None,
            _ => {}
        }
        if recv % PACK_BYTES != block_residue(s, user, n, elem_size) {
            return None;
        }
    }
    common
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_buffer_four_ranks_f32() {
        let s = Sizing::new(4, 1 << 26, 4, DEFAULT_BUFFER_BYTES, GPU_THREADS, true).unwrap();
        // 2 MiB / 8 slots = 256 KiB per slot; minus a pack, rounded down to
        // 32 KiB tiles: 7 tiles.
        assert_eq!(s.tile_elems, 8192);
        assert_eq!(s.slice_elems, 7 * 8192);
        assert_eq!(s.slot_stride_bytes, 7 * 32768 + 16);
        assert!(s.staging_bytes(4) <= DEFAULT_BUFFER_BYTES);
        assert_eq!(s.num_chunks, (1u64 << 26).div_ceil(2 * 7 * 8192));
        // Aligned blocks need no padding: the whole 8 tiles fit.
        let s = Sizing::new(4, 1 << 26, 4, DEFAULT_BUFFER_BYTES, GPU_THREADS, false).unwrap();
        assert_eq!(s.slice_elems, 8 * 8192);
        assert_eq!(s.slot_stride_bytes, 8 * 32768);
        assert_eq!(s.staging_bytes(4), DEFAULT_BUFFER_BYTES);
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
        let s = Sizing::new(4, n, 4, DEFAULT_BUFFER_BYTES, GPU_THREADS, true).unwrap();
        assert_eq!(s.slice_elems, 3 * t);
        assert_eq!(s.chunk_elems, 6 * t);
        assert_eq!(s.num_chunks, n / (6 * t));
        let last = s.slices(s.num_chunks - 1);
        assert_eq!(
            last.iter().sum::<u64>(),
            n - (s.num_chunks - 1) * s.chunk_elems
        );
        assert!(last[0] * 4 + PACK_BYTES <= s.slot_stride_bytes);
    }

    #[test]
    fn last_chunk_split_evenly_in_tiles() {
        let s = Sizing::new(2, 5 * 512 + 3, 1, 1 << 20, CPU_THREADS, true).unwrap();
        assert_eq!(s.tile_elems, 512);
        assert_eq!(s.num_chunks, 1);
        assert_eq!(s.slices(0), [3 * 512, 2 * 512 + 3]);
        let s = Sizing::new(2, 100, 1, 1 << 20, CPU_THREADS, true).unwrap();
        assert_eq!(s.slices(0), [0, 100]);
    }

    #[test]
    fn errors() {
        assert_eq!(
            Sizing::new(0, 1, 4, 1 << 21, 256, true),
            Err(PlanError::ZeroRanks)
        );
        assert_eq!(
            Sizing::new(2, 1, 3, 1 << 21, 256, true),
            Err(PlanError::BadElementSize(3))
        );
        assert_eq!(
            Sizing::new(64, 1, 4, 1 << 21, 256, false),
            Err(PlanError::BufferTooSmall {
                need: 128 * (32768 + 16),
                have: 1 << 21
            })
        );
        assert_eq!(
            Sizing::new(4, u64::MAX / 8, 8, 1 << 21, 256, true),
            Err(PlanError::Overflow)
        );
    }

    #[test]
    fn residues() {
        // Aligned buffers: common residue 0.
        assert_eq!(common_residue([(0, 0, 0), (1, 256, 512)], 4, 4), Some(0));
        // Sends disagree: scalar.
        assert_eq!(common_residue([(0, 0, 0), (1, 4, 16)], 4, 4), None);
        // recv of user 1 must sit at residue 4*4 % 16 = 0 for n = 4 f32; n=1 → 4.
        assert_eq!(common_residue([(0, 0, 0), (1, 64, 4)], 1, 4), Some(0));
        assert_eq!(common_residue([(0, 0, 0), (1, 64, 8)], 1, 4), None);
    }
}
