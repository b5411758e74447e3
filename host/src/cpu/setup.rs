//! The CPU backend's memory and wiring: each rank's area (`layout.rs`) in
//! private memory when every rank is a thread of this process, or in
//! shared memory that the peers map when each rank is a process of a job;
//! then the ring's connections over those areas, as the kernel reads them.

use crate::channels::cpu_channels;
use crate::config::CommConfig;
use crate::error::{Error, Result};
use crate::job::{Offer, Table};
use crate::layout::{direct_peers, wiring, RankLayout};
use crate::memo::PlanMemo;
use crate::planner::{connect, staging_bytes};
use crate::ring::RingOrder;
use crate::shm::{segment_name, sweep_stale, Segment};
use crate::state::CommState;
use ringreduce_kernels::abi::{DirectPeer, RankConn, CPU_THREADS};
use ringreduce_kernels::cpu::Trap;
use ringreduce_kernels::StatusRecord;
use std::cell::UnsafeCell;
use std::sync::atomic::AtomicU64;
use std::sync::Mutex;

/// The backend's name in a job's offers.
const BACKEND: &str = "cpu";

/// A rank this process runs: its area, its ring table and the connection
/// the kernel reads (and whose `seq` words it advances).
pub(super) struct CpuRank {
    pub area: Segment,
    pub layout: RankLayout,
    pub user_from_ring: Box<[u32]>,
    pub conn: Box<UnsafeCell<RankConn>>,
}

// SAFETY: `conn` is written by the planner before any job runs and
// afterwards only by the kernel code of that rank, one job at a time; the
// area is shared memory the protocol orders.
unsafe impl Sync for CpuRank {}

impl CpuRank {
    /// Channel `c`'s status record.
    pub fn status(&self, c: u64) -> &[AtomicU64; StatusRecord::WORDS] {
        // SAFETY: the layout puts a record's words, 8-byte aligned, inside
        // the area, which lives as long as `self`.
        unsafe { &*((self.area.addr() + self.layout.status(c)) as *const _) }
    }
}

/// The backend's state that its worker threads share.
pub(super) struct Inner {
    /// The ranks this process runs, in user-rank order from
    /// `state.local.start`.
    pub ranks: Vec<CpuRank>,
    /// The peers' areas mapped here (a job's); their mappings must outlive
    /// every kernel that writes them.
    #[allow(dead_code)]
    peers: Vec<Segment>,
    /// Every rank's direct staging and ready words, in user-rank order: the
    /// table each rank's kernel code reads through a raw pointer, so it is
    /// only held here (empty without direct staging).
    #[allow(dead_code)]
    direct_peers: Box<[DirectPeer]>,
    pub abort: Box<AtomicU64>,
    pub state: CommState,
    /// The recent calls' plans (see [`PlanMemo`]).
    pub memo: Mutex<PlanMemo>,
    /// Raised by a lane that panics (see [`Trap`]).
    pub trap: Trap,
}

/// A new rank of `ring`, in `area` laid out by `layout`.
fn rank(ring: &RingOrder, area: Segment, layout: RankLayout) -> CpuRank {
    CpuRank {
        area,
        layout,
        user_from_ring: ring.user_from_ring().into(),
        conn: Box::new(UnsafeCell::new(RankConn::default())),
    }
}

/// `k` ranks, all here, in private memory.
pub(super) fn local(k: usize, config: CommConfig) -> Result<Inner> {
    if k == 0 {
        return Err(Error::ZeroRanks);
    }
    let ring = RingOrder::for_ranks(config.ring_order.as_deref(), k)?;
    // Fail early on a staging buffer that cannot hold even one slice.
    let staging = staging_bytes(config.buffer_bytes, CPU_THREADS)?;
    let channels = cpu_channels(config.channels)?;
    let half = config.effective_direct_bytes();
    let layout = RankLayout::new(channels, staging, half);
    let ranks = (0..k)
        .map(|_| {
            Ok(rank(
                &ring,
                Segment::private(layout.bytes as usize)?,
                layout,
            ))
        })
        .collect::<Result<Vec<_>>>()?;
    let areas: Vec<(u64, RankLayout)> = ranks.iter().map(|r| (r.area.addr(), r.layout)).collect();
    // Every rank's job of a local call meets the others before and after
    // it, as one launch would run them (`CpuBackend::execute`).
    let local_blocks = (k * channels) as u64;
    let state = CommState::new(ring, config, channels, staging, half, local_blocks)?;
    Ok(wire(state, ranks, &areas, Vec::new()))
}

