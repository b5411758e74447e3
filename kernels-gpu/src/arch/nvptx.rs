//! The one module with inline PTX: thread index, barriers with a predicate
//! reduction, the slices' hand-off (`mbarrier`, or a shared count before
//! sm_80), volatile and acquire flag accesses,
//! fences, L2 prefetch, the global timer, half-precision conversions and
//! reads of a local entry's argument in param space.

use crate::device::{Device, Handoff, SliceWork, RELEASE_SLOTS, SLICE_WORDS};
use crate::grad::abi::SELECT_BINS;
use crate::types::Scope;
use core::arch::asm;

/// A 32-bit access `$op` to the block's shared word named by the macro
/// `$word` (see `arch::SHARED_DECLARATIONS`): the polled hand-off's count
/// before sm_80.
#[cfg(not(target_feature = "sm_80"))]
macro_rules! load_shared {
    ($op:literal, $word:ident) => {{
        let v: u32;
        unsafe {
            asm!(concat!($op, " {v}, [", crate::$word!(), "];"), v = out(reg32) v, options(nostack))
        };
        v
    }};
}

#[cfg(not(target_feature = "sm_80"))]
macro_rules! store_shared {
    ($op:literal, $word:ident, $v:expr) => {
        unsafe {
            asm!(concat!($op, " [", crate::$word!(), "], {v};"), v = in(reg32) $v, options(nostack))
        }
    };
}

/// The shared-space address of the module-scope array named by the macro
/// `$name` (see `arch::SHARED_DECLARATIONS`).
macro_rules! shared_base {
    ($name:ident) => {{
        let a: u64;
        // SAFETY: only names a declared shared array.
        unsafe {
            asm!(
                concat!("mov.u64 {a}, ", crate::$name!(), ";"),
                a = out(reg64) a,
                options(nomem, nostack, pure)
            )
        };
        a
    }};
}

/// A GPU block running the kernel; `THREADS` producers plus the control
/// lane, running channel `channel` of one rank of its launch's batch.
#[derive(Clone, Copy, Default)]
pub struct Gpu<const THREADS: u32> {
    pub channel: u64,
}

/// Barrier ids: 0 is the whole block's; the two "slice done" barriers (one
/// per parity) follow.
const DONE_BARRIER: u32 = 1;

unsafe impl<const THREADS: u32> Handoff for Gpu<THREADS> {
    /// Publishes the slice's work (unless `failed`) and `failed` in the
    /// block's shared memory, then opens the slice ([`open_slice`]), which
    /// orders the flag acquire, the work and `failed` before the producers'
    /// reads after [`wait_slice_open`].
    #[inline(always)]
    fn release(&self, slice: u64, failed: bool, work: SliceWork) {
        if !failed {
            let w = work.to_words();
            // SAFETY: the slot, declared in `SHARED_DECLARATIONS` with the
            // 16-byte alignment of each pair. Spelled out, not a loop over
            // the words, which LLVM kept in local memory. Volatile like the
            // `failed` word: strong accesses, ordered by `open_slice` below.
            unsafe {
                asm!(
                    "st.volatile.shared.v2.u64 [{a}], {{{w0}, {w1}}};",
                    "st.volatile.shared.v2.u64 [{a}+16], {{{w2}, {w3}}};",
                    "st.volatile.shared.v2.u64 [{a}+32], {{{w4}, {w5}}};",
                    a = in(reg64) slice_slot(slice),
                    w0 = in(reg64) w[0], w1 = in(reg64) w[1], w2 = in(reg64) w[2],
                    w3 = in(reg64) w[3], w4 = in(reg64) w[4], w5 = in(reg64) w[5],
                    options(nostack)
                )
            };
        }
        // SAFETY: the slot's `failed` word (`SHARED_DECLARATIONS`).
        unsafe {
            asm!(
                "st.volatile.shared.u32 [{a}], {f};",
                a = in(reg64) failed_word(slice), f = in(reg32) failed as u32,
                options(nostack)
            )
        };
        open_slice(slice);
    }

    #[inline(always)]
    fn reset_release(&self) {
        reset_slices();
    }

