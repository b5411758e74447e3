//! Creating a GPU communicator's resources: the devices and their links,
//! the ring, the kernels, how many channels stay co-resident, and each
//! rank's staging, flags, ring table and connection in device memory.

use super::driver::{self, enable_peer_access, open_device, p2p_link, DeviceAlloc, MappedHost};
use super::inner::{launch_groups, Group, Inner, Rank};
use super::module::Kernels;
use crate::channels::{channels_that_fit, Fit};
use crate::config::CommConfig;
use crate::error::{Error, Result};
use crate::layout::{direct_peers, wiring, RankLayout};
use crate::memo::PlanMemo;
use crate::planner::connect;
use crate::ring::RingOrder;
use crate::state::CommState;
use crate::topology::{check_ring, ring_from_topology};
use cudarc::driver::{CudaContext, CudaFunction};
use ringreduce_kernels::abi::{
    DirectPeer, RankConn, BATCH_RANKS, BLOCK_THREADS, GPU_THREADS, MAX_CHANNELS,
};
use ringreduce_kernels::catalogue::{Args, COLLECTIVE_ENTRIES};
use ringreduce_kernels::{DataType, StatusRecord};
use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

/// Kernels that can be resident on one device at once (compute capability
/// 7.0 and newer): one launch per [`BATCH_RANKS`] ranks there.
pub(super) const MAX_RESIDENT_GRIDS: usize = 128;

/// Sets up `devices.len()` ranks, user rank `u` on `devices[u]`.
pub fn create(devices: &[usize], config: CommConfig) -> Result<Inner> {
    let k = devices.len();
    if k == 0 {
        return Err(Error::ZeroRanks);
    }
    // Validated before any device is opened; kept when the config names it.
    let given = RingOrder::for_ranks(config.ring_order.as_deref(), k)?;
    if let Some(b) = config.buffer_bytes {
        crate::planner::sizing(DataType::U8, b, GPU_THREADS, true)?;
    }
    let ctxs = open_devices(devices)?;
    let ring = ring_for(devices, &ctxs, &config, given)?;
    let mut kernels_of = HashMap::new();
    let mut max_channels = MAX_CHANNELS;
    let mut most_here = 1;
    let mut resident_blocks = usize::MAX;
    let mut local_resident = usize::MAX;
    for (&d, ctx) in &ctxs {
        // Nothing is loaded yet: each kernel is, by the first call that
        // runs it, and its launch bounds say how many of its blocks fit.
        let kernels = Kernels::of(ctx)?;
        let (here, blocks, channels) = device_fit(ctx, devices, d, &config)?;
        local_resident = local_resident.min(resident_by_bounds(ctx, Args::Local)?);
        resident_blocks = resident_blocks.min(blocks);
        max_channels = max_channels.min(channels);
        most_here = most_here.max(here);
        kernels_of.insert(d, kernels);
    }
    let buffer = config.gpu_staging_bytes(most_here * max_channels);
    // Direct collectives read every peer's staging; across devices that
    // needs peer access between every pair, which is not set up yet, so
    // ranks that span devices use the ring only.
    let half = if ctxs.len() > 1 {
        0
    } else {
        config.effective_direct_bytes()
    };
    let layout = RankLayout::new(max_channels, buffer, half);
    let mut ranks = Vec::with_capacity(k);
    for &d in devices {
        let ctx = &ctxs[&d];
        let area = DeviceAlloc::zeroed(ctx, layout.bytes as usize)?;
        ranks.push(new_rank(ctx, &ring, area, half > 0, k)?);
    }
    let areas: Vec<(u64, RankLayout)> = ranks.iter().map(|r| (r.area.ptr, layout)).collect();
    write_peers(&ranks, &areas)?;
    // Portable, and at one address in every context (unified addressing),
    // so every rank's kernel reaches the same words.
    let records = k * max_channels;
    let host = MappedHost::zeroed(&ctxs[&devices[0]], 1 + records * StatusRecord::WORDS)?;
    let status = |u: usize, c: u64| record_at(&host, (u * max_channels) as u64 + c);
    let wiring = wiring(
        &areas,
        max_channels,
        |u| ranks[u].user_from_ring.ptr,
        status,
        |u| ranks[u].direct_peers.as_ref().map_or(0, |t| t.ptr),
    );
    let spans = ctxs.len() > 1;
    // One launch runs every rank when they share a device (and one batch
    // holds them, which `CommState` checks); a local call then fills the
    // device once.
    let local_blocks = if spans { 0 } else { local_resident as u64 };
    let state = CommState::new(ring, config, max_channels, buffer, half, local_blocks)?;
    let conns = connect(&state.ring, &wiring, state.statics(host.device, spans));
    for (r, c) in ranks.iter().zip(&conns) {
        write_conn(r, c)?;
    }
    Ok(Inner {
        state,
        conns: ranks.iter().map(|r| r.conn.ptr).collect(),
        ranks,
        kernels: devices.iter().map(|d| kernels_of[d].clone()).collect(),
        host,
        launch: Mutex::new(vec![None; k]),
        memo: Mutex::new(PlanMemo::default()),
        groups: launch_groups(devices)
            .into_iter()
            .map(|ranks| Group::new(&ctxs[&devices[ranks[0]]], ranks))
            .collect::<Result<_>>()?,
        resident_blocks,
        peers: Mutex::new(Vec::new()),
    })
}

