//! The kernel ABI, shared by host and kernel: the block size, the
//! connection structs written once per communicator, the per-call work
//! passed by value, the flag layout and the status record (the entries
//! themselves are in [`crate::catalogue`]).
//! Pointers are plain `u64` addresses so every struct has one layout on
//! every target.

use crate::plan::{Geometry, Sizing};
use crate::types::{Collective, Scope};

mod local;
pub use local::*;

/// Producer threads per block on the GPU (the block has one more: the
/// control lane).
pub const GPU_THREADS: u64 = 256;
/// Threads per block of every kernel: the producers and the control lane.
/// The launches, the launch bounds `build.rs` writes and the bench's
/// ceilings all use this one figure.
pub const BLOCK_THREADS: u32 = GPU_THREADS as u32 + 1;
/// Producer threads per block in the CPU execution: small, so that each
/// lane can be an OS thread, but more than one so that the striding and the
/// barriers are exercised.
pub const CPU_THREADS: u64 = 4;
/// Most channels (blocks) one rank may run. A rank's [`RankConn`] holds
/// this many [`ChannelConn`]s.
pub const MAX_CHANNELS: usize = 32;

/// Bytes between one rank's channels' ready words in its direct flags: a
/// line each, so that peers polling different channels do not share one.
pub const DIRECT_FLAG_STRIDE: u64 = 128;

/// Where a peer's direct staging and ready words are, as every rank's
/// kernel reads them: `k` of these, in user-rank order, at
/// [`RankInfo::direct_peers`].
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DirectPeer {
    /// The peer's direct staging: two halves of
    /// [`RankInfo::direct_half_bytes`], used by alternate calls.
    pub area: u64,
    /// The peer's channel 0 ready word; channel `c`'s is
    /// [`DIRECT_FLAG_STRIDE`]` * c` bytes further. It counts the peer's
    /// direct phases (two per call), so it only grows.
    pub ready: u64,
}

/// One channel of one rank, as its peers are wired to it. Written to
/// device memory once, when the communicator is created; only `seq` changes
/// afterwards, and only the channel's own control lane writes it.
///
/// The flags are NCCL 2's head and tail: `tail` counts the slices the
/// predecessor has put into our staging, `head` counts the slices the
/// successor has taken out of its staging (which we fill). Both only grow,
/// across collectives, so nothing is ever reset and no call has to wait for
/// the previous one to be tidied up.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChannelConn {
    /// Our staging ring of [`crate::plan::STAGING_SLOTS`] slots, written by
    /// the predecessor.
    pub this_staging: u64,
    /// The successor's staging ring, which we write.
    pub next_staging: u64,
    /// Our tail: slices the predecessor has delivered to us.
    pub this_tail: u64,
    /// The successor's tail, which we raise.
    pub next_tail: u64,
    /// Our head: slices the successor has consumed from its staging.
    pub this_head: u64,
    /// The predecessor's head, which we raise once we consumed a slice.
    pub prev_head: u64,
    /// Slices this channel has sent (and received: in a ring the two are
    /// equal) since the communicator was created. Kernel-owned.
    pub seq: u64,
    /// Host-visible [`StatusRecord`] of this rank and channel (0: none).
    pub status: u64,
    /// Direct calls this channel has run since the communicator was
    /// created; its ready word reaches `2 * epoch` after each. Kernel-owned,
    /// so a captured CUDA graph replays with fresh values.
    pub epoch: u64,
}

/// One rank's constants, written to device memory once, when the
/// communicator is created.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RankInfo {
    pub k: u64,
    /// This rank's position in the ring.
    pub ring_pos: u64,
    /// This rank's user rank (`user_from_ring[ring_pos]`).
    pub user_rank: u64,
    /// `k` `u32`s: the user rank at each ring position.
    pub user_from_ring: u64,
    /// Host-visible word; nonzero asks every wait to give up (0: no word).
    pub abort_flag: u64,
    /// Longest a single wait may spin without progress, in ns (0: forever).
    pub timeout_ns: u64,
    /// Nonzero when some rank runs on another device, so that flags and
    /// data cross the bus and need system-scope fences (see [`Scope`]).
    pub system_scope: u64,
    /// Bytes of staging per channel.
    pub staging_bytes: u64,
    /// Address of `k` [`DirectPeer`]s in user-rank order (0: no direct
    /// algorithms).
    pub direct_peers: u64,
    /// Bytes of each half of every rank's direct staging.
    pub direct_half_bytes: u64,
}

impl RankInfo {
    /// The scope of this rank's flag signals and acquires.
    #[cfg_attr(target_arch = "nvptx64", inline(always))]
    #[cfg_attr(not(target_arch = "nvptx64"), inline)]
    pub fn scope(&self) -> Scope {
        if self.system_scope != 0 {
            Scope::Sys
        } else {
            Scope::Gpu
        }
    }
}

/// A rank's connection: its constants and its channels. The kernel reads
/// the parts it needs through a raw pointer ([`Work::conn`]) and writes only
/// the `seq` word of its own channel.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RankConn {
    pub rank: RankInfo,
    pub channels: [ChannelConn; MAX_CHANNELS],
}