    /// Waits until the slice is open (each lane alone, so no warp waits for
    /// a slower one), then reads `failed` and the work.
    #[inline(always)]
    fn await_release(&self, slice: u64) -> Option<SliceWork> {
        wait_slice_open(slice);
        let failed: u32;
        // SAFETY: as in `release`.
        unsafe {
            asm!(
                "ld.volatile.shared.u32 {f}, [{a}];",
                a = in(reg64) failed_word(slice), f = out(reg32) failed,
                options(nostack, readonly)
            )
        };
        if failed != 0 {
            return None;
        }
        let (w0, w1, w2, w3, w4, w5): (u64, u64, u64, u64, u64, u64);
        // SAFETY: as in `release`; not `pure`, so that LLVM keeps it after
        // the acquire.
        unsafe {
            asm!(
                "ld.volatile.shared.v2.u64 {{{w0}, {w1}}}, [{a}];",
                "ld.volatile.shared.v2.u64 {{{w2}, {w3}}}, [{a}+16];",
                "ld.volatile.shared.v2.u64 {{{w4}, {w5}}}, [{a}+32];",
                a = in(reg64) slice_slot(slice),
                w0 = out(reg64) w0, w1 = out(reg64) w1, w2 = out(reg64) w2,
                w3 = out(reg64) w3, w4 = out(reg64) w4, w5 = out(reg64) w5,
                options(nostack, readonly)
            )
        };
        let words = [w0, w1, w2, w3, w4, w5];
        Some(SliceWork::from_words(words))
    }

    #[inline(always)]
    fn arrive_done(&self, parity: u64) {
        barrier_arrive(DONE_BARRIER + parity as u32, THREADS + 32);
    }

    #[inline(always)]
    fn await_done(&self, parity: u64) {
        barrier_sync(DONE_BARRIER + parity as u32, THREADS + 32);
    }
}

unsafe impl<const THREADS: u32> Device for Gpu<THREADS> {
    #[inline(always)]
    fn thread_idx(&self) -> u64 {
        let t: u32;
        unsafe { asm!("mov.u32 {t}, %tid.x;", t = out(reg32) t, options(nomem, nostack, pure)) };
        t as u64
    }

    /// Not `pure`: each read is a separate value to LLVM.
    #[inline(always)]
    fn thread_idx_fresh(&self) -> u64 {
        let t: u32;
        unsafe { asm!("mov.u32 {t}, %tid.x;", t = out(reg32) t, options(nomem, nostack)) };
        t as u64
    }

    #[inline(always)]
    fn channel(&self) -> u64 {
        self.channel
    }

    /// `barrier.red.or.pred` on barrier 0 with the whole block: the
    /// non-aligned form, since only the control lane ran the code before it
    /// (compute-sanitizer's synccheck flagged the aligned `bar.red` there).
    #[inline(always)]
    fn block_barrier_or(&self, pred: bool) -> bool {
        let out: u32;
        unsafe {
            asm!(
                "{{",
                ".reg .pred %pin, %pout;",
                "setp.ne.u32 %pin, {p}, 0;",
                "barrier.red.or.pred %pout, 0, %pin;",
                "selp.u32 {o}, 1, 0, %pout;",
                "}}",
                p = in(reg32) pred as u32,
                o = out(reg32) out,
                options(nostack)
            )
        };
        out != 0
    }

    #[inline(always)]
    unsafe fn load_volatile(&self, p: *const u64) -> u64 {
        let v: u64;
        asm!("ld.volatile.u64 {v}, [{p}];", v = out(reg64) v, p = in(reg64) p, options(nostack));
        v
    }

    #[inline(always)]
    unsafe fn store_volatile(&self, p: *mut u64, v: u64) {
        asm!("st.volatile.u64 [{p}], {v};", p = in(reg64) p, v = in(reg64) v, options(nostack));
    }

    #[inline(always)]
    unsafe fn load_pack(&self, p: *const u8) -> [u32; 4] {
        ld_v4(p)
    }

    #[inline(always)]
    unsafe fn store_pack(&self, p: *mut u8, v: [u32; 4]) {
        st_v4(p, v)
    }

