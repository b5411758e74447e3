//! Where a rank's shared state lies in one area of memory: each channel's
//! staging ring, its tail and head words and its status record, then the
//! direct staging and its ready words. One area per rank can be exported
//! whole to the processes that write it (shared memory on the CPU, one
//! IPC handle on a GPU), and every backend lays it out by this one rule.

use crate::planner::{ChannelWiring, RankWiring};
use ringreduce_kernels::abi::{DirectPeer, DIRECT_FLAG_STRIDE};
use ringreduce_kernels::StatusRecord;

/// Channels' staging rings start this many bytes apart at least, so that
/// every channel's 16-byte packs stay aligned whatever size the staging is.
pub const STAGING_ALIGN: u64 = 256;

/// Bytes of flags per channel: the tail and the head each on a line of
/// their own, since different peers write them.
pub const FLAG_STRIDE: u64 = 256;
/// Offset of the head word in a channel's flags (the tail is at 0).
pub const HEAD: u64 = 128;

/// Bytes between two channels' status records: a line each, since each
/// channel's control lane writes its own.
pub const STATUS_STRIDE: u64 = 128;
const _: () = assert!(StatusRecord::WORDS as u64 * 8 <= STATUS_STRIDE);

/// Bytes between two channels' staging rings.
pub fn staging_stride(bytes: u64) -> u64 {
    bytes.next_multiple_of(STAGING_ALIGN)
}

/// The offsets of one rank's area.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RankLayout {
    /// Channels the area holds.
    pub channels: u64,
    /// Staging bytes per channel.
    pub staging_bytes: u64,
    /// Bytes of each direct staging half (0: none).
    pub direct_half: u64,
    flags_at: u64,
    status_at: u64,
    direct_at: u64,
    ready_at: u64,
    /// Bytes of the whole area.
    pub bytes: u64,
}

impl RankLayout {
    /// The area of `channels` channels of `staging_bytes` each, with direct
    /// staging halves of `direct_half` bytes (0: none).
    pub fn new(channels: usize, staging_bytes: u64, direct_half: u64) -> Self {
        let ch = channels as u64;
        let flags_at = staging_stride(staging_bytes) * ch;
        let status_at = flags_at + FLAG_STRIDE * ch;
        let direct_at = (status_at + STATUS_STRIDE * ch).next_multiple_of(STAGING_ALIGN);
        let ready_at = direct_at + 2 * direct_half;
        let ready_bytes = if direct_half > 0 {
            DIRECT_FLAG_STRIDE * ch
        } else {
            0
        };
        RankLayout {
            channels: ch,
            staging_bytes,
            direct_half,
            flags_at,
            status_at,
            direct_at,
            ready_at,
            bytes: ready_at + ready_bytes,
        }
    }

    /// Channel `c`'s staging ring.
    pub fn staging(&self, c: u64) -> u64 {
        staging_stride(self.staging_bytes) * c
    }
    /// Channel `c`'s tail word (written by the predecessor).
    pub fn tail(&self, c: u64) -> u64 {
        self.flags_at + FLAG_STRIDE * c
    }
    /// Channel `c`'s head word (written by the successor).
    pub fn head(&self, c: u64) -> u64 {
        self.tail(c) + HEAD
    }
    /// Channel `c`'s status record.
    pub fn status(&self, c: u64) -> u64 {
        self.status_at + STATUS_STRIDE * c
    }
    /// The direct staging's two halves, if any.
    pub fn direct(&self) -> Option<u64> {
        (self.direct_half > 0).then_some(self.direct_at)
    }
    /// Channel 0's ready word of the direct staging, if any.
    pub fn ready(&self) -> Option<u64> {
        (self.direct_half > 0).then_some(self.ready_at)
    }
}

/// Every rank's direct staging and ready words, by user rank, from where
/// each rank's area lies (`areas[u]`: its address here, and its layout).
pub fn direct_peers(areas: &[(u64, RankLayout)]) -> Vec<DirectPeer> {
    areas
        .iter()
        .map(|(base, l)| DirectPeer {
            area: base + l.direct().unwrap_or(0),
            ready: base + l.ready().unwrap_or(0),
        })
        .collect()
}

/// Every rank's wiring over `channels` channels of the areas at `areas`
/// (as [`direct_peers`] takes them). The rest lies outside the areas and
/// matters only for the ranks whose kernels run here: rank `u`'s ring
/// table (`table(u)`), its channel `c`'s status record (`status(u, c)`)
/// and its copy of the direct peers' table (`peers(u)`).
pub fn wiring(
    areas: &[(u64, RankLayout)],
    channels: usize,
    table: impl Fn(usize) -> u64,
    status: impl Fn(usize, u64) -> u64,
    peers: impl Fn(usize) -> u64,
) -> Vec<RankWiring> {
    areas
        .iter()
        .enumerate()
        .map(|(u, &(base, l))| RankWiring {
            user_from_ring: table(u),
            channels: (0..channels as u64)
                .map(|c| ChannelWiring {
                    staging: base + l.staging(c),
                    tail: base + l.tail(c),
                    head: base + l.head(c),
                    status: status(u, c),
                })
                .collect(),
            direct_peers: peers(u),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A staging size that is no multiple of 16 (the automatic share of
    /// 64 MiB for 96 blocks is 699,050 bytes) must not shift the next
    /// channel's ring off a pack boundary.
    #[test]
    fn channel_rings_stay_aligned() {
        for bytes in [699_050u64, 1000, 2 << 20, 262_273] {
            let s = staging_stride(bytes);
            assert!(
                s >= bytes && s.is_multiple_of(256) && s - bytes < 256,
                "{bytes}"
            );
        }
    }

    /// No two parts overlap, every part stays inside the area, and staging
    /// rings, flags and the direct staging start on their alignments.
    #[test]
    fn parts_are_apart_and_aligned() {
        for (ch, staging, half) in [(1, 4224, 0), (3, 699_050, 1 << 20), (32, 1000, 256)] {
            let l = RankLayout::new(ch, staging, half);
            let mut parts: Vec<(u64, u64)> = Vec::new();
            for c in 0..ch as u64 {
                assert!(l.staging(c).is_multiple_of(STAGING_ALIGN));
                parts.push((l.staging(c), staging));
                parts.push((l.tail(c), 8));
                parts.push((l.head(c), 8));
                parts.push((l.status(c), StatusRecord::WORDS as u64 * 8));
            }
            if let (Some(d), Some(r)) = (l.direct(), l.ready()) {
                assert!(d.is_multiple_of(STAGING_ALIGN));
                parts.push((d, 2 * half));
                parts.push((r, DIRECT_FLAG_STRIDE * ch as u64));
            } else {
                assert_eq!(half, 0);
            }
            parts.sort();
            for w in parts.windows(2) {
                assert!(w[0].0 + w[0].1 <= w[1].0, "{ch} {staging} {half}: {w:?}");
            }
            let (last, len) = parts[parts.len() - 1];
            assert!(last + len <= l.bytes);
        }
    }
}
