//! The step primitives: what a lane does with one piece of data. The
//! ring's are thin wrappers over the one generic [`transfer`] (a slice
//! through the staging ring); the direct and local engines' are
//! [`reduce`] and [`copy`], over [`fold`] (many sources, many
//! destinations, in user-rank order).

use crate::device::{Device, SliceWork};
use crate::element::Element;
use crate::op::ReduceOp;
use crate::schedule::Prim;
use crate::transfer::{fold, transfer, COPY, FINAL, REDUCE};

/// Where one slice comes from and goes to.
#[derive(Clone, Copy)]
pub struct Slot<T> {
    /// The slot of our staging the predecessor filled.
    pub incoming: *const T,
    /// The slice of our own input.
    pub own: *const T,
    /// The slot of the successor's staging we fill.
    pub next: *mut T,
    /// The slice of our output.
    pub out: *mut T,
}

impl<T> Slot<T> {
    /// The addresses the control lane released a slice with.
    #[cfg_attr(target_arch = "nvptx64", inline(always))]
    #[cfg_attr(not(target_arch = "nvptx64"), inline)]
    pub fn of(w: SliceWork) -> Self {
        Slot {
            incoming: w.incoming as *const T,
            own: w.own as *const T,
            next: w.next as *mut T,
            out: w.out as *mut T,
        }
    }
}

/// What every transfer of a producer lane shares.
#[derive(Clone, Copy)]
pub struct LaneCtx {
    pub tid: u64,
    /// Whether the wide-pack path may run.
    pub aligned: bool,
    /// Ranks, for `Avg`'s division.
    pub k: u32,
    pub prefetch_rounds: u64,
}

macro_rules! primitive {
    ($(#[$doc:meta])* $name:ident: $mode:ident, two: $two:literal,
     dst: $dst:ident, dst2: $dst2:ident, from: $src:ident) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// The slot's pointers that this primitive uses must be valid for
        /// `n` elements.
        #[cfg_attr(target_arch = "nvptx64", inline(always))]
        #[cfg_attr(not(target_arch = "nvptx64"), inline)]
        pub unsafe fn $name<D: Device, T: Element, O: ReduceOp, const THREADS: u64>(
            d: &D,
            l: LaneCtx,
            s: Slot<T>,
            n: u64,
        ) {
            transfer::<D, T, O, THREADS, $mode, $two>(
                d, l.tid, s.$dst, s.$dst2, s.incoming, s.$src, n, l.aligned, l.k,
                l.prefetch_rounds,
            )
        }
    };
}

primitive!(
    /// Own input to the successor.
    send: COPY, two: false, dst: next, dst2: next, from: own
);
primitive!(
    /// Incoming op own input, to the successor.
    recv_reduce_send: REDUCE, two: false, dst: next, dst2: next, from: own
);
primitive!(
    /// Incoming op own input, finished, into the output.
    recv_reduce_copy: FINAL, two: false, dst: out, dst2: out, from: own
);
primitive!(
    /// Incoming op own input, finished, into the output and to the
    /// successor.
    recv_reduce_copy_send: FINAL, two: true, dst: out, dst2: next, from: own
);
primitive!(
    /// Own input into the output and to the successor.
    copy_send: COPY, two: true, dst: out, dst2: next, from: own
);
primitive!(
    /// Incoming into the output and to the successor.
    recv_copy_send: COPY, two: true, dst: out, dst2: next, from: incoming
);
primitive!(
    /// Incoming into the output.
    recv_copy: COPY, two: false, dst: out, dst2: out, from: incoming
);

/// Runs primitive `p` on one slice.
///
/// # Safety
/// As for each primitive.
#[cfg_attr(target_arch = "nvptx64", inline(always))]
#[cfg_attr(not(target_arch = "nvptx64"), inline)]
pub unsafe fn run<D: Device, T: Element, O: ReduceOp, const THREADS: u64>(
    p: Prim,
    d: &D,
    l: LaneCtx,
    s: Slot<T>,
    n: u64,
) {
    match p {
        Prim::Send => send::<D, T, O, THREADS>(d, l, s, n),
        Prim::RecvReduceSend => recv_reduce_send::<D, T, O, THREADS>(d, l, s, n),
        Prim::RecvReduceCopy => recv_reduce_copy::<D, T, O, THREADS>(d, l, s, n),
        Prim::RecvReduceCopySend => recv_reduce_copy_send::<D, T, O, THREADS>(d, l, s, n),
        Prim::CopySend => copy_send::<D, T, O, THREADS>(d, l, s, n),
        Prim::RecvCopySend => recv_copy_send::<D, T, O, THREADS>(d, l, s, n),
        Prim::RecvCopy => recv_copy::<D, T, O, THREADS>(d, l, s, n),
    }
}

/// `dst(j)[i] = src(0)[i] op src(1)[i] op ... op src(sources - 1)[i]`,
/// finished, for every destination `j < dests`: a direct or local
/// reduction, striped over `lanes` (this lane, lanes).
///
/// # Safety
/// As for [`fold`].
#[allow(clippy::too_many_arguments)]
#[cfg_attr(target_arch = "nvptx64", inline(always))]
#[cfg_attr(not(target_arch = "nvptx64"), inline)]
pub unsafe fn reduce<D: Device, T: Element, O: ReduceOp>(
    d: &D,
    lanes: (u64, u64),
    dst: impl Fn(u64) -> *mut T,
    dests: u64,
    src: impl Fn(u64) -> *const T,
    sources: u64,
    n: u64,
    aligned: bool,
    k: u32,
) {
    fold::<D, T, O, true>(d, lanes, dst, dests, src, sources, n, aligned, k)
}

/// `src` copied into every destination `j < dests`: a direct engine's
/// staging and gathers, a local all-gather.
///
/// # Safety
/// As for [`fold`] with one source.
#[cfg_attr(target_arch = "nvptx64", inline(always))]
#[cfg_attr(not(target_arch = "nvptx64"), inline)]
pub unsafe fn copy<D: Device, T: Element, O: ReduceOp>(
    d: &D,
    lanes: (u64, u64),
    dst: impl Fn(u64) -> *mut T,
    dests: u64,
    src: *const T,
    n: u64,
    aligned: bool,
) {
    fold::<D, T, O, false>(d, lanes, dst, dests, |_| src, 1, n, aligned, 1)
}
