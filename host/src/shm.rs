//! Memory the processes of one host share: a POSIX shared-memory object
//! mapped by its owner and by the peers that write it. The CPU execution
//! keeps each rank's area (`layout.rs`) in one, so that the same kernel
//! code runs with its ranks in separate processes.
//!
//! The owner creates the object under a name made of the job, the rank and
//! its pid, reserves all its pages at once (so that a full `/dev/shm` is a
//! typed error now, never a `SIGBUS` mid-collective), and unlinks the name
//! as soon as every peer has mapped it: from then on the memory lives
//! exactly as long as some process maps it, so teardown in any order is
//! safe, and a killed job leaves nothing behind once every peer has
//! mapped.

use crate::error::{Error, Result};
use std::ffi::CString;
use std::sync::Mutex;

/// One mapping of a shared-memory object, unmapped when dropped; the
/// owner's also unlinks the name if it is still there.
#[derive(Debug)]
pub struct Segment {
    ptr: *mut u8,
    bytes: usize,
    /// The name to unlink (the owner's, until [`Segment::unlink`]).
    owned_name: Mutex<Option<CString>>,
}

// SAFETY: the mapping is plain memory; who writes where is the collective
// protocol's business, as for any memory the kernels share.
unsafe impl Send for Segment {}
unsafe impl Sync for Segment {}

/// The name of `rank`'s area in job `job`, made by process `pid`: unique
/// on the host, and a leftover of a killed job is easy to tell.
pub fn segment_name(job: u64, rank: usize, pid: u32) -> String {
    format!("/ringreduce-{job:016x}-r{rank}-p{pid}")
}

/// The process whose area `name` (a file name in `/dev/shm`) is, if it is
/// one of ours.
fn owner_of(name: &str) -> Option<u32> {
    let rest = name.strip_prefix("ringreduce-")?;
    let (_, pid) = rest.rsplit_once("-p")?;
    pid.parse().ok()
}

/// Unlinks the names of areas whose process is gone: a rank killed
/// between creating its area and its peers' mapping it leaves its name
/// behind (its memory with it), and the next job on the host removes it.
/// A name whose pid was reused by a live process stays (and costs only
/// its pages).
pub fn sweep_stale() {
    let Ok(dir) = std::fs::read_dir("/dev/shm") else {
        return;
    };
    for e in dir.flatten() {
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(pid) = owner_of(name) else { continue };
        if std::path::Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        if let Ok(c) = CString::new(format!("/{name}")) {
            // SAFETY: a valid C string; a name already gone is fine.
            unsafe { libc::shm_unlink(c.as_ptr()) };
        }
    }
}

fn shm_error(what: &str, name: &str, bytes: usize) -> Error {
    let e = std::io::Error::last_os_error();
    Error::SharedMemory(format!(
        "{what} {name} ({bytes} bytes): {e}; shared memory lives in /dev/shm, which must have room \
         for every rank of the host"
    ))
}

impl Segment {
    /// A new object of `bytes` zeroed bytes under `name`, mapped here; no
    /// object of that name may exist.
    pub fn create(name: &str, bytes: usize) -> Result<Segment> {
        let c = CString::new(name).map_err(|_| Error::SharedMemory(format!("bad name {name}")))?;
        // SAFETY: a valid C string; the result is checked.
        let fd = unsafe {
            libc::shm_open(
                c.as_ptr(),
                libc::O_CREAT | libc::O_EXCL | libc::O_RDWR,
                0o600,
            )
        };
        if fd < 0 {
            return Err(shm_error("cannot create", name, bytes));
        }
        // From here the name exists: a failure below unlinks it (the
        // segment's drop, or by hand before it is made).
        // SAFETY: `fd` is ours; `posix_fallocate` returns its error.
        let reserved = unsafe { libc::posix_fallocate(fd, 0, bytes.max(1) as libc::off_t) };
        if reserved != 0 {
            // SAFETY: ours to close and unlink.
            unsafe {
                libc::close(fd);
                libc::shm_unlink(c.as_ptr());
            }
            return Err(Error::SharedMemory(format!(
                "cannot reserve {bytes} bytes for {name}: {}; shared memory lives in /dev/shm, \
                 which must have room for every rank of the host",
                std::io::Error::from_raw_os_error(reserved)
            )));
        }
        let mapped = map(fd, bytes, name);
        // SAFETY: ours to close and (on failure) unlink.
        unsafe {
            libc::close(fd);
            if mapped.is_err() {
                libc::shm_unlink(c.as_ptr());
            }
        }
        Ok(Segment {
            ptr: mapped?,
            bytes,
            owned_name: Mutex::new(Some(c)),
        })
    }

