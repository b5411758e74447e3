//! A block's lanes split into groups over independent pieces of work.
//!
//! A small collective has several short pieces per block (a direct
//! collective's blocks, a local call's segments); moved one after another,
//! each costs a memory round trip, so a few elements per rank take
//! microseconds. One group per piece moves them at once. Groups are only
//! for pieces of like size: the whole grid waits for the group with the
//! largest piece, so one long piece wants every lane of the block.

/// Group `g` of `groups` runs pieces `g, g + groups, ...` of `count`.
pub struct Groups {
    /// This lane's first piece, `count` when it has none.
    pub first: u64,
    pub groups: u64,
    /// This lane's place in its group, and the group's size: the striping
    /// of every fold it runs.
    pub lanes: (u64, u64),
}

impl Groups {
    /// Lane `tid` of `threads`, over `count` pieces.
    #[cfg_attr(target_arch = "nvptx64", inline(always))]
    #[cfg_attr(not(target_arch = "nvptx64"), inline)]
    pub fn of(tid: u64, threads: u64, count: u64) -> Groups {
        if count <= 1 {
            // Every lane in one group, without the divisions below: the
            // common case, and a small call's latency is made of such
            // chains.
            return Groups {
                // With no piece, 0 is also `count`.
                first: 0,
                groups: 1,
                lanes: (tid, threads),
            };
        }
        let groups = count.clamp(1, threads);
        let size = threads / groups;
        let group = tid / size;
        Groups {
            first: if group < groups { group } else { count },
            groups,
            lanes: (tid % size, size),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Groups;

    /// Every piece is taken by exactly one group (its lane 0 counted), and
    /// every lane's place lies inside its group.
    #[test]
    fn every_piece_is_run_once_by_a_full_group() {
        for threads in [1u64, 4, 256] {
            for count in [0u64, 1, 2, 3, 7, 8, 255, 256, 1000] {
                let mut runs = [0u64; 1000];
                for tid in 0..threads {
                    let g = Groups::of(tid, threads, count);
                    let mut i = g.first;
                    while i < count {
                        if g.lanes.0 == 0 {
                            runs[i as usize] += 1;
                        }
                        assert!(g.lanes.0 < g.lanes.1);
                        i += g.groups;
                    }
                }
                assert!(runs[..count as usize].iter().all(|&r| r == 1));
            }
        }
    }
}
