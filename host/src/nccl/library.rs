//! libnccl, loaded at run time and never linked: by the path in
//! [`LIBRARY_ENV`], else by the names NCCL's pip wheels and system
//! packages install (`libnccl.so.2`, then `libnccl.so`).
//!
//! The function table is our own rather than cudarc's loader, for two
//! reasons: cudarc 0.19 looks only for names such as `libnccl.so`, which
//! the wheels (`nvidia-nccl-cu12`, `nvidia-nccl-cu13`) do not ship, and it
//! panics when the library or a symbol is missing, where a caller of ours
//! gets [`Error::NcclUnavailable`]. cudarc's `nccl::sys` still supplies the
//! types, so the ABI is written down once.

use crate::error::{Error, Result};
use cudarc::driver::sys::CUstream;
use cudarc::nccl::sys::{ncclComm_t, ncclDataType_t, ncclRedOp_t, ncclResult_t, ncclUniqueId};
use libloading::Library;
use ringreduce_kernels::{DataType, Op};
use std::ffi::{c_char, c_int, c_void, CStr, OsString};
use std::sync::OnceLock;

/// The path of the libnccl to load, for a library outside the loader's
/// search path (a pip wheel's `nvidia/nccl/lib/libnccl.so.2`).
pub const LIBRARY_ENV: &str = "RINGREDUCE_NCCL_LIBRARY";

/// The names tried, in order, when [`LIBRARY_ENV`] is unset.
const NAMES: [&str; 2] = ["libnccl.so.2", "libnccl.so"];

/// The oldest NCCL taken: 2.18 has every call used here and
/// `ncclCommInitRankConfig`'s error reporting as we read it.
pub const MIN_VERSION: i32 = 21800;

type Ret = ncclResult_t;

/// `ncclAllReduce` and `ncclReduceScatter`, which share a signature:
/// send, recv, count, type, op, communicator, stream.
type Reduce = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    ncclDataType_t,
    ncclRedOp_t,
    ncclComm_t,
    CUstream,
) -> Ret;

/// `ncclConfig_t` as NCCL 2.17 declared it. NCCL reads a config up to its
/// `size` and takes its own defaults for the fields added since, so this
/// one layout serves every NCCL from [`MIN_VERSION`] on (cudarc's type
/// changes with its NCCL feature).
#[repr(C)]
pub(crate) struct Config {
    size: usize,
    magic: u32,
    version: u32,
    blocking: c_int,
    cga_cluster_size: c_int,
    min_ctas: c_int,
    max_ctas: c_int,
    net_name: *const c_char,
    split_share: c_int,
}

impl Config {
    /// NCCL's defaults, but non-blocking: every call returns at once
    /// (`ncclInProgress` while NCCL works in the background), so a caller
    /// can poll, time out and abort where a blocking call would hang, as
    /// NCCL's own connection set-up at a first collective does when a peer
    /// never arrives.
    pub fn nonblocking() -> Config {
        /// `NCCL_CONFIG_UNDEF_INT`: "take NCCL's default".
        const UNDEF: c_int = c_int::MIN;
        Config {
            size: std::mem::size_of::<Config>(),
            magic: 0xcafe_beef,
            version: 21700,
            blocking: 0,
            cga_cluster_size: UNDEF,
            min_ctas: UNDEF,
            max_ctas: UNDEF,
            net_name: std::ptr::null(),
            split_share: UNDEF,
        }
    }
}

/// The calls ringreduce makes, resolved once, so that a library missing
/// any of them is refused at load, not at first use.
#[allow(dead_code)]
pub(crate) struct Nccl {
    /// NCCL's version code (`ncclGetVersion`: 22809 for 2.28.9).
    pub version: i32,
    pub get_unique_id: unsafe extern "C" fn(*mut ncclUniqueId) -> Ret,
    pub comm_init_rank_config:
        unsafe extern "C" fn(*mut ncclComm_t, c_int, ncclUniqueId, c_int, *mut Config) -> Ret,
    pub comm_finalize: unsafe extern "C" fn(ncclComm_t) -> Ret,
    pub comm_destroy: unsafe extern "C" fn(ncclComm_t) -> Ret,
    pub comm_abort: unsafe extern "C" fn(ncclComm_t) -> Ret,
    pub comm_get_async_error: unsafe extern "C" fn(ncclComm_t, *mut Ret) -> Ret,
    pub get_error_string: unsafe extern "C" fn(Ret) -> *const c_char,
    pub get_last_error: unsafe extern "C" fn(ncclComm_t) -> *const c_char,
    pub all_reduce: Reduce,
    pub reduce_scatter: Reduce,
    pub all_gather: unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        ncclDataType_t,
        ncclComm_t,
        CUstream,
    ) -> Ret,
    pub send: unsafe extern "C" fn(
        *const c_void,
        usize,
        ncclDataType_t,
        c_int,
        ncclComm_t,
        CUstream,
    ) -> Ret,
    pub recv: unsafe extern "C" fn(
        *mut c_void,
        usize,
        ncclDataType_t,
        c_int,
        ncclComm_t,
        CUstream,
    ) -> Ret,
    pub group_start: unsafe extern "C" fn() -> Ret,
    pub group_end: unsafe extern "C" fn() -> Ret,
    /// Kept open for as long as the functions above are called.
    _lib: Library,
}

