//! A GPU rank as one process of a job: its area in one `cuMemAlloc`
//! allocation, exported with a CUDA IPC handle (`cuIpcGetMemHandle`); the
//! peers' areas mapped with `cuIpcOpenMemHandle`; then the ring's
//! connections over them, as for ranks of one process. The kernels are
//! the same, one launch per process.

use super::driver::{
    device_uuid, ipc_handle, mps_enabled, open_device, DeviceAlloc, IpcMapping, MappedHost,
};
use super::inner::{Group, Inner};
use super::module::Kernels;
use super::setup::{
    new_rank, record_at, resident_by_bounds, write_conn, write_peers, MAX_RESIDENT_GRIDS,
};
use crate::channels::{channels_that_fit, Fit};
use crate::config::CommConfig;
use crate::error::Result;
use crate::job::{Offer, Table};
use crate::layout::{wiring, RankLayout};
use crate::memo::PlanMemo;
use crate::planner::{connect, staging_bytes};
use crate::ring::RingOrder;
use crate::state::CommState;
use cudarc::driver::CudaContext;
use ringreduce_kernels::abi::{BLOCK_THREADS, GPU_THREADS};
use ringreduce_kernels::catalogue::Args;
use ringreduce_kernels::StatusRecord;
use std::sync::{Arc, Mutex};

/// The backend's name in a job's offers.
const BACKEND: &str = "gpu";

/// A rank of a job before it meets its peers: its device, kernels and
/// exported area.
pub struct Joining {
    rank: usize,
    ctx: Arc<CudaContext>,
    kernels: Arc<Kernels>,
    area: DeviceAlloc,
    layout: RankLayout,
    uuid: [u8; 16],
}

/// What bounds one process's launches: one rank each, and as many grids
/// resident as the device takes.
fn fit(device: usize) -> Fit {
    Fit {
        device,
        threads: BLOCK_THREADS as usize,
        batch: 1,
        grids: MAX_RESIDENT_GRIDS,
    }
}

/// Says once per process that `n` processes share this GPU by time
/// slices: every step between them then waits for a slice (milliseconds,
/// against microseconds under MPS). Correct, only slow.
fn warn_time_sliced(n: usize) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        eprintln!(
            "ringreduce: {n} processes of this job share one GPU without MPS: they run by time \
             slices, and every step between them waits for one (start nvidia-cuda-mps-control -d \
             for kernels that run at once)"
        )
    });
}

/// Rank `rank` on `device`: its area, exported, and its offer. The area
/// holds the channels its device fits for one process; the job runs the
/// fewest that fit every device with the processes it has (see [`join`]).
pub fn prepare(
    rank: usize,
    device: usize,
    config: &CommConfig,
    _job: u64,
) -> Result<(Joining, Offer, [u8; 16])> {
    let staging = staging_bytes(config.buffer_bytes, GPU_THREADS)?;
    let ctx = open_device(device)?;
    let kernels = Kernels::of(&ctx)?;
    let blocks = resident_by_bounds(&ctx, Args::Batch)?;
    let channels = channels_that_fit(blocks, 1, config.channels, fit(device))?;
    let half = config.effective_direct_bytes();
    let layout = RankLayout::new(channels, staging, half);
    let area = DeviceAlloc::zeroed(&ctx, layout.bytes as usize)?;
    let handle = ipc_handle(&area)?;
    let mut offer = Offer::new(BACKEND, config, channels, staging, half, handle.to_vec());
    offer.resident_blocks = blocks as u64;
    let uuid = device_uuid(&ctx)?;
    Ok((
        Joining {
            rank,
            ctx,
            kernels,
            area,
            layout,
            uuid,
        },
        offer,
        uuid,
    ))
}

/// The rank of `table`, with every peer's area mapped.
pub fn join(j: Joining, table: &Table, config: CommConfig) -> Result<Inner> {
    let world = table.world();
    let ring = RingOrder::for_ranks(config.ring_order.as_deref(), world)?;
    // Every rank works this out alike from the table: the channels that
    // fit each device with every process on it, since all their blocks
    // wait on each other and must be resident at once (under MPS they
    // share the SMs). A configured count that does not fit them all is a
    // typed error, as for ranks of one process.
    let mut channels = table.channels;
    for (u, id) in table.ids.iter().enumerate() {
        let here = table.ids.iter().filter(|x| x.device == id.device).count();
        let blocks = table.offers[u].resident_blocks as usize;
        channels = channels.min(channels_that_fit(blocks, here, config.channels, fit(u))?);
    }
    let sharing = table.ids.iter().filter(|x| x.device == j.uuid).count();
    if sharing > 1 && !mps_enabled(&j.ctx) {
        warn_time_sliced(sharing);
    }
    let spans = table.ids.iter().any(|x| x.device != j.uuid);
    let o = &table.offers[j.rank];
    let staging = o.staging_bytes;
    // Across devices the ring only, as for one process.
    let half = if spans { 0 } else { o.direct_half };
    let mut mapped = Vec::with_capacity(world.saturating_sub(1));
    let mut areas = Vec::with_capacity(world);
    for (u, offer) in table.offers.iter().enumerate() {
        if u == j.rank {
            areas.push((j.area.ptr, j.layout));
            continue;
        }
        let m = IpcMapping::open(&j.ctx, &offer.handle)?;
        let layout = RankLayout::new(offer.channels as usize, staging, offer.direct_half);
        areas.push((m.ptr, layout));
        mapped.push(m);
    }
    let state = CommState::new(ring, config, channels, staging, half, 0)?.in_job(j.rank);
    let me = new_rank(&j.ctx, &state.ring, j.area, half > 0, world)?;
    write_peers(std::slice::from_ref(&me), &areas)?;
    let host = MappedHost::zeroed(&j.ctx, 1 + channels * StatusRecord::WORDS)?;
    let first = j.rank;
    let status = |u: usize, c: u64| {
        if u == first {
            record_at(&host, c)
        } else {
            0
        }
    };
    let (table_at, peers_at) = (
        me.user_from_ring.ptr,
        me.direct_peers.as_ref().map_or(0, |t| t.ptr),
    );
    let wiring = wiring(&areas, channels, |_| table_at, status, |_| peers_at);
    let conns = connect(&state.ring, &wiring, state.statics(host.device, spans));
    write_conn(&me, &conns[first])?;
    let resident_blocks = table.offers[first].resident_blocks as usize;
    Ok(Inner {
        state,
        conns: vec![me.conn.ptr],
        groups: vec![Group::new(&j.ctx, vec![0])?],
        ranks: vec![me],
        kernels: vec![j.kernels],
        host,
        launch: Mutex::new(vec![None]),
        memo: Mutex::new(PlanMemo::default()),
        resident_blocks,
        peers: Mutex::new(mapped),
    })
}
