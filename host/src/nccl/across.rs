//! The step between nodes over NCCL, for GPU ranks: the ranks of one
//! local index, one per node, form an NCCL communicator (its id made by
//! the member on node 0 and carried in the bootstrap's cards), and each
//! all-gather of the hierarchical schedule is an `ncclAllGather` of bytes
//! on the link's stream. NCCL only moves the bytes; the caller folds them
//! in node order, so the order is ours whatever NCCL's algorithm.

use super::link::Link;
use crate::across::{Across, Ticket};
use crate::error::{Error, Result};
use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr};
use cudarc::nccl::sys::ncclDataType_t;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One member's NCCL link to the others of its local index.
pub(crate) struct NcclAcross {
    link: Link,
    /// The stream of the rank's own work, which a queued step waits for
    /// and is joined by.
    rank: Arc<CudaStream>,
    /// Send and receive staging on the device, grown on demand.
    staging: Mutex<Option<CudaSlice<u8>>>,
    members: usize,
    /// The other members' ranks in the job, which a step that makes no
    /// progress names (NCCL does not say which one it waits on).
    others: Vec<usize>,
}

impl NcclAcross {
    /// Member `me` of `group` (the members' job ranks, one per node, in
    /// node order) joins the NCCL communicator of `id` on `ctx`'s device;
    /// `rank` is the stream the rank's own work runs on.
    pub fn init(
        ctx: Arc<CudaContext>,
        rank: Arc<CudaStream>,
        id: &[u8],
        me: usize,
        group: &[usize],
        timeout: Duration,
    ) -> Result<NcclAcross> {
        let members = group.len();
        Ok(NcclAcross {
            link: Link::init(ctx, id, me, members, timeout)?,
            rank,
            staging: Mutex::new(None),
            members,
            others: (0..members)
                .filter(|&m| m != me)
                .map(|m| group[m])
                .collect(),
        })
    }

    /// Waits for the link's work; a step that made no progress names the
    /// members it may be waiting on.
    fn wait(&self) -> Result<()> {
        self.link.wait().map_err(|e| match e {
            Error::NoProgress { waited, .. } => Error::NoProgress {
                what: format!(
                    "the step between nodes over NCCL ({})",
                    waiting_on(&self.others)
                ),
                waited,
            },
            e => e,
        })
    }
}

/// How a step that made no progress names the members it waits on: as the
/// test stand-in does with one other member, else all of them.
fn waiting_on(others: &[usize]) -> String {
    match others {
        [one] => format!("waiting on rank {one}"),
        more => {
            let ranks: Vec<String> = more.iter().map(usize::to_string).collect();
            format!("waiting on one of ranks {}", ranks.join(", "))
        }
    }
}

impl Across for NcclAcross {
    fn members(&self) -> usize {
        self.members
    }

    /// Through device staging: the bytes go up, NCCL gathers them, and
    /// every member's come back.
    fn all_gather(&self, mine: &[u8], all: &mut [u8]) -> Result<()> {
        let bytes = mine.len();
        if bytes == 0 {
            return Ok(());
        }
        self.link.ctx.bind_to_thread()?;
        let s = &self.link.stream;
        let need = bytes * (self.members + 1);
        let mut staging = self.staging.lock().unwrap_or_else(|e| e.into_inner());
        if staging.as_ref().is_none_or(|b| b.len() < need) {
            *staging = Some(s.alloc_zeros::<u8>(need)?);
        }
        let buf = staging.as_mut().expect("just made");
        s.memcpy_htod(mine, &mut buf.slice_mut(0..bytes))?;
        // The copy in must land before NCCL, on this stream, reads it.
        s.synchronize()?;
        let (base, _in_use) = buf.device_ptr(s);
        // SAFETY: `base` holds `bytes` to send, then `members * bytes` to
        // receive, and the staging lock keeps it ours.
        unsafe { self.all_gather_at(base, bytes, base + bytes as u64)? };
        s.memcpy_dtoh(&buf.slice(bytes..bytes + all.len()), all)?;
        Ok(s.synchronize()?)
    }

    /// An `ncclAllGather` of bytes on the link's stream, polled to its end
    /// so that a silent peer or an abort cannot hold the call.
    unsafe fn all_gather_at(&self, mine: u64, bytes: usize, all: u64) -> Result<()> {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.enqueue_all_gather(mine, bytes, all)? };
        self.wait()
    }

    /// On the link's stream after the rank's: the rank's queue goes on at
    /// once, and only the work it orders after [`join`](Across::join)
    /// waits for the bytes.
    unsafe fn queue_all_gather_at(
        &self,
        mine: u64,
        bytes: usize,
        all: u64,
        _drain: &dyn Fn() -> Result<()>,
    ) -> Result<Ticket> {
        if bytes == 0 {
            return Ok(Ticket::Done);
        }
        self.link.ctx.bind_to_thread()?;
        self.link.stream.join(&self.rank)?;
        // SAFETY: the caller's promise, until `settle`.
        unsafe { self.enqueue_all_gather(mine, bytes, all)? };
        Ok(Ticket::Queued(self.link.stream.record_event(None)?))
    }

    fn join(&self, ticket: &Ticket) -> Result<()> {
        match ticket {
            Ticket::Done => Ok(()),
            Ticket::Queued(ended) => Ok(self.rank.wait(ended)?),
        }
    }

    fn settle(&self) -> Result<()> {
        self.wait()
    }

    fn abort(&self) {
        self.link.abort();
    }
}

impl NcclAcross {
    /// Enqueues an `ncclAllGather` of `bytes` at `mine` into `all` on the
    /// link's stream, without waiting for it.
    ///
    /// # Safety
    /// `bytes` at `mine` and `members * bytes` at `all`, device memory of
    /// this context, until the link's stream has run it.
    unsafe fn enqueue_all_gather(&self, mine: u64, bytes: usize, all: u64) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        self.link.ctx.bind_to_thread()?;
        let n = self.link.n;
        self.link.enqueue("ncclAllGather", |c, st| {
            // SAFETY: the caller's promise: `bytes` at `mine`, `members *
            // bytes` at `all`, device memory, until the stream has run it.
            unsafe {
                (n.all_gather)(
                    mine as *const _,
                    all as *mut _,
                    bytes,
                    ncclDataType_t::ncclUint8,
                    c,
                    st as _,
                )
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::waiting_on;

    #[test]
    fn a_step_without_progress_names_the_members_it_waits_on() {
        assert_eq!(waiting_on(&[3]), "waiting on rank 3");
        assert_eq!(waiting_on(&[1, 5, 7]), "waiting on one of ranks 1, 5, 7");
    }
}