impl Default for RankConn {
    fn default() -> Self {
        RankConn {
            rank: RankInfo::default(),
            channels: [ChannelConn::default(); MAX_CHANNELS],
        }
    }
}

/// One call's work for one rank: its channels are blocks of a [`Batch`]'s
/// grid.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Work {
    /// Address of this rank's [`RankConn`].
    pub conn: u64,
    /// A [`Collective`].
    pub collective: u64,
    /// Channels (blocks) of this call, at most [`MAX_CHANNELS`]; for a
    /// local call, only this rank's share of the grid's blocks, which
    /// touch no channel state (see [`crate::local`]).
    pub channels: u64,
    pub send: u64,
    pub recv: u64,
    /// Where each block and channel's data lies.
    pub geometry: Geometry,
    /// The staging slots of this call.
    pub sizing: Sizing,
    /// Nonzero when the wide-pack path may run (see `plan::common_residue`).
    pub aligned: u64,
    /// The alignment residue of block 0 (0 if scalar).
    pub residue: u64,
    /// How many unrolled rounds ahead each producer asks the L2 cache for
    /// its own input (0: no prefetch).
    pub prefetch_rounds: u64,
    /// With the `fault-injection` feature: the (chunk, step) from which
    /// this rank's "new data" signals are dropped. `u64::MAX` disables it.
    pub fault_chunk: u64,
    pub fault_step: u64,
    /// An [`Algorithm`](crate::types::Algorithm).
    pub algorithm: u64,
    /// Direct algorithms: byte offset, in a staging half, of the two-shot
    /// all-reduce's reduced blocks (after the staged input).
    pub direct_result: u64,
}

/// Ranks one launch can run: the [`Batch`] passed by value must stay well
/// inside the 4 KiB of kernel parameters every driver accepts.
pub const BATCH_RANKS: usize = 16;
// `Batch::work` names every entry.
const _: () = assert!(BATCH_RANKS == 16);

/// One launch's work, passed by value: the ranks of one device (up to
/// [`BATCH_RANKS`]) run as one grid, so virtual ranks cost one launch, not
/// one per rank, and can share a stream. Block `b` runs channel
/// `b % channels` of `works[b / channels]`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Batch {
    /// Entries of `works` in use.
    pub ranks: u64,
    /// Channels of every rank of the call (every `Work` has the same).
    pub channels: u64,
    pub works: [Work; BATCH_RANKS],
}

const _: () = assert!(core::mem::size_of::<Batch>() <= 4096);

/// Words of a [`Work`]: every field of it (and of [`Geometry`] and
/// [`Sizing`]) is a `u64`, so it has no padding.
const WORK_WORDS: usize = core::mem::size_of::<Work>() / 8;
const _: () = assert!(core::mem::size_of::<Work>() == 8 * WORK_WORDS);
const _: () = assert!(core::mem::size_of::<Work>() == 160);

impl Batch {
    /// The batch of `works`, or `None` when there are more than
    /// [`BATCH_RANKS`] or they disagree on the channel count.
    pub fn new(works: &[Work]) -> Option<Batch> {
        Batch::grid(works)?;
        let channels = works.first().map_or(0, |w| w.channels);
        let mut b = Batch {
            ranks: works.len() as u64,
            channels,
            works: [Work::default(); BATCH_RANKS],
        };
        b.works[..works.len()].copy_from_slice(works);
        Some(b)
    }

    /// Blocks of the grid of `works` (every rank's channels), or `None`
    /// where [`Batch::new`] would refuse them: a local launch needs only
    /// this, not the batch.
    pub fn grid(works: &[Work]) -> Option<u64> {
        let channels = works.first().map_or(0, |w| w.channels);
        if works.len() > BATCH_RANKS || works.iter().any(|w| w.channels != channels) {
            return None;
        }
        Some(works.len() as u64 * channels)
    }

    /// Blocks of the grid: every rank's channels.
    pub fn blocks(&self) -> u64 {
        self.ranks * self.channels
    }

    /// The (entry of `works`, channel) block `block` runs, or `None` past
    /// the grid.
    #[cfg_attr(target_arch = "nvptx64", inline(always))]
    #[cfg_attr(not(target_arch = "nvptx64"), inline)]
    pub fn locate(&self, block: u64) -> Option<(usize, u64)> {
        if self.channels == 0 || block >= self.blocks() || self.ranks > BATCH_RANKS as u64 {
            return None;
        }
        Some(((block / self.channels) as usize, block % self.channels))
    }