/// A rank on `ctx` with its `area`: its ring table, its connection and
/// (with `direct` staging) its table of the `k` ranks' direct areas, all
/// zeroed but the ring table.
pub(super) fn new_rank(
    ctx: &Arc<CudaContext>,
    ring: &RingOrder,
    area: DeviceAlloc,
    direct: bool,
    k: usize,
) -> Result<Rank> {
    let table: Vec<u8> = ring
        .user_from_ring()
        .iter()
        .flat_map(|u| u.to_ne_bytes())
        .collect();
    let user_from_ring = DeviceAlloc::zeroed(ctx, table.len())?;
    // SAFETY: the allocation holds exactly the table.
    unsafe { driver::copy_htod(user_from_ring.ptr, &table)? };
    Ok(Rank {
        ctx: ctx.clone(),
        area,
        user_from_ring,
        conn: DeviceAlloc::zeroed(ctx, std::mem::size_of::<RankConn>())?,
        direct_peers: if direct {
            Some(DeviceAlloc::zeroed(
                ctx,
                k * std::mem::size_of::<DirectPeer>(),
            )?)
        } else {
            None
        },
    })
}

/// Every rank's table of the direct areas of `areas` (see
/// [`direct_peers`]), where it has one.
pub(super) fn write_peers(ranks: &[Rank], areas: &[(u64, RankLayout)]) -> Result<()> {
    let peers = direct_peers(areas);
    for t in ranks.iter().filter_map(|r| r.direct_peers.as_ref()) {
        // SAFETY: `DirectPeer` is plain `repr(C)` data and the allocation
        // holds exactly one per rank.
        let bytes = unsafe {
            std::slice::from_raw_parts(
                peers.as_ptr() as *const u8,
                std::mem::size_of_val(peers.as_slice()),
            )
        };
        // SAFETY: as above.
        unsafe { driver::copy_htod(t.ptr, bytes)? };
    }
    Ok(())
}

/// Where status record `i` of `host` is, as the kernels address it (word
/// 0 is the abort word).
pub(super) fn record_at(host: &MappedHost, i: u64) -> u64 {
    host.device + 8 + i * (StatusRecord::WORDS * 8) as u64
}

/// Writes rank `r`'s connection where its kernel reads it.
pub(super) fn write_conn(r: &Rank, c: &RankConn) -> Result<()> {
    // SAFETY: `RankConn` is plain `repr(C)` data and the allocation holds
    // exactly one.
    let bytes = unsafe {
        std::slice::from_raw_parts(
            c as *const RankConn as *const u8,
            std::mem::size_of::<RankConn>(),
        )
    };
    // SAFETY: as above.
    unsafe { driver::copy_htod(r.conn.ptr, bytes) }
}

