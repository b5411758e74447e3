//! The unrolled copy/reduce loop every step primitive is made of: one
//! generic transfer from one or two sources to one or two destinations.

use crate::device::Device;
use crate::element::Element;
use crate::op::ReduceOp;
use crate::plan::{PACK_BYTES, UNROLL};
use crate::unroll::unroll8;
use core::mem::size_of;

/// What a transfer writes: a copy of one source, the op of both sources,
/// or that finished (the op's last step, e.g. `Avg`'s division).
pub const COPY: u8 = 0;
pub const REDUCE: u8 = 1;
pub const FINAL: u8 = 2;

#[cfg_attr(target_arch = "nvptx64", inline(always))]
#[cfg_attr(not(target_arch = "nvptx64"), inline)]
fn combine<T: Element, O: ReduceOp, const MODE: u8>(incoming: T, own: T, k: u32) -> T {
    match MODE {
        COPY => own,
        REDUCE => O::apply(incoming, own),
        _ => O::finish(O::apply(incoming, own), k),
    }
}

/// Combines two packs lane by lane. Packs travel as `[u32; 4]` (what one
/// vector access moves) and are reinterpreted as lanes of `T` in registers.
#[cfg_attr(target_arch = "nvptx64", inline(always))]
#[cfg_attr(not(target_arch = "nvptx64"), inline)]
fn combine_pack<T: Element, O: ReduceOp, const MODE: u8>(
    incoming: [u32; 4],
    own: [u32; 4],
    k: u32,
) -> [u32; 4] {
    if MODE == COPY {
        return own;
    }
    // SAFETY: `T::Pack` is 16 bytes of plain data, like `[u32; 4]`.
    let i: T::Pack = unsafe { core::mem::transmute_copy(&incoming) };
    let mut o: T::Pack = unsafe { core::mem::transmute_copy(&own) };
    for (o, i) in o.as_mut().iter_mut().zip(i.as_ref()) {
        *o = combine::<T, O, MODE>(*i, *o, k);
    }
    // SAFETY: as above.
    unsafe { core::mem::transmute_copy(&o) }
}

/// Elements of `n` that go one by one before `dst` reaches a pack
/// boundary: all of them off the wide path.
#[cfg_attr(target_arch = "nvptx64", inline(always))]
#[cfg_attr(not(target_arch = "nvptx64"), inline)]
fn scalar_head<T>(dst: *mut T, n: u64, aligned: bool) -> u64 {
    if !aligned {
        return n;
    }
    let mis = (dst as u64) % PACK_BYTES;
    if mis == 0 {
        0
    } else {
        ((PACK_BYTES - mis) / size_of::<T>() as u64).min(n)
    }
}

/// Moves `n` elements: `dst[i] = combine(incoming[i], own[i])`, and the
/// same into `dst2` when `DST2`, striped over `THREADS` producer lanes
/// (`tid` is this lane). `incoming` is not read for [`COPY`].
///
/// With `prefetch_rounds > 0`, each lane also prefetches into L2 the `own`
/// packs it will load that many rounds later.
///
/// When `aligned`, all pointers share their address modulo
/// [`PACK_BYTES`]: a short scalar head brings them to a pack boundary, the
/// body moves 16-byte packs `UNROLL` at a time per lane (all loads of a round
/// before any store, so many are in flight), and a scalar tail finishes.
/// Otherwise every element goes through the scalar loop, still unrolled.
///
/// # Safety
/// All ranges must be valid for `n` elements (`dst2` only when `DST2`);
/// a destination may equal `own` (in place) but must not otherwise overlap
/// the sources.
#[allow(clippy::too_many_arguments)]
#[cfg_attr(target_arch = "nvptx64", inline(always))]
#[cfg_attr(not(target_arch = "nvptx64"), inline)]
pub unsafe fn transfer<
    D: Device,
    T: Element,
    O: ReduceOp,
    const THREADS: u64,
    const MODE: u8,
    const DST2: bool,