    /// A copy of entry `i` of `works` (zeros past the end), read with
    /// constant offsets and masks only: a dynamic index into a by-value
    /// kernel parameter makes the compiler copy the whole batch to local
    /// memory in every thread.
    #[cfg_attr(target_arch = "nvptx64", inline(always))]
    #[cfg_attr(not(target_arch = "nvptx64"), inline)]
    pub fn work(&self, i: usize) -> Work {
        let mut out = [0u64; WORK_WORDS];
        // Spelled out per entry: a loop over the entries is not unrolled.
        macro_rules! take {
            ($($j:literal)*) => {$({
                let mask = 0u64.wrapping_sub((i == $j) as u64);
                // SAFETY: `Work` is `repr(C)` with only `u64` fields (see
                // `WORK_WORDS`), so it is exactly `WORK_WORDS` words.
                let words = unsafe {
                    &*(core::ptr::addr_of!(self.works[$j]) as *const [u64; WORK_WORDS])
                };
                for (o, &x) in out.iter_mut().zip(words) {
                    *o |= x & mask;
                }
            })*};
        }
        take!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15);
        // SAFETY: as above; every bit pattern is a valid `Work`.
        unsafe { core::mem::transmute::<[u64; WORK_WORDS], Work>(out) }
    }
}

/// How a rank's kernel ended.
#[repr(u64)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitOutcome {
    Ok = 0,
    TimedOut = 1,
    Aborted = 2,
}

impl WaitOutcome {
    pub fn from_u64(v: u64) -> Option<Self> {
        match v {
            0 => Some(WaitOutcome::Ok),
            1 => Some(WaitOutcome::TimedOut),
            2 => Some(WaitOutcome::Aborted),
            _ => None,
        }
    }
}

/// Which flag a wait was spinning on.
#[repr(u64)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitKind {
    /// The successor's head: the staging slot we are about to fill must
    /// have been consumed.
    SlotFree = 1,
    /// The predecessor's tail: the slice we are about to read must have
    /// arrived.
    NewData = 2,
    /// A peer's direct ready word (the peer's user rank is in the record's
    /// `sub`): its staged data for this phase must be there.
    PeerReady = 3,
}

impl WaitKind {
    pub fn from_u64(v: u64) -> Option<Self> {
        Some(match v {
            1 => WaitKind::SlotFree,
            2 => WaitKind::NewData,
            3 => WaitKind::PeerReady,
            _ => return None,
        })
    }

    /// Whether the flag is written by the predecessor (else the successor).
    pub fn written_by_predecessor(self) -> bool {
        matches!(self, WaitKind::NewData)
    }

    pub fn describe(self) -> &'static str {
        match self {
            WaitKind::SlotFree => "the successor to free a staging slot",
            WaitKind::NewData => "the predecessor's new-data signal",
            WaitKind::PeerReady => "a peer's direct ready signal",
        }
    }
}

/// Written by a channel whose wait gave up, into host-visible memory, so
/// the host can say which rank was stuck and on what.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatusRecord {
    /// A [`WaitOutcome`].
    pub outcome: u64,
    pub user_rank: u64,
    pub ring_pos: u64,
    pub channel: u64,
    pub chunk: u64,
    pub step: u64,
    pub sub: u64,
    /// A [`WaitKind`].
    pub wait_kind: u64,
    /// The flag value waited for.
    pub expected: u64,
    /// The value last seen.
    pub seen: u64,
    /// How long the wait spun, in ns.
    pub waited_ns: u64,
}

impl StatusRecord {
    /// Number of `u64` words, for volatile word-by-word copies.
    pub const WORDS: usize = core::mem::size_of::<StatusRecord>() / 8;

    /// The record from its words in memory order (as the kernel writes them).
    pub fn from_words(w: [u64; Self::WORDS]) -> Self {
        StatusRecord {
            outcome: w[0],
            user_rank: w[1],
            ring_pos: w[2],
            channel: w[3],
            chunk: w[4],
            step: w[5],
            sub: w[6],
            wait_kind: w[7],
            expected: w[8],
            seen: w[9],
            waited_ns: w[10],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_maps_every_block_to_one_rank_and_channel() {
        let works: [Work; 5] = core::array::from_fn(|r| Work {
            conn: 100 + r as u64,
            channels: 3,
            send: r as u64,
            direct_result: 7 * r as u64,
            ..Work::default()
        });
        let b = Batch::new(&works).unwrap();
        assert_eq!(b.blocks(), 15);
        assert_eq!(Batch::grid(&works), Some(15));
        let mut seen = [[false; 3]; 5];
        for block in 0..b.blocks() {
            let (r, c) = b.locate(block).unwrap();
            assert!(!seen[r][c as usize]);
            seen[r][c as usize] = true;
            assert_eq!(b.work(r), works[r]);
        }
        assert!(seen.iter().flatten().all(|&x| x));
        assert_eq!(b.locate(15), None);
        assert_eq!(b.work(BATCH_RANKS), Work::default());
        let mut odd = works;
        odd[2].channels = 2;
        assert_eq!(Batch::new(&odd), None);
        assert_eq!(Batch::grid(&odd), None);
        assert_eq!(Batch::new(&[Work::default(); BATCH_RANKS + 1]), None);
        assert_eq!(Batch::grid(&[Work::default(); BATCH_RANKS + 1]), None);
        assert_eq!(Batch::new(&[]).map(|b| b.blocks()), Some(0));
    }
}