    #[inline(always)]
    unsafe fn load_acquire(&self, p: *const u64, scope: Scope) -> u64 {
        let v: u64;
        match scope {
            Scope::Gpu => {
                asm!("ld.acquire.gpu.u64 {v}, [{p}];", v = out(reg64) v, p = in(reg64) p, options(nostack))
            }
            Scope::Sys => {
                asm!("ld.acquire.sys.u64 {v}, [{p}];", v = out(reg64) v, p = in(reg64) p, options(nostack))
            }
        }
        v
    }

    #[inline(always)]
    fn fence(&self, scope: Scope) {
        match scope {
            Scope::Gpu => unsafe { asm!("fence.acq_rel.gpu;", options(nostack)) },
            Scope::Sys => unsafe { asm!("fence.acq_rel.sys;", options(nostack)) },
        }
    }

    #[inline(always)]
    unsafe fn prefetch_l2(&self, p: *const u8) {
        asm!("prefetch.L2 [{p}];", p = in(reg64) p, options(nostack, readonly));
    }

    #[inline(always)]
    fn now_ns(&self) -> u64 {
        let t: u64;
        unsafe { asm!("mov.u64 {t}, %globaltimer;", t = out(reg64) t, options(nomem, nostack)) };
        t
    }
}

/// `barrier.arrive` on named barrier `id` of `n` threads: counts this warp
/// in and orders its earlier memory accesses before the waiters' later ones,
/// without waiting.
#[inline(always)]
fn barrier_arrive(id: u32, n: u32) {
    unsafe {
        asm!("barrier.arrive {id}, {n};", id = in(reg32) id, n = in(reg32) n, options(nostack))
    };
}

/// `barrier.sync` on named barrier `id` of `n` threads (the non-aligned
/// form: lanes need not have reconverged).
#[inline(always)]
fn barrier_sync(id: u32, n: u32) {
    unsafe {
        asm!("barrier.sync {id}, {n};", id = in(reg32) id, n = in(reg32) n, options(nostack))
    };
}

#[inline(always)]
pub fn f16_bits_to_f32(b: u16) -> f32 {
    let x: f32;
    unsafe {
        asm!("cvt.f32.f16 {x}, {b};", x = out(reg32) x, b = in(reg16) b, options(pure, nomem, nostack))
    };
    x
}

#[inline(always)]
pub fn f32_to_f16_bits(x: f32) -> u16 {
    let b: u16;
    unsafe {
        asm!("cvt.rn.f16.f32 {b}, {x};", b = out(reg16) b, x = in(reg32) x, options(pure, nomem, nostack))
    };
    b
}

/// Stops the kernel; the driver reports a launch failure to the host.
#[inline(always)]
pub fn trap() -> ! {
    unsafe { asm!("trap;", options(noreturn, nostack)) }
}

/// `%ctaid.x`: the block's channel, and the grid-wide bench copy's stripe.
#[inline(always)]
pub fn block_idx() -> u64 {
    let t: u32;
    unsafe { asm!("mov.u32 {t}, %ctaid.x;", t = out(reg32) t, options(nomem, nostack, pure)) };
    t as u64
}

/// `%nctaid.x`.
#[inline(always)]
pub fn grid_dim() -> u64 {
    let t: u32;
    unsafe { asm!("mov.u32 {t}, %nctaid.x;", t = out(reg32) t, options(nomem, nostack, pure)) };
    t as u64
}

/// A local entry's rank addresses, read from its by-value
/// [`LocalArgs`](crate::abi::LocalArgs) in param space at `base` (see
/// [`param_ends!`](crate::param_ends)): ptxas serves a read by a run-time
/// index with one constant-bank load, where Rust's indexing would copy the
/// whole argument to local memory.
#[derive(Clone, Copy)]
pub struct ParamEnds {
    pub base: u64,
}

impl ParamEnds {
    #[inline(always)]
    fn at(self, offset: usize, u: u64) -> u64 {
        let p = self.base + offset as u64 + 8 * u;
        let v: u64;
        // SAFETY: `base` is the entry's argument (`param_ends!`) and the
        // callers pass `u < BATCH_RANKS`; param space never changes while
        // the kernel runs, so the read is pure.
        unsafe {
            asm!("ld.param.u64 {v}, [{p}];", v = out(reg64) v, p = in(reg64) p, options(pure, nomem, nostack))
        };
        v
    }
}