/// The process's libnccl, loaded by the first call that needs it; every
/// later call gets the same library or the same error.
pub(crate) fn nccl() -> Result<&'static Nccl> {
    static LIB: OnceLock<std::result::Result<Nccl, String>> = OnceLock::new();
    LIB.get_or_init(|| {
        let named = std::env::var_os(LIBRARY_ENV).filter(|p| !p.is_empty());
        let candidates: Vec<OsString> = match named {
            Some(p) => vec![p],
            None => NAMES.iter().map(OsString::from).collect(),
        };
        open_first(&candidates)
    })
    .as_ref()
    .map_err(|e| Error::NcclUnavailable(e.clone()))
}

/// The version of the libnccl this process loads (`"2.28.9"`), or why
/// none loads: what a program checks before it plans on NCCL.
pub fn version() -> Result<String> {
    nccl().map(|n| version_text(n.version))
}

/// The first of `candidates` that loads and has every call, or why none
/// did, with how to get NCCL.
fn open_first(candidates: &[OsString]) -> std::result::Result<Nccl, String> {
    let mut tried = Vec::new();
    for c in candidates {
        // SAFETY: loading runs the library's initialisers; libnccl's are
        // what any NCCL program runs.
        match unsafe { Library::new(c) } {
            Ok(lib) => return resolve(lib).map_err(|e| format!("{}: {e}", c.to_string_lossy())),
            Err(e) => tried.push(format!("{}: {e}", c.to_string_lossy())),
        }
    }
    Err(format!(
        "no libnccl could be loaded ({}). Install NCCL (`pip install nvidia-nccl-cu12`, or the \
         system's libnccl2 package) and, for a pip wheel, set {LIBRARY_ENV} to its libnccl.so.2: \
         python3 -c \"import nvidia.nccl, os; print(os.path.join(nvidia.nccl.__path__[0], 'lib', \
         'libnccl.so.2'))\"",
        tried.join("; ")
    ))
}

/// Looks up every call in `lib`, and checks NCCL's version.
fn resolve(lib: Library) -> std::result::Result<Nccl, String> {
    /// The symbol `name` of `lib` as a function pointer of type `F`.
    ///
    /// # Safety
    /// `F` must be the symbol's C signature.
    unsafe fn sym<F: Copy>(lib: &Library, name: &str) -> std::result::Result<F, String> {
        lib.get::<F>(name.as_bytes())
            .map(|s| *s)
            .map_err(|_| format!("it has no {name}, so it is not a usable libnccl"))
    }
    // SAFETY: each type below is the C declaration in nccl.h.
    unsafe {
        let get_version: unsafe extern "C" fn(*mut c_int) -> Ret = sym(&lib, "ncclGetVersion")?;
        let mut version = 0;
        let r = get_version(&mut version);
        if r != ncclResult_t::ncclSuccess {
            return Err(format!("ncclGetVersion failed ({r:?})"));
        }
        if version < MIN_VERSION {
            return Err(format!(
                "NCCL {} is older than the {} this needs",
                version_text(version),
                version_text(MIN_VERSION)
            ));
        }
        Ok(Nccl {
            version,
            get_unique_id: sym(&lib, "ncclGetUniqueId")?,
            comm_init_rank_config: sym(&lib, "ncclCommInitRankConfig")?,
            comm_finalize: sym(&lib, "ncclCommFinalize")?,
            comm_destroy: sym(&lib, "ncclCommDestroy")?,
            comm_abort: sym(&lib, "ncclCommAbort")?,
            comm_get_async_error: sym(&lib, "ncclCommGetAsyncError")?,
            get_error_string: sym(&lib, "ncclGetErrorString")?,
            get_last_error: sym(&lib, "ncclGetLastError")?,
            all_reduce: sym(&lib, "ncclAllReduce")?,
            reduce_scatter: sym(&lib, "ncclReduceScatter")?,
            all_gather: sym(&lib, "ncclAllGather")?,
            send: sym(&lib, "ncclSend")?,
            recv: sym(&lib, "ncclRecv")?,
            group_start: sym(&lib, "ncclGroupStart")?,
            group_end: sym(&lib, "ncclGroupEnd")?,
            _lib: lib,
        })
    }
}

