//! The step between nodes over NCCL, for GPU ranks: the ranks of one
//! local index, one per node, form an NCCL communicator (its id made by
//! the member on node 0 and carried in the bootstrap's cards), and each
//! all-gather of the hierarchical schedule is an `ncclAllGather` of bytes
//! on a stream of the rank's own. NCCL only moves the bytes; the caller
//! folds them in node order, so the order is ours whatever NCCL's
//! algorithm. While it waits, the call polls the stream, NCCL's
//! asynchronous error, the abort flag and the timeout; on any of the last
//! three it aborts the NCCL communicator (`ncclCommAbort`), so no rank is
//! left inside NCCL.

use super::library::{nccl, Nccl};
use crate::across::Across;
use crate::bootstrap::POLL;
use crate::error::{Error, Result};
use crate::gpu::driver::DeviceAlloc;
use cudarc::driver::sys::{self, CUresult};
use cudarc::driver::{CudaContext, CudaStream};
use cudarc::nccl::sys::{ncclComm_t, ncclDataType_t, ncclResult_t, ncclUniqueId};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Bytes of an NCCL unique id, as cards carry it.
pub(crate) const ID_BYTES: usize = 128;

/// A new NCCL unique id, as bytes for the cards.
pub(crate) fn new_id() -> Result<Vec<u8>> {
    let n = nccl()?;
    let mut id = ncclUniqueId {
        internal: [0; ID_BYTES],
    };
    // SAFETY: `id` is a valid out-pointer.
    n.check(
        "ncclGetUniqueId",
        unsafe { (n.get_unique_id)(&mut id) },
        None,
    )?;
    Ok(id.internal.iter().map(|&c| c as u8).collect())
}

/// The NCCL communicator, while it lives (taken by the abort or the drop).
struct Live(ncclComm_t);

// SAFETY: an NCCL communicator may be used from any thread; the mutex
// below keeps calls on it one at a time.
unsafe impl Send for Live {}

/// One member's NCCL link to the others of its local index.
pub(crate) struct NcclAcross {
    n: &'static Nccl,
    comm: Mutex<Option<Live>>,
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    /// Send and receive staging on the device, grown on demand.
    staging: Mutex<Option<(DeviceAlloc, usize)>>,
    members: usize,
    aborted: AtomicBool,
    timeout: Duration,
}

impl NcclAcross {
    /// Member `me` of `members` (one per node, in node order) joins
    /// the NCCL communicator of `id` on `ctx`'s device. NCCL's own
    /// initialisation waits for every member.
    pub fn init(
        ctx: Arc<CudaContext>,
        id: &[u8],
        me: usize,
        members: usize,
        timeout: Duration,
    ) -> Result<NcclAcross> {
        let n = nccl()?;
        let internal: [u8; ID_BYTES] = id.try_into().map_err(|_| {
            Error::Rendezvous(format!("an NCCL id of {} bytes, not {ID_BYTES}", id.len()))
        })?;
        let id = ncclUniqueId {
            internal: internal.map(|b| b as _),
        };
        ctx.bind_to_thread()?;
        let stream = ctx.new_stream()?;
        let mut comm: ncclComm_t = std::ptr::null_mut();
        // SAFETY: `comm` is a valid out-pointer; the context is bound.
        let r = unsafe { (n.comm_init_rank)(&mut comm, members as i32, id, me as i32) };
        n.check("ncclCommInitRank", r, None)?;
        Ok(NcclAcross {
            n,
            comm: Mutex::new(Some(Live(comm))),
            ctx,
            stream,
            staging: Mutex::new(None),
            members,
            aborted: AtomicBool::new(false),
            timeout,
        })
    }

    /// Ends the NCCL communicator at once (`ncclCommAbort`), if it lives.
    fn end(&self, comm: &mut Option<Live>) {
        if let Some(Live(c)) = comm.take() {
            // SAFETY: `c` lives until this call, which frees it.
            unsafe { (self.n.comm_abort)(c) };
        }
    }