impl crate::local::Ends for ParamEnds {
    #[inline(always)]
    fn send(&self, u: u64) -> u64 {
        self.at(core::mem::offset_of!(crate::abi::LocalArgs, send), u)
    }

    #[inline(always)]
    fn recv(&self, u: u64) -> u64 {
        self.at(core::mem::offset_of!(crate::abi::LocalArgs, recv), u)
    }
}

/// A ring or direct entry's [`Batch`](crate::abi::Batch), read in place
/// in param space at `base` (see [`param_batch!`](crate::param_batch)):
/// one rank's [`Work`](crate::abi::Work) by a run-time index is twenty
/// constant-bank loads, where `Batch::work`'s masked copy of all sixteen
/// was about 900 instructions in every entry.
#[derive(Clone, Copy)]
pub struct ParamBatch {
    pub base: u64,
}

impl ParamBatch {
    /// Entry `i` of the batch's works; the caller keeps `i` below
    /// [`BATCH_RANKS`](crate::abi::BATCH_RANKS) (`Batch::locate` does).
    #[inline(always)]
    pub fn work(self, i: usize) -> crate::abi::Work {
        use crate::abi::{Batch, Work};
        const WORDS: usize = core::mem::size_of::<Work>() / 8;
        let at = self.base
            + core::mem::offset_of!(Batch, works) as u64
            + (i * core::mem::size_of::<Work>()) as u64;
        let mut w = [0u64; WORDS];
        for (j, x) in w.iter_mut().enumerate() {
            let p = at + 8 * j as u64;
            // SAFETY: `base` is the entry's argument and `i` one of its
            // works; param space never changes while the kernel runs.
            unsafe {
                asm!("ld.param.u64 {v}, [{p}];", v = out(reg64) *x, p = in(reg64) p, options(pure, nomem, nostack))
            };
        }
        // SAFETY: `Work` is `repr(C)` with only `u64` fields, `WORDS` of
        // them; every bit pattern is a valid `Work`.
        unsafe { core::mem::transmute::<[u64; WORDS], Work>(w) }
    }
}

/// The param-space address of the only parameter of the entry named
/// `$entry` (a string literal): LLVM's NVPTX printer names an entry's
/// parameters `<entry>_param_<i>`, and `mov` of a parameter's name gives
/// its address in param space.
#[macro_export]
macro_rules! param_base {
    ($entry:expr) => {{
        let base: u64;
        // SAFETY: only names the entry's own parameter.
        unsafe {
            core::arch::asm!(
                concat!("mov.u64 {b}, ", $entry, "_param_0;"),
                b = out(reg64) base,
                options(pure, nomem, nostack)
            )
        };
        base
    }};
}

/// The [`ParamEnds`] of the entry named `$entry`, whose only parameter is
/// its by-value `LocalArgs`.
#[macro_export]
macro_rules! param_ends {
    ($entry:expr) => {
        $crate::arch::nvptx::ParamEnds {
            base: $crate::param_base!($entry),
        }
    };
}

/// The [`ParamBatch`] of the entry named `$entry`, whose only parameter is
/// its by-value `Batch`.
#[macro_export]
macro_rules! param_batch {
    ($entry:expr) => {
        $crate::arch::nvptx::ParamBatch {
            base: $crate::param_base!($entry),
        }
    };
}

/// `ld.v4.u32`: one 16-byte load.
#[inline(always)]
unsafe fn ld_v4(p: *const u8) -> [u32; 4] {
    let (a, b, c, d): (u32, u32, u32, u32);
    asm!(
        "ld.v4.u32 {{{a}, {b}, {c}, {d}}}, [{p}];",
        a = out(reg32) a, b = out(reg32) b, c = out(reg32) c, d = out(reg32) d,
        p = in(reg64) p,
        options(nostack, readonly)
    );
    [a, b, c, d]
}