    /// Maps a peer's object `name`, which must hold at least `bytes`.
    pub fn open(name: &str, bytes: usize) -> Result<Segment> {
        let c = CString::new(name).map_err(|_| Error::SharedMemory(format!("bad name {name}")))?;
        // SAFETY: a valid C string; the result is checked.
        let fd = unsafe { libc::shm_open(c.as_ptr(), libc::O_RDWR, 0) };
        if fd < 0 {
            return Err(shm_error("cannot open a peer's", name, bytes));
        }
        // SAFETY: a zeroed `stat` is a valid out-parameter.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `fd` is open and `st` writable.
        let size_ok = unsafe { libc::fstat(fd, &mut st) } == 0 && st.st_size as usize >= bytes;
        let mapped = if size_ok {
            map(fd, bytes, name)
        } else {
            Err(Error::SharedMemory(format!(
                "a peer's {name} holds {} bytes, fewer than the {bytes} its rank announced",
                st.st_size
            )))
        };
        // SAFETY: ours to close; the mapping stays.
        unsafe { libc::close(fd) };
        Ok(Segment {
            ptr: mapped?,
            bytes,
            owned_name: Mutex::new(None),
        })
    }

    /// Private zeroed memory of `bytes`, laid out like a shared area: the
    /// ranks of one process need no name.
    pub fn private(bytes: usize) -> Result<Segment> {
        // SAFETY: an anonymous mapping; the result is checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes.max(1),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(Error::SharedMemory(format!(
                "cannot map {bytes} bytes: {}",
                std::io::Error::last_os_error()
            )));
        }
        Ok(Segment {
            ptr: p as *mut u8,
            bytes,
            owned_name: Mutex::new(None),
        })
    }

    /// The mapping's address here.
    pub fn addr(&self) -> u64 {
        self.ptr as u64
    }

    /// Removes the owner's name once every peer has mapped the object: the
    /// memory then lives as long as some process maps it.
    pub fn unlink(&self) {
        let name = self
            .owned_name
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(c) = name {
            // SAFETY: a valid C string; a name already gone is fine.
            unsafe { libc::shm_unlink(c.as_ptr()) };
        }
    }
}

/// Maps `bytes` of `fd` shared.
fn map(fd: libc::c_int, bytes: usize, name: &str) -> Result<*mut u8> {
    // SAFETY: `fd` is open for reading and writing; the result is checked.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            bytes.max(1),
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(shm_error("cannot map", name, bytes));
    }
    Ok(p as *mut u8)
}

impl Drop for Segment {
    fn drop(&mut self) {
        self.unlink();
        // SAFETY: our own mapping of this length, dropped once.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.bytes.max(1)) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A peer's mapping sees the owner's writes and the owner a peer's;
    /// after the unlink the name is gone but both mappings still work.
    #[test]
    fn owner_and_peer_share_and_unlink() {
        let name = segment_name(0x5e9, 1, std::process::id());
        let owner = Segment::create(&name, 4096).unwrap();
        let peer = Segment::open(&name, 4096).unwrap();
        // SAFETY: both map the same 4096 bytes.
        unsafe {
            *(owner.addr() as *mut u64) = 7;
            assert_eq!(*(peer.addr() as *const u64), 7);
            *(peer.addr() as *mut u64).add(1) = 9;
            assert_eq!(*(owner.addr() as *const u64).add(1), 9);
        }
        owner.unlink();
        assert!(matches!(
            Segment::open(&name, 4096),
            Err(Error::SharedMemory(_))
        ));
        // SAFETY: still mapped.
        unsafe { assert_eq!(*(peer.addr() as *const u64), 7) };
        assert!(
            Segment::create(&name, 4096).is_ok(),
            "the name is free again"
        );
    }

    /// A name left by a process that is gone is swept; a live one's stays.
    #[test]
    fn stale_names_are_swept() {
        assert_eq!(owner_of("ringreduce-00ab-r3-p4242"), Some(4242));
        assert_eq!(owner_of("other-thing"), None);
        // A pid above the kernel's limit is no process.
        let dead = segment_name(0x5eb, 0, 4_194_304 + 7);
        let live = segment_name(0x5eb, 1, std::process::id());
        let d = Segment::create(&dead, 4096).unwrap();
        let l = Segment::create(&live, 4096).unwrap();
        sweep_stale();
        assert!(Segment::open(&dead, 4096).is_err(), "swept");
        assert!(Segment::open(&live, 4096).is_ok(), "kept");
        drop((d, l));
    }

    /// A peer that announces more than the object holds is refused, and a
    /// second owner of one name too.
    #[test]
    fn sizes_and_names_are_checked() {
        let name = segment_name(0x5ea, 2, std::process::id());
        let _owner = Segment::create(&name, 4096).unwrap();
        assert!(matches!(
            Segment::open(&name, 8192),
            Err(Error::SharedMemory(_))
        ));
        assert!(matches!(
            Segment::create(&name, 4096),
            Err(Error::SharedMemory(_))
        ));
    }
}