>(
    d: &D,
    tid: u64,
    dst: *mut T,
    dst2: *mut T,
    incoming: *const T,
    own: *const T,
    n: u64,
    aligned: bool,
    k: u32,
    prefetch_rounds: u64,
) {
    let sz = size_of::<T>() as u64;
    if !aligned {
        scalar::<T, O, THREADS, MODE, DST2, true>(tid, dst, dst2, incoming, own, 0, n, k);
        return;
    }
    // The head and the tail are each shorter than a pack (at most 15
    // elements): on the GPU's 256 lanes one element per lane at most, so
    // unrolling them would only add code to every module.
    let head = scalar_head::<T>(dst, n, true);
    scalar::<T, O, THREADS, MODE, DST2, false>(tid, dst, dst2, incoming, own, 0, head, k);
    if head == n {
        return;
    }
    let lanes = PACK_BYTES / sz;
    let packs = (n - head) / lanes;
    let pd = dst.add(head as usize) as *mut u8;
    let pd2 = dst2.wrapping_add(head as usize) as *mut u8;
    let pi = incoming.add(head as usize) as *const u8;
    let po = own.add(head as usize) as *const u8;
    let at = |p: u64| (p * PACK_BYTES) as usize;
    let round = UNROLL * THREADS;
    let mut p = tid;
    // A lane runs a full unrolled round while its last pack of the round
    // exists; what is left goes one pack at a time below.
    while p + (UNROLL - 1) * THREADS < packs {
        if prefetch_rounds != 0 {
            // The own input streams from device memory; asking for it a few
            // rounds early turns the loads' misses into L2 hits.
            let q = p + prefetch_rounds * round;
            if q + (UNROLL - 1) * THREADS < packs {
                unroll8!(u => d.prefetch_l2(po.add(at(q + u * THREADS))));
            }
        }
        let o = unroll8!(u => d.load_pack(po.add(at(p + u * THREADS))));
        let r = if MODE == COPY {
            o
        } else {
            let i = unroll8!(u => d.load_pack(pi.add(at(p + u * THREADS))));
            unroll8!(u => combine_pack::<T, O, MODE>(i[u as usize], o[u as usize], k))
        };
        unroll8!(u => d.store_pack(pd.add(at(p + u * THREADS)), r[u as usize]));
        if DST2 {
            unroll8!(u => d.store_pack(pd2.add(at(p + u * THREADS)), r[u as usize]));
        }
        p += round;
    }
    while p < packs {
        let o = d.load_pack(po.add(at(p)));
        let r = if MODE == COPY {
            o
        } else {
            combine_pack::<T, O, MODE>(d.load_pack(pi.add(at(p))), o, k)
        };
        d.store_pack(pd.add(at(p)), r);
        if DST2 {
            d.store_pack(pd2.add(at(p)), r);
        }
        p += THREADS;
    }
    let done = head + packs * lanes;
    scalar::<T, O, THREADS, MODE, DST2, false>(tid, dst, dst2, incoming, own, done, n, k);
}

/// Elements `from..to`, one per lane per iteration, `UNROLL` at a time
/// when `UNROLLED`.
#[allow(clippy::too_many_arguments)]
#[cfg_attr(target_arch = "nvptx64", inline(always))]
#[cfg_attr(not(target_arch = "nvptx64"), inline)]
unsafe fn scalar<
    T: Element,
    O: ReduceOp,
    const THREADS: u64,
    const MODE: u8,
    const DST2: bool,
    const UNROLLED: bool,
>(
    tid: u64,
    dst: *mut T,
    dst2: *mut T,
    incoming: *const T,
    own: *const T,
    from: u64,
    to: u64,
    k: u32,
) {
    let round = UNROLL * THREADS;
    let mut e = from + tid;
    let at = |e: u64| e as usize;
    while UNROLLED && e + round - THREADS < to {
        let o = unroll8!(u => own.add(at(e + u * THREADS)).read());
        let r = if MODE == COPY {
            o
        } else {
            let i = unroll8!(u => incoming.add(at(e + u * THREADS)).read());
            unroll8!(u => combine::<T, O, MODE>(i[u as usize], o[u as usize], k))
        };
        unroll8!(u => dst.add(at(e + u * THREADS)).write(r[u as usize]));
        if DST2 {
            unroll8!(u => dst2.add(at(e + u * THREADS)).write(r[u as usize]));
        }
        e += round;
    }
    while e < to {
        let o = own.add(at(e)).read();
        let r = if MODE == COPY {
            o
        } else {
            combine::<T, O, MODE>(incoming.add(at(e)).read(), o, k)
        };
        dst.add(at(e)).write(r);
        if DST2 {
            dst2.add(at(e)).write(r);
        }
        e += THREADS;
    }
}

/// `op`'s last step over a pack, lane by lane (`Avg`'s division).
#[cfg_attr(target_arch = "nvptx64", inline(always))]
#[cfg_attr(not(target_arch = "nvptx64"), inline)]
fn finish_pack<T: Element, O: ReduceOp>(v: [u32; 4], k: u32) -> [u32; 4] {
    // SAFETY: `T::Pack` is 16 bytes of plain data, like `[u32; 4]`.
    let mut o: T::Pack = unsafe { core::mem::transmute_copy(&v) };
    for x in o.as_mut().iter_mut() {
        *x = O::finish(*x, k);
    }
    // SAFETY: as above.
    unsafe { core::mem::transmute_copy(&o) }
}

