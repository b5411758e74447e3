//! Enqueuing a planned collective: one grid per group of ranks that share a
//! device (a [`Batch`] of up to [`BATCH_RANKS`] ranks, `channels` blocks
//! each), in stream order with those ranks' earlier collectives.
//!
//! Virtual ranks on one GPU so cost one launch, not one per rank, and they
//! may share a stream (a CUDA graph captures one). Where their streams
//! differ, events order the launch: every rank's stream, then the launch on
//! the first rank's stream, then every rank's stream again. Nothing waits
//! on the host.

use super::driver;
use super::inner::{Group, Inner};
use crate::error::{Error, Result};
use crate::planner::Plan;
use cudarc::driver::{sys, CudaStream};
use ringreduce_kernels::abi::{Batch, LocalArgs, Work};
use ringreduce_kernels::catalogue::{self, Args, COLLECTIVE_ENTRIES};
use ringreduce_kernels::grad::abi::{Task, TaskKind, TASK_THREADS};
use ringreduce_kernels::{DataType, Op};
use std::borrow::Cow;
use std::sync::Arc;

/// Enqueues `plan` on `streams` (one per user rank). A failed launch
/// breaks the communicator: the ranks already launched cannot finish.
pub fn enqueue(
    inner: &Inner,
    plan: &Plan,
    dtype: DataType,
    op: Op,
    streams: &[Arc<CudaStream>],
) -> Result<()> {
    let mut last = inner.launch.lock().unwrap_or_else(|e| e.into_inner());
    match plan {
        Plan::Nothing => Ok(()),
        Plan::Copy { send, recv, bytes } => {
            hand_over(&mut last[0], &streams[0])?;
            inner.ranks[0].ctx.bind_to_thread()?;
            // SAFETY: validated addresses on this device.
            unsafe {
                driver::copy_dtod_async(*recv, *send, *bytes as usize, streams[0].cu_stream())?
            };
            Ok(())
        }
        Plan::Launch { works, .. } => {
            // The kernel first, on every device of the call: a first call
            // loads (and may JIT-compile) it, and a failure here leaves no
            // rank launched, so the communicator stays usable.
            let entry = entry_of(works, dtype, op)?;
            for g in &inner.groups {
                inner.kernels[g.ranks[0]].collective(entry)?;
            }
            inner.state.note_launch(works);
            // The hook names a user rank; groups count the ranks here.
            let withhold = inner
                .state
                .hooks()
                .withhold_rank
                .and_then(|w| w.checked_sub(inner.state.local.start));
            for g in &inner.groups {
                // The test hook aside, every rank of the group.
                let members: Cow<'_, [usize]> = match withhold {
                    Some(w) if g.ranks.contains(&w) => {
                        Cow::Owned(g.ranks.iter().copied().filter(|&u| u != w).collect())
                    }
                    _ => Cow::Borrowed(&g.ranks),
                };
                if members.is_empty() {
                    continue;
                }
                let r = members
                    .iter()
                    .try_for_each(|&u| hand_over(&mut last[u], &streams[u]))
                    .and_then(|()| launch(inner, g, &members, works, entry, streams));
                if let Err(e) = r {
                    inner.state.mark_broken(&e);
                    return Err(e);
                }
            }
            Ok(())
        }
    }
}

/// The index in `catalogue::COLLECTIVE_ENTRIES` of the entry that runs
/// `works` (every rank's has one collective and algorithm) on `dtype`
/// with `op`.
fn entry_of(works: &[Work], dtype: DataType, op: Op) -> Result<usize> {
    works
        .first()
        .and_then(|w| catalogue::entry_of_work(w, dtype, op))
        .ok_or_else(|| Error::Broken("internal: a launch no entry runs".into()))
}

