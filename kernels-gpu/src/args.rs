//! The kernel-argument struct and the status record, shared by host and
//! kernel. Pointers are plain `u64` addresses so the struct has one layout on
//! every target and can be passed by value as a kernel parameter.

use crate::device::Scope;
use crate::plan::Sizing;

/// Everything one rank's kernel needs for one reduce-scatter. Addresses are
/// device addresses on the GPU and host addresses in the CPU execution.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KernelArgs {
    pub k: u64,
    /// This rank's position in the ring.
    pub ring_pos: u64,
    /// This rank's user rank (`user_from_ring[ring_pos]`).
    pub user_rank: u64,
    /// `k` `u32`s: the user rank at each ring position.
    pub user_from_ring: u64,
    pub sizing: Sizing,
    /// Nonzero when all pointers share residues modulo the pack size and the
    /// wide-pack path may run (see `plan::common_residue`).
    pub aligned: u64,
    /// The common `send` address residue modulo the pack size (0 if scalar).
    pub send_residue: u64,
    /// `k * n` elements.
    pub send: u64,
    /// `n` elements.
    pub recv: u64,
    /// Our staging buffer, written by the predecessor.
    pub this_buffer: u64,
    /// The successor's staging buffer, which we write.
    pub next_buffer: u64,
    /// Our "new data" counter, written by the predecessor.
    pub this_new_data: u64,
    /// The successor's "new data" counter, which we write.
    pub next_new_data: u64,
    /// Our "chunk done" counter, written by the successor.
    pub this_chunk_done: u64,
    /// The predecessor's "chunk done" counter, which we write.
    pub prev_chunk_done: u64,
    /// Our "next output" slot: the successor announces itself here.
    pub this_slot: u64,
    /// The predecessor's slot, where we announce ourselves.
    pub prev_slot: u64,
    /// Host-visible word; nonzero asks every wait to give up (0: no word).
    pub abort_flag: u64,
    /// Host-visible [`StatusRecord`] of this rank (0: none).
    pub status: u64,
    /// Longest a single wait may spin without progress, in ns (0: forever).
    pub timeout_ns: u64,
    /// How many unrolled rounds ahead each producer asks the L2 cache for
    /// its own input (0: no prefetch).
    pub prefetch_rounds: u64,
    /// With the `fault-injection` feature: the (chunk, step) whose "new
    /// data" signals are dropped. `u64::MAX` disables it.
    pub fault_chunk: u64,
    pub fault_step: u64,
    /// Nonzero when some rank runs on another device, so that flags and
    /// data cross the bus and need system-scope fences; zero when every
    /// rank shares this GPU (see [`Scope`]).
    pub system_scope: u64,
}

impl KernelArgs {
    /// The scope of this rank's flag signals and acquires.
    #[inline(always)]
    pub fn scope(&self) -> Scope {
        if self.system_scope != 0 {
            Scope::Sys
        } else {
            Scope::Gpu
        }
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
    /// The predecessor's slot to be cleared (its previous collective done).
    PrevSlotCleared = 1,
    /// The successor to announce itself in our slot.
    NextAnnounced = 2,
    /// The successor's "chunk done" counter, before reusing its buffer.
    ChunkDone = 3,
    /// The predecessor's "new data" counter.
    NewData = 4,
    /// The predecessor's last "new data" signal, before resetting flags.
    FinalData = 5,
}

impl WaitKind {
    pub fn from_u64(v: u64) -> Option<Self> {
        Some(match v {
            1 => WaitKind::PrevSlotCleared,
            2 => WaitKind::NextAnnounced,
            3 => WaitKind::ChunkDone,
            4 => WaitKind::NewData,
            5 => WaitKind::FinalData,
            _ => return None,
        })
    }

    /// Whether the flag is written by the predecessor (else the successor).
    pub fn written_by_predecessor(self) -> bool {
        matches!(
            self,
            WaitKind::PrevSlotCleared | WaitKind::NewData | WaitKind::FinalData
        )
    }

    pub fn describe(self) -> &'static str {
        match self {
            WaitKind::PrevSlotCleared => "the predecessor to finish its previous collective",
            WaitKind::NextAnnounced => "the successor to announce itself",
            WaitKind::ChunkDone => "the successor's chunk-done signal",
            WaitKind::NewData => "the predecessor's new-data signal",
            WaitKind::FinalData => "the predecessor's last new-data signal",
        }
    }
}

/// Written by a rank whose wait gave up, into host-visible memory, so the
/// host can say which rank was stuck and on what.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatusRecord {
    /// A [`WaitOutcome`].
    pub outcome: u64,
    pub user_rank: u64,
    pub ring_pos: u64,
    pub chunk: u64,
    pub step: u64,
    pub sub: u64,
    /// A [`WaitKind`].
    pub wait_kind: u64,
    /// The value waited for (for the slot waits: 0 = cleared, 1 = nonzero).
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
            chunk: w[3],
            step: w[4],
            sub: w[5],
            wait_kind: w[6],
            expected: w[7],
            seen: w[8],
            waited_ns: w[9],
        }
    }
}
