//! One NCCL communicator and the stream its calls run on, with the one
//! way ringreduce waits for NCCL: polling the stream, NCCL's asynchronous
//! error (`ncclCommGetAsyncError`), an abort flag and the timeout, and on
//! any of the last three ending NCCL (`ncclCommAbort`), so no caller is
//! left inside NCCL. The step between nodes and the flat NCCL backend
//! both hold one.

use super::library::{nccl, Nccl};
use crate::bootstrap::POLL;
use crate::error::{Error, Result};
use cudarc::driver::sys::{self, CUresult};
use cudarc::driver::{CudaContext, CudaStream};
use cudarc::nccl::sys::{ncclComm_t, ncclResult_t, ncclUniqueId};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Bytes of an NCCL unique id, as the bootstrap carries it.
pub(crate) const ID_BYTES: usize = 128;

/// A new NCCL unique id, as bytes for the bootstrap.
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

/// The NCCL communicator while it lives (the abort or the drop takes it).
struct Live(ncclComm_t);

// SAFETY: an NCCL communicator may be used from any thread; the mutex
// around it keeps calls on it one at a time.
unsafe impl Send for Live {}

/// An NCCL communicator, its device and its stream.
pub(crate) struct Link {
    pub n: &'static Nccl,
    comm: Mutex<Option<Live>>,
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    aborted: AtomicBool,
    timeout: Duration,
}

impl Link {
    /// Member `me` of `members` joins the NCCL communicator of `id` on
    /// `ctx`'s device; NCCL's initialisation waits for every member.
    pub fn init(
        ctx: Arc<CudaContext>,
        id: &[u8],
        me: usize,
        members: usize,
        timeout: Duration,
    ) -> Result<Link> {
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
        Ok(Link {
            n,
            comm: Mutex::new(Some(Live(comm))),
            ctx,
            stream,
            aborted: AtomicBool::new(false),
            timeout,
        })
    }

    /// Enqueues `call` (named `name`) on the communicator and the stream;
    /// an error from it ends NCCL.
    pub fn enqueue(
        &self,
        name: &'static str,
        call: impl FnOnce(ncclComm_t, sys::CUstream) -> ncclResult_t,
    ) -> Result<()> {
        let mut comm = self.comm.lock().unwrap_or_else(|e| e.into_inner());
        let Some(Live(c)) = comm.as_ref() else {
            return Err(Error::Aborted { seen: None });
        };
        let c = *c;
        self.ctx.bind_to_thread()?;
        let r = call(c, self.stream.cu_stream());
        if let Err(e) = self.n.check(name, r, Some(c)) {
            end(self.n, &mut comm);
            return Err(e);
        }
        Ok(())
    }

    /// Waits for the stream's work (see the module's text).
    pub fn wait(&self) -> Result<()> {
        let started = Instant::now();
        let mut comm = self.comm.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            // SAFETY: a live stream of this context.
            match unsafe { sys::cuStreamQuery(self.stream.cu_stream()) } {
                CUresult::CUDA_SUCCESS => return Ok(()),
                CUresult::CUDA_ERROR_NOT_READY => {}
                e => {
                    end(self.n, &mut comm);
                    return Err(Error::Driver(format!("waiting for NCCL: {e:?}")));
                }
            }
            let Some(Live(c)) = comm.as_ref() else {
                return Err(Error::Aborted { seen: None });
            };
            let c = *c;
            let mut async_err = ncclResult_t::ncclSuccess;
            // SAFETY: a live communicator and a valid out-pointer.
            let r = unsafe { (self.n.comm_get_async_error)(c, &mut async_err) };
            let bad = self
                .n
                .check("ncclCommGetAsyncError", r, Some(c))
                .and_then(|_| self.n.check("an NCCL collective", async_err, Some(c)));
            if let Err(e) = bad {
                end(self.n, &mut comm);
                return Err(e);
            }
            if self.aborted.load(Ordering::Acquire) {
                end(self.n, &mut comm);
                return Err(Error::Aborted { seen: None });
            }
            if started.elapsed() >= self.timeout {
                end(self.n, &mut comm);
                return Err(Error::NoProgress {
                    what: "NCCL".into(),
                    waited: self.timeout,
                });
            }
            std::thread::sleep(POLL);
        }
    }

    /// Raises the flag a waiting call polls; that call (or the drop) ends
    /// NCCL, so NCCL is never freed under a call.
    pub fn abort(&self) {
        self.aborted.store(true, Ordering::Release);
    }
}

/// Ends the NCCL communicator at once (`ncclCommAbort`), if it lives.
fn end(n: &Nccl, comm: &mut Option<Live>) {
    if let Some(Live(c)) = comm.take() {
        // SAFETY: `c` lives until this call, which frees it.
        unsafe { (n.comm_abort)(c) };
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        let comm = self.comm.get_mut().unwrap_or_else(|e| e.into_inner());
        if let Some(Live(c)) = comm.take() {
            let _ = self.ctx.bind_to_thread();
            // SAFETY: no call is in flight (the link is owned here).
            // Destroying flushes NCCL's work; aborting does not wait.
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