/// `st.v4.u32`: one 16-byte store.
#[inline(always)]
unsafe fn st_v4(p: *mut u8, v: [u32; 4]) {
    asm!(
        "st.v4.u32 [{p}], {{{a}, {b}, {c}, {d}}};",
        p = in(reg64) p,
        a = in(reg32) v[0], b = in(reg32) v[1], c = in(reg32) v[2], d = in(reg32) v[3],
        options(nostack)
    );
}

/// A thread of a task launch: lane `ctaid * ntid + tid` of the grid.
#[derive(Clone, Copy, Default)]
pub struct GpuLanes;

unsafe impl crate::grad::lanes::Lanes for GpuLanes {
    #[inline(always)]
    fn lane(&self) -> u64 {
        let (t, n) = block_thread();
        block_idx() * n as u64 + t as u64
    }

    #[inline(always)]
    fn lanes(&self) -> u64 {
        grid_dim() * block_thread().1 as u64
    }

    #[inline(always)]
    unsafe fn load_pack(&self, p: *const u8) -> [u32; 4] {
        ld_v4(p)
    }

    #[inline(always)]
    unsafe fn store_pack(&self, p: *mut u8, v: [u32; 4]) {
        st_v4(p, v)
    }

    /// Zeroes the shared bins, then a block barrier.
    #[inline(always)]
    unsafe fn hist_begin(&self) {
        let (tid, ntid) = block_thread();
        let mut b = tid;
        while b < SELECT_BINS as u32 {
            asm!("st.shared.u32 [{a}], 0;", a = in(reg64) hist_bin(b), options(nostack));
            b += ntid;
        }
        block_sync();
    }

    /// One shared add per distinct bin of the warp: `match.any` groups the
    /// lanes by bin, and the lowest lane of each group adds its size. A
    /// warp with no bin at all (most of a late pass) skips the match.
    #[inline(always)]
    unsafe fn hist_count(&self, bin: u32) {
        asm!(
            "{{",
            ".reg .pred %hp, %hv, %hq;",
            ".reg .b32 %hpeers, %hlow, %hme, %hn;",
            ".reg .b64 %ha;",
            "setp.ne.u32 %hv, {bin}, 0xffffffff;",
            "vote.sync.any.pred %hq, %hv, 0xffffffff;",
            "mov.u32 %hpeers, 0;",
            "@%hq match.any.sync.b32 %hpeers, {bin}, 0xffffffff;",
            "neg.s32 %hlow, %hpeers;",
            "and.b32 %hlow, %hlow, %hpeers;",
            "mov.u32 %hme, %lanemask_eq;",
            "setp.eq.u32 %hp, %hlow, %hme;",
            "and.pred %hp, %hp, %hv;",
            "popc.b32 %hn, %hpeers;",
            concat!("mov.u64 %ha, ", crate::block_hist_array!(), ";"),
            "mad.wide.u32 %ha, {bin}, 4, %ha;",
            "@%hp red.shared.add.u32 [%ha], %hn;",
            "}}",
            bin = in(reg32) bin,
            options(nostack)
        );
    }

    #[inline(always)]
    unsafe fn reserve(&self, count: *mut u64, want: u32) -> u64 {
        warp_reserve(count, want)
    }

    /// A block barrier, then one global add per non-zero shared bin.
    #[inline(always)]
    unsafe fn hist_flush(&self, global: *mut u32) {
        block_sync();
        let (tid, ntid) = block_thread();
        let mut b = tid;
        while b < SELECT_BINS as u32 {
            let v: u32;
            asm!("ld.shared.u32 {v}, [{a}];", a = in(reg64) hist_bin(b), v = out(reg32) v, options(nostack));
            if v != 0 {
                asm!(
                    "red.relaxed.gpu.global.add.u32 [{p}], {v};",
                    p = in(reg64) global.add(b as usize), v = in(reg32) v,
                    options(nostack)
                );
            }
            b += ntid;
        }
    }
}