/// A rank of a job before it meets its peers: its area in shared memory,
/// under a name they can open.
pub struct Joining {
    rank: usize,
    area: Segment,
    layout: RankLayout,
}

/// Rank `rank` of job `job`: its area, shared, and its offer.
pub(super) fn prepare(rank: usize, config: &CommConfig, job: u64) -> Result<(Joining, Offer)> {
    let staging = staging_bytes(config.buffer_bytes, CPU_THREADS)?;
    let channels = cpu_channels(config.channels)?;
    let half = config.effective_direct_bytes();
    let layout = RankLayout::new(channels, staging, half);
    sweep_stale();
    let name = segment_name(job, rank, std::process::id());
    let area = Segment::create(&name, layout.bytes as usize)?;
    let offer = Offer::new(BACKEND, config, channels, staging, half, name.into_bytes());
    Ok((Joining { rank, area, layout }, offer))
}

/// The rank of `table`, with every peer's area mapped.
pub(super) fn join(j: Joining, table: &Table, config: CommConfig) -> Result<Inner> {
    let world = table.world();
    let ring = RingOrder::for_ranks(config.ring_order.as_deref(), world)?;
    let o = &table.offers[j.rank];
    let (staging, half) = (o.staging_bytes, o.direct_half);
    let mut peers = Vec::with_capacity(world.saturating_sub(1));
    let mut areas = Vec::with_capacity(world);
    for (u, offer) in table.offers.iter().enumerate() {
        let layout = RankLayout::new(offer.channels as usize, staging, half);
        if u == j.rank {
            areas.push((j.area.addr(), j.layout));
            continue;
        }
        let name = String::from_utf8(offer.handle.clone())
            .map_err(|_| Error::Rendezvous(format!("rank {u}'s memory name is not text")))?;
        let seg = Segment::open(&name, layout.bytes as usize)?;
        areas.push((seg.addr(), layout));
        peers.push(seg);
    }
    let state = CommState::new(ring, config, table.channels, staging, half, 0)?.in_job(j.rank);
    let me = rank(&state.ring, j.area, j.layout);
    Ok(wire(state, vec![me], &areas, peers))
}

/// Connects the ranks here (`ranks`, from `state.local.start` on) to the
/// areas of every rank (`areas`, by user rank, at their addresses here).
fn wire(
    state: CommState,
    ranks: Vec<CpuRank>,
    areas: &[(u64, RankLayout)],
    peers: Vec<Segment>,
) -> Inner {
    let half = state.direct_half_bytes;
    let direct_peers: Box<[DirectPeer]> = if half > 0 {
        direct_peers(areas).into()
    } else {
        Box::new([])
    };
    let peers_at = if half > 0 {
        direct_peers.as_ptr() as u64
    } else {
        0
    };
    let first = state.local.start;
    // Only the ranks here read their table; every rank's record is in its
    // own area.
    let table = |u: usize| {
        u.checked_sub(first)
            .and_then(|i| ranks.get(i))
            .map_or(0, |r| r.user_from_ring.as_ptr() as u64)
    };
    let status = |u: usize, c: u64| areas[u].0 + areas[u].1.status(c);
    let wiring = wiring(areas, state.max_channels, table, status, |_| peers_at);
    let abort = Box::new(AtomicU64::new(0));
    let conns = connect(
        &state.ring,
        &wiring,
        state.statics(abort.as_ptr() as u64, false),
    );
    for (r, c) in ranks.iter().zip(&conns[first..]) {
        // SAFETY: no job exists yet.
        unsafe { *r.conn.get() = *c };
    }
    Inner {
        ranks,
        peers,
        direct_peers,
        abort,
        state,
        memo: Mutex::new(PlanMemo::default()),
        trap: Trap::default(),
    }
}