/// The ring: the configured order, checked against the links, or one that
/// follows the links; and peer access between every pair of neighbours on
/// two devices.
fn ring_for(
    devices: &[usize],
    ctxs: &BTreeMap<usize, Arc<CudaContext>>,
    config: &CommConfig,
    given: RingOrder,
) -> Result<RingOrder> {
    let k = devices.len();
    let mut links = HashMap::new();
    for (&a, ca) in ctxs {
        for (&b, cb) in ctxs {
            if a != b {
                links.insert((a, b), p2p_link(ca, cb)?);
            }
        }
    }
    let link = |a: usize, b: usize| links[&(a, b)];
    let ring = if config.ring_order.is_some() {
        check_ring(devices, &given, link)?;
        given
    } else {
        ring_from_topology(devices, link)?
    };
    let ufr = ring.user_from_ring();
    for p in 0..k {
        let (a, b) = (devices[ufr[p] as usize], devices[ufr[(p + 1) % k] as usize]);
        if a != b {
            enable_peer_access(&ctxs[&a], &ctxs[&b])?;
            enable_peer_access(&ctxs[&b], &ctxs[&a])?;
        }
    }
    Ok(ring)
}

/// Blocks of the collective entries that take `args` that fit on the
/// device at once, by their launch bounds: the fewest blocks per SM any
/// of them promises, times the multiprocessors. No kernel need be loaded:
/// ptxas keeps the promise (its registers), and the loader checks it.
pub(super) fn resident_by_bounds(ctx: &Arc<CudaContext>, args: Args) -> Result<usize> {
    let sms = driver::sm_count(ctx)?;
    let per_sm = COLLECTIVE_ENTRIES
        .iter()
        .filter(|e| e.args == args)
        .map(|e| e.min_blocks_per_sm as usize)
        .min()
        .unwrap_or(0);
    Ok(per_sm * sms)
}

/// Blocks of `kernels`, launched `threads` wide, that fit on the device at
/// once: the least occupancy of any of them, times the multiprocessors.
/// The bench sizes its device-copy grid with it.
pub fn resident_blocks_of<'a>(
    ctx: &Arc<CudaContext>,
    kernels: impl Iterator<Item = &'a CudaFunction>,
    threads: u32,
) -> Result<usize> {
    let sms = driver::sm_count(ctx)?;
    let mut per_sm = usize::MAX;
    for f in kernels {
        per_sm = per_sm.min(driver::blocks_per_sm(f, threads)?);
    }
    Ok(per_sm * sms)
}

/// The devices of a placement, each opened once.
fn open_devices(devices: &[usize]) -> Result<BTreeMap<usize, Arc<CudaContext>>> {
    let mut ctxs = BTreeMap::new();
    for &d in devices {
        if let Entry::Vacant(e) = ctxs.entry(d) {
            e.insert(open_device(d)?);
        }
    }
    Ok(ctxs)
}

/// One device `d` of a placement: the ranks on it, the blocks of the
/// collective entries that fit on it at once, and the channels per rank
/// that leaves (or `config`'s, checked).
fn device_fit(
    ctx: &Arc<CudaContext>,
    devices: &[usize],
    d: usize,
    config: &CommConfig,
) -> Result<(usize, usize, usize)> {
    let here = devices.iter().filter(|&&x| x == d).count();
    let blocks = resident_by_bounds(ctx, Args::Batch)?;
    let fit = Fit {
        device: ctx.ordinal(),
        threads: BLOCK_THREADS as usize,
        batch: BATCH_RANKS,
        grids: MAX_RESIDENT_GRIDS,
    };
    let channels = channels_that_fit(blocks, here, config.channels, fit)?;
    Ok((here, blocks, channels))
}

/// The most channels per rank of a placement whose devices are `ctxs`:
/// what [`create`] gives when the config names none.
fn max_of(ctxs: &BTreeMap<usize, Arc<CudaContext>>, devices: &[usize]) -> Result<usize> {
    let mut max = MAX_CHANNELS;
    for (&d, ctx) in ctxs {
        max = max.min(device_fit(ctx, devices, d, &CommConfig::default())?.2);
    }
    Ok(max)
}

/// [`max_of`] for a placement, before any communicator exists.
pub fn max_channels_for(devices: &[usize]) -> Result<usize> {
    if devices.is_empty() {
        return Err(Error::ZeroRanks);
    }
    max_of(&open_devices(devices)?, devices)
}
