//! Thin, checked wrappers over the raw driver calls cudarc's safe API does
//! not cover: raw allocations that peers can write, mapped pinned host
//! memory, pointer queries, events, launches with a by-value argument,
//! copies between raw addresses, occupancy and graph capture. Every raw
//! driver call of the crate is here, as cudarc keeps `sys`, `result` and
//! `safe` apart, so that the rest reads in terms of the library's own types.

use crate::error::{Error, Result};
use cudarc::driver::{result, sys, CudaContext, CudaFunction, CudaGraph, CudaStream};
use std::ffi::c_void;
use std::sync::Arc;

/// Whether libcuda can be loaded at all.
pub fn driver_available() -> bool {
    // SAFETY: only tries to dlopen the library.
    unsafe { sys::is_culib_present() }
}

/// Number of CUDA devices; [`Error::NoDriver`] without a driver.
pub fn device_count() -> Result<usize> {
    if !driver_available() {
        return Err(Error::NoDriver);
    }
    result::init()?;
    Ok(CudaContext::device_count()? as usize)
}

/// Opens device `device`'s primary context, with typed errors for a missing
/// driver or device.
pub fn open_device(device: usize) -> Result<Arc<CudaContext>> {
    let count = device_count()?;
    if device >= count {
        return Err(Error::NoSuchDevice { device, count });
    }
    Ok(CudaContext::new(device)?)
}

/// Device memory from plain `cuMemAlloc`. Memory-pool allocations (what
/// cudarc's `alloc` uses) ignore peer access, and peers write into staging
/// buffers and flags.
pub(crate) struct DeviceAlloc {
    ctx: Arc<CudaContext>,
    pub ptr: u64,
}

impl DeviceAlloc {
    /// `bytes` of zeroed device memory on `ctx`'s device.
    pub fn zeroed(ctx: &Arc<CudaContext>, bytes: usize) -> Result<Self> {
        ctx.bind_to_thread()?;
        // SAFETY: plain allocation, freed in Drop with the context bound.
        let ptr = unsafe { result::malloc_sync(bytes.max(1))? };
        let a = DeviceAlloc {
            ctx: ctx.clone(),
            ptr,
        };
        // SAFETY: `ptr` holds `bytes`.
        unsafe { result::memset_d8_sync(ptr, 0, bytes.max(1))? };
        Ok(a)
    }
}

impl Drop for DeviceAlloc {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        // SAFETY: allocated by `zeroed`; no kernel uses it once the owner
        // (a communicator) is dropped after synchronising.
        unsafe {
            let _ = result::free_sync(self.ptr);
        }
    }
}

/// Bytes of a CUDA IPC memory handle.
pub const IPC_HANDLE_BYTES: usize = 64;

/// The IPC handle of `a`, which another process on this host maps with
/// [`IpcMapping::open`] (CUDA IPC: `cuIpcGetMemHandle`).
pub(crate) fn ipc_handle(a: &DeviceAlloc) -> Result<[u8; IPC_HANDLE_BYTES]> {
    a.ctx.bind_to_thread()?;
    let mut h = sys::CUipcMemHandle {
        reserved: [0; IPC_HANDLE_BYTES],
    };
    // SAFETY: `a.ptr` is the base of a live `cuMemAlloc` allocation; the
    // call writes the handle.
    unsafe { sys::cuIpcGetMemHandle(&mut h, a.ptr) }.result()?;
    Ok(h.reserved.map(|c| c as u8))
}

/// A peer process's allocation mapped here (`cuIpcOpenMemHandle`), closed
/// when dropped: the owner frees its memory only after every peer has
/// closed its mapping (the job's goodbye, `front/job.rs`).
pub(crate) struct IpcMapping {
    ctx: Arc<CudaContext>,
    pub ptr: u64,
}

// SAFETY: a device address and a context; the driver's calls are
// thread-safe.
unsafe impl Send for IpcMapping {}
unsafe impl Sync for IpcMapping {}

impl IpcMapping {
    /// Maps the allocation of `handle` (another process's, on this host)
    /// into `ctx`, with peer access enabled as needed.
    pub fn open(ctx: &Arc<CudaContext>, handle: &[u8]) -> Result<Self> {
        let reserved: [u8; IPC_HANDLE_BYTES] = handle.try_into().map_err(|_| {
            Error::Rendezvous(format!(
                "an IPC handle of {} bytes, not {IPC_HANDLE_BYTES}",
                handle.len()
            ))
        })?;
        ctx.bind_to_thread()?;
        let h = sys::CUipcMemHandle {
            reserved: reserved.map(|b| b as std::ffi::c_char),
        };
        let mut ptr: sys::CUdeviceptr = 0;
        let lazy = sys::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as std::ffi::c_uint;
        // SAFETY: writes one address; a bad handle is an error.
        unsafe { sys::cuIpcOpenMemHandle_v2(&mut ptr, h, lazy) }.result()?;
        Ok(IpcMapping {
            ctx: ctx.clone(),
            ptr,
        })
    }
}