/// The warp's wants summed by a shuffle scan, one relaxed atomic add by
/// lane 0, its old value broadcast, and each lane's first slot after the
/// wants of the lanes below it.
#[inline(always)]
unsafe fn warp_reserve(count: *mut u64, want: u32) -> u64 {
    let first: u64;
    asm!(
        "{{",
        ".reg .pred %wp, %wq;",
        ".reg .b32 %wx, %wy, %wt, %wl, %wlo, %whi;",
        ".reg .b64 %wb, %wn;",
        "mov.u32 %wx, {want};",
        "shfl.sync.up.b32 %wy|%wp, %wx, 1, 0, 0xffffffff;",
        "@%wp add.u32 %wx, %wx, %wy;",
        "shfl.sync.up.b32 %wy|%wp, %wx, 2, 0, 0xffffffff;",
        "@%wp add.u32 %wx, %wx, %wy;",
        "shfl.sync.up.b32 %wy|%wp, %wx, 4, 0, 0xffffffff;",
        "@%wp add.u32 %wx, %wx, %wy;",
        "shfl.sync.up.b32 %wy|%wp, %wx, 8, 0, 0xffffffff;",
        "@%wp add.u32 %wx, %wx, %wy;",
        "shfl.sync.up.b32 %wy|%wp, %wx, 16, 0, 0xffffffff;",
        "@%wp add.u32 %wx, %wx, %wy;",
        "shfl.sync.idx.b32 %wt, %wx, 31, 0x1f, 0xffffffff;",
        "mov.u32 %wl, %laneid;",
        "setp.eq.u32 %wq, %wl, 0;",
        "setp.ne.and.u32 %wq, %wt, 0, %wq;",
        "mov.u64 %wb, 0;",
        "cvt.u64.u32 %wn, %wt;",
        "@%wq atom.relaxed.gpu.global.add.u64 %wb, [{count}], %wn;",
        "mov.b64 {{%wlo, %whi}}, %wb;",
        "shfl.sync.idx.b32 %wlo, %wlo, 0, 0x1f, 0xffffffff;",
        "shfl.sync.idx.b32 %whi, %whi, 0, 0x1f, 0xffffffff;",
        "mov.b64 %wb, {{%wlo, %whi}};",
        "sub.u32 %wx, %wx, {want};",
        "cvt.u64.u32 %wn, %wx;",
        "add.u64 {first}, %wb, %wn;",
        "}}",
        want = in(reg32) want,
        count = in(reg64) count,
        first = out(reg64) first,
        options(nostack)
    );
    first
}

/// The shared address of the `mbarrier` that opens slice `slice`: one per
/// release slot, each completing one phase per slice it opens.
#[cfg(target_feature = "sm_80")]
#[inline(always)]
fn slice_mbarrier(slice: u64) -> u64 {
    release_slot(shared_base!(block_mbarriers), slice, 8)
}

/// Control lane, before the block barrier that starts the slices: each
/// release slot's `mbarrier` expects one arrival (the control lane's) per
/// phase.
#[cfg(target_feature = "sm_80")]
#[inline(always)]
fn reset_slices() {
    for s in 0..RELEASE_SLOTS as u64 {
        unsafe {
            asm!(
                "mbarrier.init.shared.b64 [{a}], 1;",
                a = in(reg64) slice_mbarrier(s),
                options(nostack)
            )
        };
    }
}

/// Control lane: completes the phase of slice `slice`'s `mbarrier`. The
/// arrival has release semantics at CTA scope, and compute-sanitizer's
/// racecheck models it (it does not model a release store and an acquire
/// poll), so the sanitizer checks the whole hand-off.
#[cfg(target_feature = "sm_80")]
#[inline(always)]
fn open_slice(slice: u64) {
    unsafe {
        asm!(
            "{{",
            ".reg .b64 %state;",
            "mbarrier.arrive.shared.b64 %state, [{a}];",
            "}}",
            a = in(reg64) slice_mbarrier(slice),
            options(nostack)
        )
    };
}

