//! The ring's wiring: each rank's connection to its neighbours' staging
//! and flags, computed once when a communicator is created.

use crate::ring::RingOrder;
use ringreduce_kernels::abi::{ChannelConn, RankConn, RankInfo, MAX_CHANNELS};

/// Where one channel of one rank lives (device or host addresses).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ChannelWiring {
    /// The channel's staging ring.
    pub staging: u64,
    /// Its tail word (written by the predecessor).
    pub tail: u64,
    /// Its head word (written by the successor).
    pub head: u64,
    /// Where the channel records how its last wait ended.
    pub status: u64,
}

/// Where one rank's communicator state lives.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RankWiring {
    /// The ring table as the rank's kernel reads it.
    pub user_from_ring: u64,
    /// Each channel's state; every rank has the same number.
    pub channels: Vec<ChannelWiring>,
    /// The table of every rank's direct staging and ready words
    /// ([`ringreduce_kernels::DirectPeer`], user-rank order) as this rank's
    /// kernel reads it; 0 without direct staging.
    pub direct_peers: u64,
}

/// Communicator-wide settings that go into every rank's connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Static {
    /// The abort word's address, or 0 with the watchdog off.
    pub abort_flag: u64,
    /// The wait timeout; 0 waits forever.
    pub timeout_ns: u64,
    /// Some rank runs on another device than the others: flags need
    /// system-scope fences (see [`ringreduce_kernels::Scope`]).
    pub system_scope: bool,
    /// Staging bytes per channel.
    pub staging_bytes: u64,
    /// Bytes of each half of every rank's direct staging (0: none).
    pub direct_half_bytes: u64,
}

/// Each user rank's connection: its ring neighbours' staging and flags,
/// channel by channel. Written to memory once, at creation.
pub fn connect(ring: &RingOrder, wiring: &[RankWiring], st: Static) -> Vec<RankConn> {
    let k = ring.len();
    let ufr = ring.user_from_ring();
    let mut conns = vec![RankConn::default(); k];
    for (pos, &user) in ufr.iter().enumerate() {
        let user = user as usize;
        let succ = &wiring[ufr[(pos + 1) % k] as usize];
        let pred = &wiring[ufr[(pos + k - 1) % k] as usize];
        let me = &wiring[user];
        let c = &mut conns[user];
        c.rank = RankInfo {
            k: k as u64,
            ring_pos: pos as u64,
            user_rank: user as u64,
            user_from_ring: me.user_from_ring,
            abort_flag: st.abort_flag,
            timeout_ns: st.timeout_ns,
            system_scope: st.system_scope as u64,
            staging_bytes: st.staging_bytes,
            direct_peers: me.direct_peers,
            direct_half_bytes: st.direct_half_bytes,
        };
        for (ch, w) in me.channels.iter().enumerate().take(MAX_CHANNELS) {
            c.channels[ch] = ChannelConn {
                this_staging: w.staging,
                next_staging: succ.channels[ch].staging,
                this_tail: w.tail,
                next_tail: succ.channels[ch].tail,
                this_head: w.head,
                prev_head: pred.channels[ch].head,
                seq: 0,
                status: w.status,
                epoch: 0,
            };
        }
    }
    conns
}
