//! Host buffers for the CPU execution.
//!
//! Collectives on the CPU run asynchronously on per-rank worker threads, as
//! they would on GPU streams, so a buffer cannot be a borrowed slice. A
//! [`HostBuffer`] owns its memory, counts the collectives still using it, and
//! makes every host access wait until none are: reading it right after
//! enqueuing a collective is safe and returns the finished result.

use crate::element::RsElement;
use crate::error::{Error, Result};
use std::alloc::Layout;
use std::ops::Range;
use std::sync::{Arc, Condvar, Mutex};

/// Alignment of host buffers: a cache line, so that offsets 0..k give every
/// possible residue modulo the 16-byte pack.
const ALIGN: usize = 64;

pub(crate) struct HostMem {
    ptr: *mut u8,
    bytes: usize,
    pending: Mutex<usize>,
    idle: Condvar,
}

// SAFETY: access to the memory is serialised by the pending count (host
// side) and by the collective protocol (worker side).
unsafe impl Send for HostMem {}
unsafe impl Sync for HostMem {}

impl HostMem {
    pub(crate) fn new(bytes: usize) -> Arc<Self> {
        let layout = Layout::from_size_align(bytes.max(1), ALIGN).expect("layout");
        // SAFETY: non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        Arc::new(HostMem {
            ptr,
            bytes,
            pending: Mutex::new(0),
            idle: Condvar::new(),
        })
    }

    pub(crate) fn addr(&self) -> u64 {
        self.ptr as u64
    }

    fn wait_idle(&self) {
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        while *p > 0 {
            p = self.idle.wait(p).unwrap_or_else(|e| e.into_inner());
        }
    }

    pub(crate) fn begin_use(self: &Arc<Self>) -> UseGuard {
        *self.pending.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        UseGuard(self.clone())
    }
}

impl Drop for HostMem {
    fn drop(&mut self) {
        let layout = Layout::from_size_align(self.bytes.max(1), ALIGN).expect("layout");
        // SAFETY: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.ptr, layout) }
    }
}

/// Marks a buffer in use by one enqueued collective until dropped.
pub struct UseGuard(Arc<HostMem>);

impl Drop for UseGuard {
    fn drop(&mut self) {
        let mut p = self.0.pending.lock().unwrap_or_else(|e| e.into_inner());
        *p -= 1;
        if *p == 0 {
            self.0.idle.notify_all();
        }
    }
}

/// An owned, 64-byte-aligned host buffer of `T`.
pub struct HostBuffer<T> {
    mem: Arc<HostMem>,
    len: usize,
    _t: std::marker::PhantomData<T>,
}

impl<T: RsElement> HostBuffer<T> {
    /// `len` zeroed elements.
    pub fn zeroed(len: usize) -> Self {
        let bytes = len
            .checked_mul(std::mem::size_of::<T>())
            .expect("buffer size overflows usize");
        HostBuffer {
            mem: HostMem::new(bytes),
            len,
            _t: std::marker::PhantomData,
        }
    }

    /// A buffer holding a copy of `data`.
    pub fn from_slice(data: &[T]) -> Self {
        let b = Self::zeroed(data.len());
        b.copy_in(0, data);
        b
    }

    /// Elements in it.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copies the contents out, after every collective using it finished.
    pub fn to_vec(&self) -> Vec<T> {
        self.copy_out(0..self.len)
    }

    /// `range`, if it lies within the buffer.
    fn check(&self, range: &Range<usize>) -> Result<()> {
        if range.start <= range.end && range.end <= self.len {
            Ok(())
        } else {
            Err(Error::RangeOutOfBounds {
                start: range.start,
                end: range.end,
                len: self.len,
            })
        }
    }

    /// Copies elements `range` out, after every collective using the
    /// buffer finished; [`Error::RangeOutOfBounds`] if it does not fit.
    pub fn read(&self, range: Range<usize>) -> Result<Vec<T>> {
        self.check(&range)?;
        Ok(self.copy_out(range))
    }

    /// Elements `range`, which lies within the buffer.
    fn copy_out(&self, range: Range<usize>) -> Vec<T> {
        self.mem.wait_idle();
        // SAFETY: in bounds, no collective uses the memory, and it holds
        // initialised (zeroed or written) Pod elements.
        unsafe {
            std::slice::from_raw_parts((self.mem.ptr as *const T).add(range.start), range.len())
                .to_vec()
        }
    }

    /// Overwrites elements from `offset`, after every collective using the
    /// buffer finished; [`Error::RangeOutOfBounds`] if the data does not fit.
    pub fn write(&self, offset: usize, data: &[T]) -> Result<()> {
        self.check(&(offset..offset.saturating_add(data.len())))?;
        self.copy_in(offset, data);
        Ok(())
    }

    /// Writes `data` at `offset`, where it fits.
    fn copy_in(&self, offset: usize, data: &[T]) {
        self.mem.wait_idle();
        // SAFETY: in bounds, and no collective uses the memory.
        unsafe {
            std::ptr::copy_nonoverlapping(
                data.as_ptr(),
                (self.mem.ptr as *mut T).add(offset),
                data.len(),
            )
        }
    }

    /// A view of `range`, for passing to a collective;
    /// [`Error::RangeOutOfBounds`] if it does not fit.
    pub fn view(&self, range: Range<usize>) -> Result<HostView<T>> {
        self.check(&range)?;
        Ok(self.view_within(range))
    }

    /// A view of `range`, which lies within the buffer.
    pub(crate) fn view_within(&self, range: Range<usize>) -> HostView<T> {
        HostView {
            mem: self.mem.clone(),
            offset: range.start,
            len: range.end - range.start,
            _t: std::marker::PhantomData,
        }
    }

    /// A view of the whole buffer.
    pub fn as_view(&self) -> HostView<T> {
        self.view_within(0..self.len)
    }
}

/// Part of a [`HostBuffer`], kept alive by the collectives that use it.
#[derive(Clone)]
pub struct HostView<T> {
    pub(crate) mem: Arc<HostMem>,
    pub(crate) offset: usize,
    pub(crate) len: usize,
    _t: std::marker::PhantomData<T>,
}

impl<T> HostView<T> {
    /// Elements in it.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Address of the first element.
    pub fn addr(&self) -> u64 {
        self.mem.addr() + (self.offset * std::mem::size_of::<T>()) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_outside_a_buffer_are_typed_errors_and_change_nothing() {
        let b = HostBuffer::from_slice(&[1u32, 2, 3, 4]);
        let oob = |r: Result<_>, start, end| {
            assert!(matches!(
                r,
                Err(Error::RangeOutOfBounds { start: s, end: e, len: 4 }) if s == start && e == end
            ))
        };
        oob(b.view(2..5).map(|_| ()), 2, 5);
        #[allow(clippy::reversed_empty_ranges)]
        oob(b.view(3..2).map(|_| ()), 3, 2);
        oob(b.read(0..5).map(|_| ()), 0, 5);
        oob(b.write(3, &[9, 9]), 3, 5);
        oob(b.write(usize::MAX, &[9]), usize::MAX, usize::MAX);
        assert_eq!(b.to_vec(), vec![1, 2, 3, 4]);
        // At the edges, all is well.
        assert_eq!(b.view(4..4).unwrap().len(), 0);
        assert_eq!(b.read(1..4).unwrap(), vec![2, 3, 4]);
        b.write(2, &[7, 8]).unwrap();
        assert_eq!(b.to_vec(), vec![1, 2, 7, 8]);
    }
}