/// Producer: spins until the phase that opens slice `slice` completed. Its
/// `mbarrier` opens slices `slice % 2`, `+ 2`, ... in turn, so the phase
/// has parity `(slice / 2) % 2`; the control lane opens slice `slice + 2`
/// only after every producer finished `slice`, so the phase awaited is
/// never one already overtaken. The successful test has acquire semantics.
#[cfg(target_feature = "sm_80")]
#[inline(always)]
fn wait_slice_open(slice: u64) {
    let (a, parity) = (
        slice_mbarrier(slice),
        ((slice / RELEASE_SLOTS as u64) & 1) as u32,
    );
    loop {
        let done: u32;
        unsafe {
            asm!(
                "{{",
                ".reg .pred %open;",
                "mbarrier.test_wait.parity.shared.b64 %open, [{a}], {p};",
                "selp.u32 {d}, 1, 0, %open;",
                "}}",
                a = in(reg64) a, p = in(reg32) parity, d = out(reg32) done,
                options(nostack)
            )
        };
        if done != 0 {
            return;
        }
    }
}

/// Before sm_80 (no `mbarrier`): nothing is released yet.
#[cfg(not(target_feature = "sm_80"))]
#[inline(always)]
fn reset_slices() {
    store_shared!("st.volatile.shared.u32", block_released_word, 0u32);
}

/// Before sm_80: raises the shared count of released slices with a release
/// store. Correct under the PTX memory model, but racecheck, which judges
/// shared accesses by barriers alone, reports the poll against it.
#[cfg(not(target_feature = "sm_80"))]
#[inline(always)]
fn open_slice(slice: u64) {
    store_shared!(
        "st.release.cta.shared.u32",
        block_released_word,
        (slice as u32).wrapping_add(1)
    );
}

/// Before sm_80: polls the count with acquire loads. The count runs at most
/// two slices ahead of any producer, so a wrapping difference decides.
#[cfg(not(target_feature = "sm_80"))]
#[inline(always)]
fn wait_slice_open(slice: u64) {
    let want = slice as u32;
    while (load_shared!("ld.acquire.cta.shared.u32", block_released_word).wrapping_sub(want) as i32)
        <= 0
    {}
}

/// The shared-memory address of the `failed` word of released slice
/// `slice`.
#[inline(always)]
fn failed_word(slice: u64) -> u64 {
    release_slot(shared_base!(block_failed_words), slice, 4)
}

/// The shared-memory address of the [`SliceWork`] of released slice
/// `slice`.
#[inline(always)]
fn slice_slot(slice: u64) -> u64 {
    release_slot(
        shared_base!(block_slices_array),
        slice,
        SLICE_WORDS as u64 * 8,
    )
}

/// Entry `slice % RELEASE_SLOTS` of a per-release-slot shared array at
/// `base` with entries of `bytes`: the work, the `failed` word and the
/// `mbarrier` of a released slice sit in the same slot.
#[inline(always)]
fn release_slot(base: u64, slice: u64, bytes: u64) -> u64 {
    base + (slice % RELEASE_SLOTS as u64) * bytes
}

// `release` and `await_release` move a slot as three 16-byte pairs.
const _: () = assert!(SLICE_WORDS == 6 && (SLICE_WORDS * 8) % 16 == 0);

/// The shared-memory address of bin `b` of the block's histogram.
#[inline(always)]
fn hist_bin(b: u32) -> u64 {
    let a: u64;
    unsafe {
        asm!(
            concat!("mov.u64 {a}, ", crate::block_hist_array!(), ";"),
            "mad.wide.u32 {a}, {b}, 4, {a};",
            a = out(reg64) a, b = in(reg32) b,
            options(nomem, nostack, pure)
        )
    };
    a
}

/// `(%tid.x, %ntid.x)`.
#[inline(always)]
fn block_thread() -> (u32, u32) {
    let (t, n): (u32, u32);
    unsafe {
        asm!(
            "mov.u32 {t}, %tid.x;",
            "mov.u32 {n}, %ntid.x;",
            t = out(reg32) t, n = out(reg32) n,
            options(nomem, nostack, pure)
        )
    };
    (t, n)
}

/// `barrier.sync 0` of the whole block (non-aligned: lanes may arrive from
/// divergent code), between the phases of a one-block task.
#[inline(always)]
pub fn block_sync() {
    unsafe { asm!("barrier.sync 0;", options(nostack)) };
}
