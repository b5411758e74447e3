//! The primitives the ring steps are made of: bounded waits, signals, and
//! the unrolled copy/reduce loops.

use crate::args::{KernelArgs, StatusRecord, WaitKind, WaitOutcome};
use crate::device::{Device, Scope};
use crate::element::Element;
use crate::op::ReduceOp;
use crate::plan::{PACK_BYTES, UNROLL};
use core::mem::size_of;

/// Polls between two looks at the abort word and the clock. The abort word
/// sits in host memory, so reading it costs a bus round trip; one look per
/// few hundred polls keeps that off the fast path while still reacting to
/// `abort()` within microseconds.
pub const POLLS_PER_CHECK: u32 = 256;

/// What a wait needs to know about its rank, passed by value so that the
/// (out-of-line) wait does not force the kernel arguments into local memory.
#[derive(Clone, Copy, Debug)]
pub struct WaitCtx {
    pub abort_flag: u64,
    pub timeout_ns: u64,
    pub status: u64,
    pub user_rank: u64,
    pub ring_pos: u64,
    pub scope: Scope,
}

impl WaitCtx {
    #[inline(always)]
    pub fn of(a: &KernelArgs) -> Self {
        WaitCtx {
            abort_flag: a.abort_flag,
            timeout_ns: a.timeout_ns,
            status: a.status,
            user_rank: a.user_rank,
            ring_pos: a.ring_pos,
            scope: a.scope(),
        }
    }
}

/// Where a wait happened, for the status record.
#[derive(Clone, Copy, Debug)]
pub struct WaitSite {
    pub kind: WaitKind,
    pub chunk: u64,
    pub step: u64,
    pub sub: u64,
    pub expected: u64,
}

/// Spins until `ready(flag)` holds; the acquire loads make what the writer
/// published before its flag store visible to the loads after. Gives up
/// when the host sets the abort word or when `timeout_ns` passes without
/// `ready`, writes the status record, and returns `false`.
///
/// # Safety
/// `flag` must be a valid flag address; `args` must describe this rank.
#[inline(never)]
pub unsafe fn wait_until<D: Device, F: Fn(u64) -> bool>(
    d: &D,
    args: WaitCtx,
    flag: u64,
    site: WaitSite,
    ready: F,
) -> bool {
    let flag = flag as *const u64;
    let mut polls: u32 = 0;
    let mut start: u64 = 0;
    loop {
        let seen = d.load_acquire(flag, args.scope);
        if ready(seen) {
            return true;
        }
        polls = polls.wrapping_add(1);
        if polls.is_multiple_of(POLLS_PER_CHECK) {
            let now = d.now_ns();
            if start == 0 {
                start = now.max(1);
            }
            let waited = now.saturating_sub(start);
            let aborted =
                args.abort_flag != 0 && d.load_volatile(args.abort_flag as *const u64) != 0;
            let timed_out = args.timeout_ns != 0 && waited > args.timeout_ns;
            if aborted || timed_out {
                let outcome = if aborted {
                    WaitOutcome::Aborted
                } else {
                    WaitOutcome::TimedOut
                };
                report(d, &args, outcome, site, seen, waited);
                return false;
            }
        }
        d.spin_hint();
    }
}

/// Writes this rank's status record, outcome last, so that a host reading
/// a nonzero outcome sees the whole record.
unsafe fn report<D: Device>(
    d: &D,
    args: &WaitCtx,
    outcome: WaitOutcome,
    site: WaitSite,
    seen: u64,
    waited: u64,
) {
    if args.status == 0 {
        return;
    }
    let rec = StatusRecord {
        outcome: 0,
        user_rank: args.user_rank,
        ring_pos: args.ring_pos,
        chunk: site.chunk,
        step: site.step,
        sub: site.sub,
        wait_kind: site.kind as u64,
        expected: site.expected,
        seen,
        waited_ns: waited,
    };
    let words = &rec as *const StatusRecord as *const u64;
    let dst = args.status as *mut u64;
    for i in 1..StatusRecord::WORDS {
        d.store_volatile(dst.add(i), *words.add(i));
    }
    // The host reads the record, whatever the peers' scope.
    d.fence(Scope::Sys);
    d.store_volatile(dst, outcome as u64);
    d.fence(Scope::Sys);
}

/// Publishes `value` in a peer's flag: the fence releases every store the
/// block made before the barrier that preceded this call.
///
/// # Safety
/// `flag` must be a valid flag address.
#[inline(always)]
pub unsafe fn signal<D: Device>(d: &D, scope: Scope, flag: u64, value: u64) {
    d.fence(scope);
    d.store_volatile(flag as *mut u64, value);
}

