//! The step between nodes over NCCL, for GPU ranks: the ranks of one
//! local index, one per node, form an NCCL communicator (its id made by
//! the member on node 0 and carried in the bootstrap's cards), and each
//! all-gather of the hierarchical schedule is an `ncclAllGather` of bytes
//! on the link's stream. NCCL only moves the bytes; the caller folds them
//! in node order, so the order is ours whatever NCCL's algorithm.

use super::link::Link;
use crate::across::Across;
use crate::error::Result;
use crate::gpu::driver::DeviceAlloc;
use cudarc::driver::CudaContext;
use cudarc::nccl::sys::ncclDataType_t;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One member's NCCL link to the others of its local index.
pub(crate) struct NcclAcross {
    link: Link,
    /// Send and receive staging on the device, grown on demand.
    staging: Mutex<Option<(DeviceAlloc, usize)>>,
    members: usize,
}

impl NcclAcross {
    /// Member `me` of `members` (one per node, in node order) joins the
    /// NCCL communicator of `id` on `ctx`'s device.
    pub fn init(
        ctx: Arc<CudaContext>,
        id: &[u8],
        me: usize,
        members: usize,
        timeout: Duration,
    ) -> Result<NcclAcross> {
        Ok(NcclAcross {
            link: Link::init(ctx, id, me, members, timeout)?,
            staging: Mutex::new(None),
            members,
        })
    }
}

impl Across for NcclAcross {
    fn members(&self) -> usize {
        self.members
    }

    fn all_gather(&self, mine: &[u8], all: &mut [u8]) -> Result<()> {
        let bytes = mine.len();
        if bytes == 0 {
            return Ok(());
        }
        let ctx = &self.link.ctx;
        ctx.bind_to_thread()?;
        let need = bytes * (self.members + 1);
        let mut staging = self.staging.lock().unwrap_or_else(|e| e.into_inner());
        if staging.as_ref().is_none_or(|(_, len)| *len < need) {
            *staging = Some((DeviceAlloc::zeroed(ctx, need)?, need));
        }
        let base = staging.as_ref().expect("just made").0.ptr;
        let (send, recv) = (base, base + bytes as u64);
        // SAFETY: `send` holds `bytes`; the copy is synchronous.
        unsafe { cudarc::driver::result::memcpy_htod_sync(send, mine)? };
        let n = self.link.n;
        self.link.enqueue("ncclAllGather", |c, s| {
            // SAFETY: `recv` holds `members * bytes`, waited for below.
            unsafe {
                (n.all_gather)(
                    send as *const _,
                    recv as *mut _,
                    bytes,
                    ncclDataType_t::ncclUint8,
                    c,
                    s as _,
                )
            }
        })?;
        self.link.wait()?;
        // SAFETY: the gather is done; `recv` holds `all.len()` bytes.
        unsafe { cudarc::driver::result::memcpy_dtoh_sync(all, recv)? };
        Ok(())
    }

    fn abort(&self) {
        self.link.abort();
    }
}
