//! One NCCL communicator and the stream its calls run on, with the one
//! way ringreduce waits for NCCL. The communicator is non-blocking
//! ([`Config::nonblocking`]): no NCCL call holds the caller, and every wait
//! polls NCCL's state (`ncclCommGetAsyncError`, `ncclInProgress` while it
//! works), then the stream, the abort flag and the timeout; on an error,
//! an abort or the timeout it ends NCCL (`ncclCommAbort`), so no caller is
//! left inside NCCL. The step between nodes and the flat NCCL backend both
//! hold one.

use super::library::{nccl, Config, Nccl};
use crate::error::{Error, Result};
use cudarc::driver::sys::{self, CUresult};
use cudarc::driver::{CudaContext, CudaStream};
use cudarc::nccl::sys::{ncclComm_t, ncclResult_t, ncclUniqueId};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Bytes of an NCCL unique id, as the bootstrap carries it.
pub(crate) const ID_BYTES: usize = 128;

/// How long a wait polls without sleeping: NCCL steps of small messages
/// end within it, and a sleep there would be most of their time.
const SPIN: Duration = Duration::from_millis(50);

/// The sleep between polls after [`SPIN`]: short against any timeout.
const NAP: Duration = Duration::from_micros(200);

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

/// What a wait waits for.
#[derive(Clone, Copy, PartialEq)]
enum Until {
    /// NCCL's state leaves `ncclInProgress` (initialisation, finalising).
    Settled,
    /// That, and then the stream's work is done (a collective).
    Drained,
}

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
    /// `ctx`'s device. NCCL's initialisation waits for every member; a
    /// member that never comes makes it fail within `timeout`
    /// ([`Error::NoProgress`]) rather than hang.
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
        let mut config = Config::nonblocking();
        // SAFETY: `comm` and `config` are valid pointers; the context is
        // bound.
        let r = unsafe {
            (n.comm_init_rank_config)(&mut comm, members as i32, id, me as i32, &mut config)
        };
        let link = Link {
            n,
            comm: Mutex::new((!comm.is_null()).then_some(Live(comm))),
            ctx,
            stream,
            aborted: AtomicBool::new(false),
            timeout,
        };
        if r != ncclResult_t::ncclInProgress {
            if let Err(e) = n.check("ncclCommInitRankConfig", r, None) {
                link.end();
                return Err(e);
            }
        }
        link.wait_until(Until::Settled, "NCCL's initialisation")?;
        Ok(link)
    }

    /// Enqueues `call` (named `name`) on the communicator and the stream,
    /// and returns once NCCL has taken it (polled, as every wait is); an
    /// error from it ends NCCL.
    pub fn enqueue(
        &self,
        name: &'static str,
        call: impl FnOnce(ncclComm_t, sys::CUstream) -> ncclResult_t,
    ) -> Result<()> {
        let mut comm = self.lock();
        let Some(Live(c)) = comm.as_ref() else {
            return Err(Error::Aborted { seen: None });
        };
        let c = *c;
        self.ctx.bind_to_thread()?;
        let r = call(c, self.stream.cu_stream());
        if r != ncclResult_t::ncclInProgress {
            if let Err(e) = self.n.check(name, r, Some(c)) {
                end(self.n, &mut comm);
                return Err(e);
            }
            return Ok(());
        }
        // NCCL is still enqueuing (a first call connects to the peers):
        // it takes no other call, and its stream no other work, until done.
        drop(comm);
        self.wait_until(Until::Settled, name)
    }

    /// Waits for the enqueued work (see the module's text).
    pub fn wait(&self) -> Result<()> {
        self.wait_until(Until::Drained, "NCCL")
    }

    fn wait_until(&self, until: Until, what: &str) -> Result<()> {
        let started = Instant::now();
        let mut comm = self.lock();
        loop {
            let Some(Live(c)) = comm.as_ref() else {
                return Err(Error::Aborted { seen: None });
            };
            let c = *c;
            let mut state = ncclResult_t::ncclSuccess;
            // SAFETY: a live communicator and a valid out-pointer.
            let r = unsafe { (self.n.comm_get_async_error)(c, &mut state) };
            let checked =
                self.n
                    .check("ncclCommGetAsyncError", r, Some(c))
                    .and_then(|_| match state {
                        ncclResult_t::ncclInProgress => Ok(false),
                        s => self.n.check("NCCL's work", s, Some(c)).map(|_| true),
                    });
            match checked {
                Err(e) => {
                    end(self.n, &mut comm);
                    return Err(e);
                }
                Ok(false) => {}
                Ok(true) if until == Until::Settled => return Ok(()),
                // SAFETY: a live stream of this context.
                Ok(true) => match unsafe { sys::cuStreamQuery(self.stream.cu_stream()) } {
                    CUresult::CUDA_SUCCESS => return Ok(()),
                    CUresult::CUDA_ERROR_NOT_READY => {}
                    e => {
                        end(self.n, &mut comm);
                        return Err(Error::Driver(format!("waiting for NCCL: {e:?}")));
                    }
                },
            }
            if self.aborted.load(Ordering::Acquire) {
                end(self.n, &mut comm);
                return Err(Error::Aborted { seen: None });
            }
            let waited = started.elapsed();
            if waited >= self.timeout {
                end(self.n, &mut comm);
                return Err(Error::NoProgress {
                    what: what.into(),
                    waited: self.timeout,
                });
            }
            if waited < SPIN {
                std::thread::yield_now();
            } else {
                std::thread::sleep(NAP);
            }
        }
    }

    /// Raises the flag a waiting call polls; that call (or the drop) ends
    /// NCCL, so NCCL is never freed under a call.
    pub fn abort(&self) {
        self.aborted.store(true, Ordering::Release);
    }

    fn lock(&self) -> MutexGuard<'_, Option<Live>> {
        self.comm.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Ends NCCL at once, if it lives.
    fn end(&self) {
        end(self.n, &mut self.lock());
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
    /// After an abort, or where NCCL will not finish its work within the
    /// timeout, NCCL is aborted; else it is finalised (its work flushed,
    /// polled as every wait is) and destroyed.
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        if self.aborted.load(Ordering::Acquire) {
            self.end();
            return;
        }
        let c = match self.lock().as_ref() {
            Some(Live(c)) => *c,
            None => return,
        };
        // SAFETY: no call is in flight (the link is owned here).
        let r = unsafe { (self.n.comm_finalize)(c) };
        let finished = (r == ncclResult_t::ncclSuccess || r == ncclResult_t::ncclInProgress)
            && self
                .wait_until(Until::Settled, "NCCL's finalisation")
                .is_ok();
        if let Some(Live(c)) = self.lock().take() {
            // SAFETY: `c` lives until this call, which frees it; a failed
            // wait above already aborted it and took it.
            unsafe {
                if finished {
                    (self.n.comm_destroy)(c);
                } else {
                    (self.n.comm_abort)(c);
                }
            }
        }
    }
}