/// What a transfer writes: the own input (step 0), the op of incoming and
/// own (middle steps), or that finished (the last step).
pub const COPY: u8 = 0;
pub const REDUCE: u8 = 1;
pub const FINAL: u8 = 2;

#[inline(always)]
fn combine<T: Element, O: ReduceOp, const MODE: u8>(incoming: T, own: T, k: u32) -> T {
    match MODE {
        COPY => own,
        REDUCE => O::apply(incoming, own),
        _ => O::finish(O::apply(incoming, own), k),
    }
}

/// Combines two packs lane by lane. Packs travel as `[u32; 4]` (what one
/// vector access moves) and are reinterpreted as lanes of `T` in registers.
#[inline(always)]
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

/// Expands `$body` once per unrolled slot `u = 0..8`, with constant `u`, so
/// that every value of a round stays in registers (an array indexed in a
/// loop would be placed in local memory).
macro_rules! unroll8 {
    ($u:ident => $body:expr) => {
        [
            {
                let $u = 0u64;
                $body
            },
            {
                let $u = 1u64;
                $body
            },
            {
                let $u = 2u64;
                $body
            },
            {
                let $u = 3u64;
                $body
            },
            {
                let $u = 4u64;
                $body
            },
            {
                let $u = 5u64;
                $body
            },
            {
                let $u = 6u64;
                $body
            },
            {
                let $u = 7u64;
                $body
            },
        ]
    };
}

const _: () = assert!(UNROLL == 8, "unroll8! expands exactly UNROLL slots");

/// Moves `n` elements: `dst[i] = combine(incoming[i], own[i])`, striped over
/// `THREADS` producer lanes (`tid` is this lane). `incoming` is not read for
/// [`COPY`].
///
/// With `prefetch_rounds > 0`, each lane also prefetches into L2 the `own`
/// packs it will load that many rounds later.
///
/// When `aligned`, the three pointers share their address modulo
/// [`PACK_BYTES`]: a short scalar head brings them to a pack boundary, the
/// body moves 16-byte packs `UNROLL` at a time per lane (all loads of a round
/// before any store, so many are in flight), and a scalar tail finishes.
/// Otherwise every element goes through the scalar loop, still unrolled.
///
/// # Safety
/// All three ranges must be valid for `n` elements; `dst` may equal `own`
/// (in place) but must not otherwise overlap the sources.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub unsafe fn transfer<D: Device, T: Element, O: ReduceOp, const THREADS: u64, const MODE: u8>(
    d: &D,
    tid: u64,
    dst: *mut T,
    incoming: *const T,
    own: *const T,
    n: u64,
    aligned: bool,
    k: u32,
    prefetch_rounds: u64,
) {
    let sz = size_of::<T>() as u64;
    let head = if aligned {
        let mis = (dst as u64) % PACK_BYTES;
        if mis == 0 {
            0
        } else {
            ((PACK_BYTES - mis) / sz).min(n)
        }
    } else {
        n
    };
    scalar::<T, O, THREADS, MODE>(tid, dst, incoming, own, 0, head, k);
    if head == n {
        return;
    }
    let lanes = PACK_BYTES / sz;
    let packs = (n - head) / lanes;
    let pd = dst.add(head as usize) as *mut u8;
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
        p += THREADS;
    }
    let done = head + packs * lanes;
    scalar::<T, O, THREADS, MODE>(tid, dst, incoming, own, done, n, k);
}

/// Elements `from..to`, one per lane per iteration, `UNROLL` at a time.
#[inline(always)]
unsafe fn scalar<T: Element, O: ReduceOp, const THREADS: u64, const MODE: u8>(
    tid: u64,
    dst: *mut T,
    incoming: *const T,
    own: *const T,
    from: u64,
    to: u64,
    k: u32,
) {
    let round = UNROLL * THREADS;
    let mut e = from + tid;
    let at = |e: u64| e as usize;
    while e + round - THREADS < to {
        let o = unroll8!(u => own.add(at(e + u * THREADS)).read());
        let r = if MODE == COPY {
            o
        } else {
            let i = unroll8!(u => incoming.add(at(e + u * THREADS)).read());
            unroll8!(u => combine::<T, O, MODE>(i[u as usize], o[u as usize], k))
        };
        unroll8!(u => dst.add(at(e + u * THREADS)).write(r[u as usize]));
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
        e += THREADS;
    }
}