impl Drop for IpcMapping {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        // SAFETY: opened by `open`; the communicator synchronised first.
        unsafe {
            let _ = sys::cuIpcCloseMemHandle(self.ptr);
        }
    }
}

/// The UUID of `ctx`'s device: what tells ranks on one GPU from ranks on
/// two, across processes.
pub(crate) fn device_uuid(ctx: &CudaContext) -> Result<[u8; 16]> {
    let mut u = sys::CUuuid { bytes: [0; 16] };
    // SAFETY: writes 16 bytes.
    unsafe { sys::cuDeviceGetUuid_v2(&mut u, ctx.cu_device()) }.result()?;
    Ok(u.bytes.map(|c| c as u8))
}

/// Pinned host memory mapped into the device's address space, for the abort
/// word and the status records: the host writes and reads it while kernels
/// run, without any copy.
pub(crate) struct MappedHost {
    ctx: Arc<CudaContext>,
    pub host: *mut u64,
    pub device: u64,
    pub words: usize,
}

// SAFETY: the memory is only accessed through atomics on the host.
unsafe impl Send for MappedHost {}
unsafe impl Sync for MappedHost {}

impl MappedHost {
    pub fn zeroed(ctx: &Arc<CudaContext>, words: usize) -> Result<Self> {
        ctx.bind_to_thread()?;
        let bytes = words.max(1) * 8;
        let flags = sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE;
        // SAFETY: allocation of `bytes`, freed in Drop.
        let host = unsafe { result::malloc_host(bytes, flags)? } as *mut u64;
        let mut device: sys::CUdeviceptr = 0;
        // SAFETY: `host` was just allocated with DEVICEMAP.
        let r = unsafe {
            sys::cuMemHostGetDevicePointer_v2(&mut device, host as *mut std::ffi::c_void, 0)
        };
        let m = MappedHost {
            ctx: ctx.clone(),
            host,
            device,
            words,
        };
        r.result()?;
        // SAFETY: `bytes` of fresh memory.
        unsafe { std::ptr::write_bytes(host as *mut u8, 0, bytes) };
        Ok(m)
    }

    pub fn word(&self, i: usize) -> &std::sync::atomic::AtomicU64 {
        assert!(i < self.words);
        // SAFETY: in bounds, 8-byte aligned, lives as long as self.
        unsafe { &*(self.host.add(i) as *const std::sync::atomic::AtomicU64) }
    }
}

impl Drop for MappedHost {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        // SAFETY: allocated in `zeroed`.
        unsafe {
            let _ = result::free_host(self.host as *mut std::ffi::c_void);
        }
    }
}

/// The device ordinal a pointer belongs to, or -1 if the driver does not
/// know it (host memory, a bad pointer).
pub(crate) fn pointer_device(ptr: u64) -> i64 {
    let mut ordinal: std::ffi::c_int = -1;
    // SAFETY: writes one int.
    let r = unsafe {
        sys::cuPointerGetAttribute(
            &mut ordinal as *mut _ as *mut std::ffi::c_void,
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
            ptr,
        )
    };
    if r == sys::CUresult::CUDA_SUCCESS {
        ordinal as i64
    } else {
        -1
    }
}

/// Whether `[ptr, ptr + bytes)` lies inside one device allocation.
pub(crate) fn within_allocation(ptr: u64, bytes: u64) -> bool {
    let mut base: sys::CUdeviceptr = 0;
    let mut size: usize = 0;
    // SAFETY: writes two values.
    let r = unsafe { sys::cuMemGetAddressRange_v2(&mut base, &mut size, ptr) };
    r == sys::CUresult::CUDA_SUCCESS && ptr + bytes <= base + size as u64
}

/// The link from device `a` to device `b`, as the ring chooser needs it.
pub(crate) fn p2p_link(a: &CudaContext, b: &CudaContext) -> Result<crate::topology::Link> {
    let query = |attr| -> Result<i32> {
        let mut v: std::ffi::c_int = 0;
        // SAFETY: writes one int; both devices exist.
        unsafe { sys::cuDeviceGetP2PAttribute(&mut v, attr, a.cu_device(), b.cu_device()) }
            .result()?;
        Ok(v)
    };
    use sys::CUdevice_P2PAttribute::*;
    let mut can: std::ffi::c_int = 0;
    // SAFETY: writes one int.
    unsafe { sys::cuDeviceCanAccessPeer(&mut can, a.cu_device(), b.cu_device()) }.result()?;
    Ok(crate::topology::Link {
        access: can != 0 && query(CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED)? != 0,
        perf_rank: query(CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK)?,
    })
}

/// Lets kernels on `from`'s device read and write memory allocated in `to`
/// (direct peer-to-peer stores over NVLink or PCIe). Access that some
/// earlier communicator already enabled counts as success.
pub(crate) fn enable_peer_access(from: &CudaContext, to: &CudaContext) -> Result<()> {
    from.bind_to_thread()?;
    // SAFETY: both contexts are alive; flags must be 0.
    let r = unsafe { sys::cuCtxEnablePeerAccess(to.cu_ctx(), 0) };
    match r {
        sys::CUresult::CUDA_SUCCESS | sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED => {
            Ok(())
        }
        e => Err(e.result().unwrap_err().into()),
    }
}