    /// Waits for the stream's work, polling NCCL's asynchronous error,
    /// the abort flag and the timeout; on any of them, ends NCCL.
    fn wait(&self, comm: &mut Option<Live>, started: Instant) -> Result<()> {
        loop {
            // SAFETY: a live stream of this context.
            match unsafe { sys::cuStreamQuery(self.stream.cu_stream()) } {
                CUresult::CUDA_SUCCESS => return Ok(()),
                CUresult::CUDA_ERROR_NOT_READY => {}
                e => {
                    self.end(comm);
                    return Err(Error::Driver(format!("the step between nodes: {e:?}")));
                }
            }
            if let Some(Live(c)) = comm {
                let mut async_err = ncclResult_t::ncclSuccess;
                // SAFETY: a live communicator and a valid out-pointer.
                let r = unsafe { (self.n.comm_get_async_error)(*c, &mut async_err) };
                let bad = self
                    .n
                    .check("ncclCommGetAsyncError", r, Some(*c))
                    .and_then(|_| self.n.check("ncclAllGather", async_err, Some(*c)));
                if let Err(e) = bad {
                    self.end(comm);
                    return Err(e);
                }
            }
            if self.aborted.load(Ordering::Acquire) {
                self.end(comm);
                return Err(Error::Aborted { seen: None });
            }
            if started.elapsed() >= self.timeout {
                self.end(comm);
                return Err(Error::Bootstrap(format!(
                    "the step between nodes (NCCL) made no progress within {:?}",
                    self.timeout
                )));
            }
            std::thread::sleep(POLL);
        }
    }
}

impl Across for NcclAcross {
    fn members(&self) -> usize {
        self.members
    }

    fn all_gather(&self, mine: &[u8], all: &mut [u8]) -> Result<()> {
        let started = Instant::now();
        let mut comm = self.comm.lock().unwrap_or_else(|e| e.into_inner());
        let Some(Live(c)) = comm.as_ref() else {
            return Err(Error::Aborted { seen: None });
        };
        let c = *c;
        let bytes = mine.len();
        if bytes == 0 {
            return Ok(());
        }
        self.ctx.bind_to_thread()?;
        let need = bytes * (self.members + 1);
        let mut staging = self.staging.lock().unwrap_or_else(|e| e.into_inner());
        if staging.as_ref().is_none_or(|(_, len)| *len < need) {
            *staging = Some((DeviceAlloc::zeroed(&self.ctx, need)?, need));
        }
        let base = staging.as_ref().expect("just made").0.ptr;
        let (send, recv) = (base, base + bytes as u64);
        // SAFETY: `send` holds `bytes`, `recv` `members * bytes`; the
        // copies are synchronous and the gather is waited for below.
        unsafe { cudarc::driver::result::memcpy_htod_sync(send, mine)? };
        let r = unsafe {
            (self.n.all_gather)(
                send as *const _,
                recv as *mut _,
                bytes,
                ncclDataType_t::ncclUint8,
                c,
                self.stream.cu_stream() as _,
            )
        };
        if let Err(e) = self.n.check("ncclAllGather", r, Some(c)) {
            self.end(&mut comm);
            return Err(e);
        }
        self.wait(&mut comm, started)?;
        // SAFETY: the gather is done; `recv` holds `all.len()` bytes.
        unsafe { cudarc::driver::result::memcpy_dtoh_sync(all, recv)? };
        Ok(())
    }

    /// Raises the flag a waiting call polls; the call (or the drop) ends
    /// NCCL, so NCCL is never freed under a call.
    fn abort(&self) {
        self.aborted.store(true, Ordering::Release);
    }
}

impl Drop for NcclAcross {
    fn drop(&mut self) {
        let comm = self.comm.get_mut().unwrap_or_else(|e| e.into_inner());
        if let Some(Live(c)) = comm.take() {
            let _ = self.ctx.bind_to_thread();
            // SAFETY: no call is in flight (we own `self`); destroying
            // flushes NCCL's work, aborting does not wait.
            unsafe {
                if self.aborted.load(Ordering::Acquire) {
                    (self.n.comm_abort)(c);
                } else {
                    (self.n.comm_destroy)(c);
                }
            }
        }
    }
}
