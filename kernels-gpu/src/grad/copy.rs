//! The batched copy: a list of [`CopyDesc`]s, each taken by one group of
//! lanes (a GPU block), with 16-byte accesses where both ends and the
//! length allow, else 4-byte words, else bytes; and the single range, by
//! all lanes.

use super::four_at_a_time;
use super::lanes::Lanes;
use crate::grad::abi::{CopyDesc, Task, TASK_THREADS};

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
        widest(g, descs.add(d as usize).read(), sub, group);
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
    widest(g, c, g.lane(), g.lanes());
}

/// Items `sub, sub + group, …` of `c`, in the widest access both ends and
/// the length allow.
#[cfg_attr(target_arch = "nvptx64", inline(always))]
#[cfg_attr(not(target_arch = "nvptx64"), inline)]
unsafe fn widest<L: Lanes>(g: &L, c: CopyDesc, sub: u64, group: u64) {
    let aligned = |a: u64| (c.src | c.dst | c.bytes).is_multiple_of(a);
    if aligned(16) {
        let load = |p: *const [u32; 4]| g.load_pack(p as *const u8);
        let store = |p: *mut [u32; 4], v| g.store_pack(p as *mut u8, v);
        strided(c, sub, group, load, store);
    } else if aligned(4) {
        strided(c, sub, group, |p: *const u32| p.read(), |p, v| p.write(v));
    } else {
        strided(c, sub, group, |p: *const u8| p.read(), |p, v| p.write(v));
    }
}

/// Items `sub, sub + group, …` of `c` as `W`s, four loads in flight per
/// lane ([`four_at_a_time`]).
#[cfg_attr(target_arch = "nvptx64", inline(always))]
#[cfg_attr(not(target_arch = "nvptx64"), inline)]
unsafe fn strided<W: Copy>(
    c: CopyDesc,
    sub: u64,
    group: u64,
    load: impl Fn(*const W) -> W,
    store: impl Fn(*mut W, W),
) {
    let w = core::mem::size_of::<W>() as u64;
    let (s, d) = (c.src as *const W, c.dst as *mut W);
    four_at_a_time(
        sub,
        group,
        c.bytes / w,
        |i| load(s.add(i as usize)),
        |i, v| store(d.add(i as usize), v),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grad::abi::TaskKind;
    use crate::grad::lanes::SeqLanes;

    /// Every width (16-byte, 4-byte and byte accesses), lengths past and
    /// short of the four-at-a-time body, and a descriptor list longer than
    /// the lane groups: each byte lands once, and nothing else is written.
    #[test]
    fn copies_every_byte_once_at_every_width() {
        let mut src = [0u8; 40_000];
        for (i, b) in src.iter_mut().enumerate() {
            *b = (i * 7 + 3) as u8;
        }
        for (shift, lanes) in [(0usize, 256u64), (4, 256), (1, 256), (0, 1024), (3, 7)] {
            let mut dst = [0xEEu8; 40_000];
            let (s, d) = (src.as_ptr() as u64, dst.as_mut_ptr() as u64);
            // Buffers from the allocator are 16-byte aligned or not; align
            // the ranges by hand so `shift` alone picks the width.
            let (s0, d0) = (s.next_multiple_of(16), d.next_multiple_of(16));
            let lens = [0u64, 16, 48, 4096, 16 * 1024 + 16, 5000 + shift as u64, 3];
            let mut descs = [CopyDesc {
                src: 0,
                dst: 0,
                bytes: 0,
            }; 7];
            let mut at = 0u64;
            for (c, len) in descs.iter_mut().zip(lens) {
                let off = at + shift as u64;
                *c = CopyDesc {
                    src: s0 + off,
                    dst: d0 + off,
                    bytes: len,
                };
                at = (off + len + 64).next_multiple_of(16);
            }
            let task = Task {
                kind: TaskKind::Copy as u64,
                src: descs.as_ptr() as u64,
                n: descs.len() as u64,
                ..Task::default()
            };
            for lane in 0..lanes {
                // SAFETY: every descriptor lies inside both vectors.
                unsafe { run(&SeqLanes::new(lane, lanes), &task) };
            }
            let (so, dof) = ((s0 - s) as usize, (d0 - d) as usize);
            let mut want = [0xEEu8; 40_000];
            for c in &descs {
                let (a, n) = ((c.src - s0) as usize, c.bytes as usize);
                want[dof + a..dof + a + n].copy_from_slice(&src[so + a..so + a + n]);
            }
            assert!(dst == want, "shift {shift}, {lanes} lanes");
        }
    }
}
