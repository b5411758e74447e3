//! What a GPU communicator owns once set up: each rank's memory, the
//! launch groups and their events, the memo and the state. Setup fills it
//! and launch reads it; it depends on neither.

use super::driver::{DeviceAlloc, Event, IpcMapping, MappedHost};
use super::module::Kernels;
use crate::error::Result;
use crate::memo::PlanMemo;
use crate::state::CommState;
use cudarc::driver::{CudaContext, CudaStream};
use ringreduce_kernels::abi::BATCH_RANKS;
use std::sync::{Arc, Mutex};

/// One rank's device memory.
pub struct Rank {
    pub ctx: Arc<CudaContext>,
    /// What its peers write: every channel's staging ring and flags, and
    /// the direct staging with its ready words, laid out by
    /// [`RankLayout`](crate::layout::RankLayout) (the status records are
    /// in [`Inner::host`] instead, where the host reads them).
    pub area: DeviceAlloc,
    pub user_from_ring: DeviceAlloc,
    /// The [`RankConn`](ringreduce_kernels::abi::RankConn) the kernel reads.
    pub conn: DeviceAlloc,
    /// The table of every rank's direct staging and ready words
    /// ([`DirectPeer`](ringreduce_kernels::abi::DirectPeer)s) as this
    /// rank's kernel reads it; `None` without direct staging.
    pub direct_peers: Option<DeviceAlloc>,
}

/// Everything a communicator owns.
pub struct Inner {
    pub ranks: Vec<Rank>,
    /// Each rank's connection address (`ranks[u].conn`), as the planner
    /// takes them, kept rather than gathered on every call.
    pub conns: Vec<u64>,
    pub kernels: Vec<Arc<Kernels>>,
    /// Word 0: abort; then one status record per rank and channel.
    pub host: MappedHost,
    /// Held while one collective's grids are launched, so that concurrent
    /// callers cannot interleave two collectives' launches across ranks;
    /// holds each rank's last stream.
    pub launch: Mutex<Vec<Option<Arc<CudaStream>>>>,
    /// The recent calls' plans; locked before `launch` when both are held.
    pub memo: Mutex<PlanMemo>,
    /// The ranks each launch runs, with the events that order it with
    /// their streams.
    pub groups: Vec<Group>,
    pub state: CommState,
    /// Blocks of the collective kernels that can be resident at once on
    /// the smallest of the ranks' devices.
    pub resident_blocks: usize,
    /// As a rank of a job: the peers' areas mapped here, closed as the
    /// rank leaves (before the peers free them).
    pub peers: Mutex<Vec<IpcMapping>>,
}

/// User ranks by device, in order of first appearance, cut into groups of
/// at most [`BATCH_RANKS`]: the ranks each launch runs.
pub fn launch_groups(devices: &[usize]) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = Vec::new();
    for &d in devices {
        if !order.contains(&d) {
            order.push(d);
        }
    }
    order
        .iter()
        .flat_map(|&d| {
            let ranks: Vec<usize> = (0..devices.len()).filter(|&u| devices[u] == d).collect();
            ranks
                .chunks(BATCH_RANKS)
                .map(<[usize]>::to_vec)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The ranks one launch runs and the events that order it with their
/// streams (made once, recorded again by every call).
pub struct Group {
    pub ranks: Vec<usize>,
    /// One per rank of the group: recorded on a stream the launch waits for.
    pub(super) arrive: Vec<Event>,
    /// Recorded after the launch, for the other streams to wait for.
    pub(super) done: Event,
}

impl Group {
    pub fn new(ctx: &Arc<CudaContext>, ranks: Vec<usize>) -> Result<Group> {
        let arrive = ranks
            .iter()
            .map(|_| Event::new(ctx))
            .collect::<Result<_>>()?;
        Ok(Group {
            arrive,
            done: Event::new(ctx)?,
            ranks,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_follow_devices_and_the_batch_limit() {
        assert_eq!(launch_groups(&[0, 0, 0]), vec![vec![0, 1, 2]]);
        assert_eq!(launch_groups(&[1, 0, 1, 0]), vec![vec![0, 2], vec![1, 3]]);
        let many = vec![0; BATCH_RANKS + 3];
        let g = launch_groups(&many);
        assert_eq!(g.len(), 2);
        assert_eq!(g[0], (0..BATCH_RANKS).collect::<Vec<_>>());
        assert_eq!(g[1], (BATCH_RANKS..BATCH_RANKS + 3).collect::<Vec<_>>());
        assert!(launch_groups(&[]).is_empty());
    }
}