/// `load(0) op load(1) op ... op load(n - 1)`, in that order, with the
/// loads issued eight at a time so that their round trips overlap: a
/// small direct collective is a chain of such folds, and one source after
/// another would pay each peer's latency in turn. Absent slots of a batch
/// load a present source again and are not folded; one source is a copy.
/// `n` must be at least 1.
#[cfg_attr(target_arch = "nvptx64", inline(always))]
#[cfg_attr(not(target_arch = "nvptx64"), inline)]
fn fold_batched<V: Copy>(n: u64, load: impl Fn(u64) -> V, apply: impl Fn(V, V) -> V) -> V {
    if n == 1 {
        return load(0);
    }
    // Folded with constant slots (`unroll8!`), so the batch stays in
    // registers whatever the op's size.
    let x = unroll8!(u => load(if u < n { u } else { 0 }));
    let mut acc = x[0];
    let _ = unroll8!(u => if u >= 1 && u < n {
        acc = apply(acc, x[u as usize]);
    });
    let mut q = UNROLL;
    while q < n {
        let x = unroll8!(u => load(if q + u < n { q + u } else { q }));
        let _ = unroll8!(u => if q + u < n {
            acc = apply(acc, x[u as usize]);
        });
        q += UNROLL;
    }
    acc
}

/// Folds `sources` inputs into `dests` destinations, striped over `lanes`
/// lanes (`lane` is this one): `dst(j)[i] = src(0)[i] op src(1)[i] op
/// ...`, in that order whatever the lane, then finished when `FINISH`. One
/// source copies. The direct and local collectives are made of it: their
/// fold order is the user-rank order, so every rank's result has the same
/// bits. The striping is a runtime value so that the direct collectives
/// can give each block its own group of lanes.
///
/// When `aligned`, every source and destination shares `dst(0)`'s address
/// modulo [`PACK_BYTES`] and the body moves `UNROLL` packs per lane and
/// source.
///
/// # Safety
/// `src(u)` for `u < sources` and `dst(j)` for `j < dests` must be valid
/// for `n` elements; a destination may equal a source (in place: each lane
/// loads every source of an element before it stores it) but must not
/// otherwise overlap one; `sources >= 1` and `dests >= 1`.
#[allow(clippy::too_many_arguments)]
#[cfg_attr(target_arch = "nvptx64", inline(always))]
#[cfg_attr(not(target_arch = "nvptx64"), inline)]
pub unsafe fn fold<D: Device, T: Element, O: ReduceOp, const FINISH: bool>(
    d: &D,
    (lane, lanes): (u64, u64),
    dst: impl Fn(u64) -> *mut T,
    dests: u64,
    src: impl Fn(u64) -> *const T,
    sources: u64,
    n: u64,
    aligned: bool,
    k: u32,
) {
    let sz = size_of::<T>() as u64;
    let head = scalar_head::<T>(dst(0), n, aligned);
    let lanes_per_pack = PACK_BYTES / sz;
    let packs = (n - head) / lanes_per_pack;
    let byte = |p: *const T| p.add(head as usize) as *const u8;
    let byte_mut = |p: *mut T| p.wrapping_add(head as usize) as *mut u8;
    let at = |p: u64| (p * PACK_BYTES) as usize;
    let round = UNROLL * lanes;
    let mut p = lane;
    while p + (UNROLL - 1) * lanes < packs {
        let s0 = byte(src(0));
        let mut acc = unroll8!(u => d.load_pack(s0.add(at(p + u * lanes))));
        for q in 1..sources {
            let sq = byte(src(q));
            let x = unroll8!(u => d.load_pack(sq.add(at(p + u * lanes))));
            acc = unroll8!(u => combine_pack::<T, O, REDUCE>(acc[u as usize], x[u as usize], k));
        }
        if FINISH {
            acc = unroll8!(u => finish_pack::<T, O>(acc[u as usize], k));
        }
        for j in 0..dests {
            let pd = byte_mut(dst(j));
            unroll8!(u => d.store_pack(pd.add(at(p + u * lanes)), acc[u as usize]));
        }
        p += round;
    }
    while p < packs {
        let mut acc = fold_batched(
            sources,
            |q| d.load_pack(byte(src(q)).add(at(p))),
            |a, x| combine_pack::<T, O, REDUCE>(a, x, k),
        );
        if FINISH {
            acc = finish_pack::<T, O>(acc, k);
        }
        for j in 0..dests {
            d.store_pack(byte_mut(dst(j)).add(at(p)), acc);
        }
        p += lanes;
    }
    // The scalar head and tail, in one loop so that the body is one copy;
    // their bounds are chosen per pass, since an array of them would live
    // in local memory.
    let tail = head + packs * lanes_per_pack;
    for part in 0..2 {
        let (from, to) = if part == 0 { (0, head) } else { (tail, n) };
        let mut e = from + lane;
        while e < to {
            let acc = fold_batched(sources, |u| src(u).add(e as usize).read(), O::apply);
            let v = if FINISH { O::finish(acc, k) } else { acc };
            for j in 0..dests {
                dst(j).add(e as usize).write(v);
            }
            e += lanes;
        }
    }
}
