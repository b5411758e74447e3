//! The batched copy: a list of [`CopyDesc`]s, each taken by one group of
//! lanes (a GPU block), with 16-byte accesses where both ends and the
//! length allow, else 4-byte words, else bytes; and the single range, by
//! all lanes.

use crate::abi::{CopyDesc, Task, TASK_THREADS};
use crate::device::Lanes;

#[repr(C, align(16))]
#[derive(Clone, Copy)]
struct Pack([u32; 4]);

/// Copies the `t.n` descriptors at `t.src`.
///
/// # Safety
/// As for [`super::run_phase`]; no two descriptors may overlap.
pub unsafe fn run<L: Lanes>(g: &L, t: &Task) {
    let lanes = g.lanes();
    let group = if lanes < TASK_THREADS as u64 {
        lanes
    } else {
        TASK_THREADS as u64
    };
    let (me, groups) = (g.lane() / group, lanes / group);
    if me >= groups {
        return;
    }
    let sub = g.lane() % group;
    let descs = t.src as *const CopyDesc;
    let mut d = me;
    while d < t.n {
        widest(descs.add(d as usize).read(), sub, group);
        d += groups;
    }
}

/// Copies `t.n` bytes from `t.src` to `t.dst` with all lanes.
///
/// # Safety
/// As for [`super::run_phase`]; the ranges may not overlap.
pub unsafe fn range<L: Lanes>(g: &L, t: &Task) {
    let c = CopyDesc {
        src: t.src,
        dst: t.dst,
        bytes: t.n,
    };
    widest(c, g.lane(), g.lanes());
}

/// Items `sub, sub + group, …` of `c`, in the widest access both ends and
/// the length allow.
#[inline(always)]
unsafe fn widest(c: CopyDesc, sub: u64, group: u64) {
    if (c.src | c.dst | c.bytes).is_multiple_of(16) {
        strided::<Pack>(c, sub, group);
    } else if (c.src | c.dst | c.bytes).is_multiple_of(4) {
        strided::<u32>(c, sub, group);
    } else {
        strided::<u8>(c, sub, group);
    }
}

/// Items `sub, sub + group, …` of `c` as `W`s.
#[inline(always)]
unsafe fn strided<W: Copy>(c: CopyDesc, sub: u64, group: u64) {
    let w = core::mem::size_of::<W>() as u64;
    let (s, d) = (c.src as *const W, c.dst as *mut W);
    let mut i = sub;
    while i < c.bytes / w {
        d.add(i as usize).write(s.add(i as usize).read());
        i += group;
    }
}