/// A driver event without timing, made once and recorded by many calls:
/// what orders a launch with the streams of the ranks it runs.
pub(crate) struct Event {
    raw: sys::CUevent,
    ctx: Arc<CudaContext>,
}

// SAFETY: a plain driver handle; the driver's event calls are thread-safe.
unsafe impl Send for Event {}
unsafe impl Sync for Event {}

impl Event {
    pub fn new(ctx: &Arc<CudaContext>) -> Result<Event> {
        ctx.bind_to_thread()?;
        let raw = result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)?;
        Ok(Event {
            raw,
            ctx: ctx.clone(),
        })
    }

    /// Records the event on `on`, then makes `waiter` wait for it.
    ///
    /// # Safety
    /// Both streams must be live, on the event's context.
    #[inline]
    pub unsafe fn order(&self, on: sys::CUstream, waiter: sys::CUstream) -> Result<()> {
        self.record(on)?;
        self.wait_on(waiter)
    }

    /// Records the event on `on`.
    ///
    /// # Safety
    /// `on` must be live, on the event's context.
    #[inline]
    pub unsafe fn record(&self, on: sys::CUstream) -> Result<()> {
        Ok(result::event::record(self.raw, on)?)
    }

    /// Makes `waiter` wait for the last record.
    ///
    /// # Safety
    /// `waiter` must be live, on the event's context.
    #[inline]
    pub unsafe fn wait_on(&self, waiter: sys::CUstream) -> Result<()> {
        Ok(result::stream::wait_event(
            waiter,
            self.raw,
            sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
        )?)
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: created here, used by nothing after its owner.
            let _ = unsafe { result::event::destroy(self.raw) };
        }
    }
}

/// Launches `f` on `stream`, `blocks` blocks of `threads`, with one
/// argument passed by value (every entry of the catalogue takes one).
///
/// # Safety
/// `arg` must be the argument struct `f` takes, and everything it points
/// to must stay valid until the kernel ends; `f`'s context must be bound.
#[inline]
pub(crate) unsafe fn launch<A>(
    f: &CudaFunction,
    blocks: u32,
    threads: u32,
    stream: sys::CUstream,
    arg: &mut A,
) -> Result<()> {
    let mut params = [arg as *mut A as *mut c_void];
    result::launch_kernel(
        f.cu_function(),
        (blocks, 1, 1),
        (threads, 1, 1),
        0,
        stream,
        &mut params,
    )?;
    Ok(())
}

/// Copies `bytes` from device address `src` to `dst` on `stream`.
///
/// # Safety
/// Both ranges must be valid device memory of the bound context's device
/// (or its peers') until the copy ends.
#[inline]
pub(crate) unsafe fn copy_dtod_async(
    dst: u64,
    src: u64,
    bytes: usize,
    stream: sys::CUstream,
) -> Result<()> {
    Ok(result::memcpy_dtod_async(dst, src, bytes, stream)?)
}

/// Copies `data` to device address `dst`, synchronously.
///
/// # Safety
/// `dst` must hold `size_of_val(data)` bytes on the bound context's device.
pub(crate) unsafe fn copy_htod<T>(dst: u64, data: &[T]) -> Result<()> {
    Ok(result::memcpy_htod_sync(dst, data)?)
}

/// Blocks of `f`, launched `threads` wide, that fit on one multiprocessor.
pub(crate) fn blocks_per_sm(f: &CudaFunction, threads: u32) -> Result<usize> {
    // SAFETY: a valid function handle.
    let n = unsafe {
        result::occupancy::max_active_block_per_multiprocessor(f.cu_function(), threads as i32, 0)?
    };
    Ok(n.max(0) as usize)
}

/// The device's multiprocessors.
pub(crate) fn sm_count(ctx: &CudaContext) -> Result<usize> {
    Ok(ctx.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as usize)
}

/// Whether contexts on `ctx`'s device are shared through MPS, so that
/// kernels of several processes run at once instead of by time slices.
pub(crate) fn mps_enabled(ctx: &CudaContext) -> bool {
    ctx.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MPS_ENABLED)
        .is_ok_and(|v| v != 0)
}

/// Captures what `queue` enqueues on `stream` (every rank's stream, for
/// collectives) into a CUDA graph instead of running it, in thread-local
/// capture mode, and ends the capture whatever `queue` returns. See the
/// README's "Launches, streams and CUDA graphs" for what may be captured.
pub fn capture(stream: &Arc<CudaStream>, queue: impl FnOnce() -> Result<()>) -> Result<CudaGraph> {
    stream.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
    let queued = queue();
    let graph = stream.end_capture(sys::CUgraphInstantiate_flags(0));
    queued?;
    graph?.ok_or_else(|| Error::Driver("the capture made no graph".into()))
}