/// Launches the grid of `members` (ranks of group `g`) on the first
/// member's stream, ordered after and before every member's stream, with
/// collective entry `entry` (see [`entry_of`]).
fn launch(
    inner: &Inner,
    g: &Group,
    members: &[usize],
    works: &[Work],
    entry: usize,
    streams: &[Arc<CudaStream>],
) -> Result<()> {
    let lead = members[0];
    let on = streams[lead].cu_stream();
    // Usually every rank, in order: then the plan's own list.
    let picked: Cow<'_, [Work]> = if members.iter().copied().eq(0..works.len()) {
        Cow::Borrowed(works)
    } else {
        Cow::Owned(members.iter().map(|&u| works[u]).collect())
    };
    let not_one = || {
        Error::Broken(format!(
            "internal: a launch of {} ranks does not make one batch",
            picked.len()
        ))
    };
    let blocks = Batch::grid(&picked).ok_or_else(not_one)?;
    // Each other stream once, in the order the members name them.
    let mut others: Vec<sys::CUstream> = Vec::new();
    for &u in &members[1..] {
        let s = streams[u].cu_stream();
        if s != on && !others.contains(&s) {
            others.push(s);
        }
    }
    inner.ranks[lead].ctx.bind_to_thread()?;
    let e = &COLLECTIVE_ENTRIES[entry];
    let f = inner.kernels[lead].collective(entry)?;
    // A local call (every rank of the communicator in this one batch, see
    // the planner) runs its own entry with its small argument; only the
    // others build the 2.5 KB batch.
    let mut arg = if e.args == Args::Local {
        let args = (picked.len() == works.len())
            .then(|| LocalArgs::new(&picked, blocks))
            .flatten();
        Arg::Local(args.ok_or_else(|| {
            Error::Broken(format!(
                "internal: a local call of {} ranks launched {} of them",
                works.len(),
                picked.len()
            ))
        })?)
    } else {
        Arg::Batch(Batch::new(&picked).ok_or_else(not_one)?)
    };
    // SAFETY: the events are live and on this context; each kernel takes
    // its one argument by value, which the driver copies at launch.
    unsafe {
        for (&s, ev) in others.iter().zip(&g.arrive) {
            ev.order(s, on)?;
        }
        match &mut arg {
            Arg::Local(a) => driver::launch(f, blocks as u32, e.threads, on, a)?,
            Arg::Batch(b) => driver::launch(f, blocks as u32, e.threads, on, b)?,
        }
        if !others.is_empty() {
            g.done.record(on)?;
            for &s in &others {
                g.done.wait_on(s)?;
            }
        }
    }
    Ok(())
}

/// A launch's one by-value argument. It lives on the stack for one launch:
/// boxing the larger variant would allocate on every call.
#[allow(clippy::large_enum_variant)]
enum Arg {
    Local(LocalArgs),
    Batch(Batch),
}

/// Keeps one rank's collectives in order when the caller switches streams:
/// the new stream waits for everything the last one had queued. With the
/// same stream every time, stream order already does this.
fn hand_over(last: &mut Option<Arc<CudaStream>>, next: &Arc<CudaStream>) -> Result<()> {
    if let Some(prev) = last.as_ref() {
        if prev.cu_stream() == next.cu_stream() {
            // The usual case, every call: no event, and no reference count
            // to touch.
            return Ok(());
        }
        let e = prev.record_event(None)?;
        next.wait(&e)?;
    }
    *last = Some(next.clone());
    Ok(())
}

/// Blocks of a task's GPU launch: one for the one-block kinds, one per
/// descriptor (up to 1024) for the copy, four 16-byte words a thread for
/// the single range, a block per 256 tiles for the
/// compaction, and otherwise enough for 4 elements a thread, up to 1056
/// blocks (8 per SM of an H200). No result depends on it.
pub fn task_blocks(task: &Task) -> u32 {
    let threads = TASK_THREADS as u64;
    let blocks = match TaskKind::from_u64(task.kind) {
        None => 1,
        Some(k) if k.one_block() => 1,
        Some(TaskKind::Copy) => task.n.min(1024),
        Some(TaskKind::CopyRange) => task.n.div_ceil(64 * threads).min(1056),
        Some(TaskKind::CountTiles) => task.tiles.div_ceil(threads),
        Some(TaskKind::WriteSelected) => task
            .tiles
            .div_ceil(threads)
            .max(task.arg.min(1 << 30).div_ceil(4 * threads).min(1056)),
        Some(_) => task.n.div_ceil(4 * threads).min(1056),
    };
    blocks.max(1) as u32
}

/// Launches the gradient layer's `task` for local rank `rank` on `stream`.
///
/// # Safety
/// Every address in `task` must be valid on that rank's device for what
/// the task does, until it has run.
pub(crate) unsafe fn launch_task(
    inner: &Inner,
    rank: usize,
    stream: &CudaStream,
    mut task: Task,
) -> Result<()> {
    inner.ranks[rank].ctx.bind_to_thread()?;
    let f = inner.kernels[rank].other(&catalogue::TASK)?;
    let blocks = task_blocks(&task);
    // SAFETY: the caller's promise; the argument is copied at launch.
    unsafe {
        driver::launch(
            f,
            blocks,
            catalogue::TASK.threads,
            stream.cu_stream(),
            &mut task,
        )
    }
}