/// NCCL's name for a type (also the bench's, for `--vs-nccl`).
pub fn nccl_type(t: DataType) -> ncclDataType_t {
    match t {
        DataType::I8 => ncclDataType_t::ncclInt8,
        DataType::U8 => ncclDataType_t::ncclUint8,
        DataType::I32 => ncclDataType_t::ncclInt32,
        DataType::U32 => ncclDataType_t::ncclUint32,
        DataType::I64 => ncclDataType_t::ncclInt64,
        DataType::U64 => ncclDataType_t::ncclUint64,
        DataType::F16 => ncclDataType_t::ncclFloat16,
        DataType::Bf16 => ncclDataType_t::ncclBfloat16,
        DataType::F32 => ncclDataType_t::ncclFloat32,
        DataType::F64 => ncclDataType_t::ncclFloat64,
    }
}

/// NCCL's name for an op.
pub fn nccl_op(op: Op) -> ncclRedOp_t {
    match op {
        Op::Sum => ncclRedOp_t::ncclSum,
        Op::Prod => ncclRedOp_t::ncclProd,
        Op::Max => ncclRedOp_t::ncclMax,
        Op::Min => ncclRedOp_t::ncclMin,
        Op::Avg => ncclRedOp_t::ncclAvg,
    }
}

/// `22809` as `2.28.9` (NCCL's code since 2.9: major × 10000 + minor ×
/// 100 + patch).
pub fn version_text(code: i32) -> String {
    format!("{}.{}.{}", code / 10000, code / 100 % 100, code % 100)
}

#[allow(dead_code)]
impl Nccl {
    /// `r` as a result: an error names the call and carries NCCL's text
    /// (and the communicator's last error, when there is one).
    pub fn check(&self, call: &'static str, r: Ret, comm: Option<ncclComm_t>) -> Result<()> {
        if r == ncclResult_t::ncclSuccess {
            return Ok(());
        }
        // SAFETY: both return NUL-terminated strings NCCL owns.
        let mut text = unsafe { cstr((self.get_error_string)(r)) };
        if let Some(c) = comm {
            let last = unsafe { cstr((self.get_last_error)(c)) };
            if !last.is_empty() {
                text = format!("{text}: {last}");
            }
        }
        Err(Error::Nccl {
            call,
            code: r as i32,
            text,
        })
    }
}

/// A C string NCCL returned, or "" for null.
#[allow(dead_code)]
///
/// # Safety
/// `p` is null or a NUL-terminated string that outlives the call.
unsafe fn cstr(p: *const c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        CStr::from_ptr(p).to_string_lossy().into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_says_what_was_tried_and_how_to_get_nccl() {
        let e = open_first(&[OsString::from("/nonexistent/libnccl.so.2")])
            .err()
            .expect("no such file");
        assert!(e.contains("/nonexistent/libnccl.so.2"), "{e}");
        assert!(e.contains(LIBRARY_ENV), "{e}");
        assert!(e.contains("pip install nvidia-nccl"), "{e}");
    }

    #[test]
    fn a_library_that_is_not_nccl_is_refused_by_name() {
        // libc loads everywhere this runs and has no NCCL calls.
        let e = open_first(&[OsString::from("libc.so.6")])
            .err()
            .expect("libc is not NCCL");
        assert!(e.contains("libc.so.6: it has no ncclGetVersion"), "{e}");
    }

    #[test]
    fn version_is_nccls_or_a_typed_error() {
        // CI has no NCCL: the error names the variable; a GPU host with
        // NCCL 2.18 or newer reads its version.
        match version() {
            Ok(v) => assert!(v.starts_with("2."), "{v}"),
            Err(Error::NcclUnavailable(e)) => assert!(e.contains(LIBRARY_ENV), "{e}"),
            Err(e) => panic!("not a typed NCCL error: {e}"),
        }
    }

    /// The offsets nccl.h gives `ncclConfig_t`'s first fields on a 64-bit
    /// target: NCCL reads `size`, `magic` and `version` first, and then as
    /// many fields as `size` covers.
    #[test]
    fn the_config_is_laid_out_as_nccl_h_declares_it() {
        use std::mem::{offset_of, size_of};
        assert_eq!(offset_of!(Config, magic), 8);
        assert_eq!(offset_of!(Config, version), 12);
        assert_eq!(offset_of!(Config, blocking), 16);
        assert_eq!(offset_of!(Config, max_ctas), 28);
        assert_eq!(offset_of!(Config, net_name), 32);
        assert_eq!(offset_of!(Config, split_share), 40);
        assert_eq!(size_of::<Config>(), 48);
        let c = Config::nonblocking();
        assert_eq!((c.size, c.magic, c.blocking), (48, 0xcafe_beef, 0));
    }

    #[test]
    fn versions_read_as_nccl_writes_them() {
        assert_eq!(version_text(22809), "2.28.9");
        assert_eq!(version_text(MIN_VERSION), "2.18.0");
    }
}
