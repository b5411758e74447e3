//! Property tests of the sizing and ring rules: coverage, bounds, alignment.

use proptest::prelude::*;
use ringreduce_kernels::plan::{
    block_residue, common_residue, PlanError, Sizing, CPU_THREADS, GPU_THREADS, NUM_SUBCHUNKS,
    PACK_BYTES,
};
use ringreduce_kernels::ring::{block_for_step, ring_index_for_step};

/// Checks one chunk's slices: they tile the chunk, every slice but the
/// last of the collective starts on a tile boundary (so it keeps the
/// block's residue), and every slot access stays inside the staging buffer.
/// Unpadded plans are only used when every residue is 0.
fn check_chunk(
    s: &Sizing,
    k: u64,
    c: u64,
    elem: u64,
    buffer: u64,
    off_expected: u64,
    padded: bool,
) -> u64 {
    let residues: &[u64] = if padded {
        &[0, PACK_BYTES - elem]
    } else {
        &[0]
    };
    let sl = s.slices(c);
    let mut off = off_expected;
    assert_eq!(
        off,
        c * s.chunk_elems,
        "chunk {c} starts where the previous ended"
    );
    for (sub, &len) in sl.iter().enumerate() {
        assert_eq!(
            (off * elem) % PACK_BYTES,
            0,
            "slice start keeps the residue"
        );
        for b in [0, k - 1] {
            for &residue in residues {
                let end = s.slot_offset(b, sub as u64) + residue + len * elem;
                assert!(end <= s.staging_bytes(k), "slot end {end} past staging");
                // A slot never runs into the next one.
                assert!(residue + len * elem <= s.slot_stride_bytes);
            }
        }
        off += len;
    }
    assert!(s.staging_bytes(k) <= buffer);
    off
}

fn check_plan(
    k: u64,
    n: u64,
    elem: u64,
    buffer: u64,
    threads: u64,
    padded: bool,
) -> Result<(), TestCaseError> {
    // The buffer check is the same with or without padding.
    prop_assert_eq!(
        Sizing::new(k, n, elem, buffer, threads, padded).is_ok(),
        Sizing::new(k, n, elem, buffer, threads, !padded).is_ok()
    );
    match Sizing::new(k, n, elem, buffer, threads, padded) {
        Err(PlanError::BufferTooSmall { need, have }) => {
            prop_assert_eq!(have, buffer);
            prop_assert!(need > buffer);
            // The error is honest: the stated need is enough.
            prop_assert!(Sizing::new(k, n, elem, need, threads, padded).is_ok());
        }
        Err(PlanError::Overflow) => {
            prop_assert!(n.checked_mul(elem).and_then(|b| b.checked_mul(k)).is_none());
        }
        Err(e) => prop_assert!(false, "unexpected {:?}", e),
        Ok(s) => {
            prop_assert_eq!(s.chunk_elems, NUM_SUBCHUNKS * s.slice_elems);
            prop_assert_eq!(s.slice_elems % s.tile_elems, 0);
            prop_assert!(s.slice_elems > 0);
            if n == 0 {
                prop_assert_eq!(s.num_chunks, 0);
                return Ok(());
            }
            // Total coverage, computed without walking every chunk.
            let last = s.slices(s.num_chunks - 1);
            prop_assert_eq!((s.num_chunks - 1) * s.chunk_elems + last[0] + last[1], n);
            // Walk the first chunks and the last ones.
            let walk: Vec<u64> = if s.num_chunks <= 64 {
                (0..s.num_chunks).collect()
            } else {
                (0..4).chain(s.num_chunks - 4..s.num_chunks).collect()
            };
            for c in walk {
                check_chunk(&s, k, c, elem, buffer, c * s.chunk_elems, padded);
            }
            // The remainder rule: with 2-4 chunks and a remainder under half
            // a chunk, the slices halve and the last chunk absorbs the rest.
            let base = Sizing::new(k, 0, elem, buffer, threads, padded).unwrap();
            let c = base.chunk_elems;
            let rem = n % c;
            let halve = n > c
                && rem > 0
                && n < 5 * c
                && 2 * rem < c
                && base.slice_elems >= 2 * base.tile_elems;
            if halve {
                prop_assert!(s.chunk_elems < c);
                prop_assert!(last[0] + last[1] >= s.chunk_elems, "no tiny last chunk");
            } else {
                prop_assert_eq!(s.chunk_elems, c);
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 100_000, ..ProptestConfig::default() })]

    #[test]
    fn sizing_covers_and_stays_in_bounds(
        k in 1u64..=64,
        n in prop_oneof![0u64..5000, 0u64..(1 << 24), 0u64..(1 << 40)],
        elem in prop::sample::select(vec![1u64, 2, 4, 8]),
        buffer in prop_oneof![1u64..(1 << 16), (1u64 << 16)..(1 << 26)],
        gpu in any::<bool>(),
        padded in any::<bool>(),
    ) {
        let threads = if gpu { GPU_THREADS } else { CPU_THREADS };
        check_plan(k, n, elem, buffer, threads, padded)?;
    }

}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

    #[test]
    fn ring_reduces_every_block_once_into_its_owner(
        perm in (1usize..=64).prop_flat_map(|k| Just((0..k as u32).collect::<Vec<_>>()).prop_shuffle()),
    ) {
        let k = perm.len() as u64;
        for u in 0..k {
            // The positions that handle block u, step by step.
            let mut seen = vec![false; k as usize];
            let mut last = 0;
            for step in 0..k {
                let pos = (0..k).filter(|&p| block_for_step(&perm, p, step) == u).collect::<Vec<_>>();
                prop_assert_eq!(pos.len(), 1, "one position per block per step");
                prop_assert!(!seen[pos[0] as usize], "each rank adds block {} once", u);
                seen[pos[0] as usize] = true;
                if step > 0 {
                    // Data flows to the successor only.
                    prop_assert_eq!(pos[0], (last + 1) % k);
                }
                last = pos[0];
            }
            prop_assert_eq!(perm[last as usize] as u64, u, "the last step is at block {}'s owner", u);
            prop_assert!(ring_index_for_step(k, last, k - 1) == last);
        }
    }

}

proptest! {
    #![proptest_config(ProptestConfig { cases: 20_000, ..ProptestConfig::default() })]

    #[test]
    fn residues_agree_with_the_pack_path(
        k in 1u64..=16,
        n in 0u64..100_000,
        elem in prop::sample::select(vec![1u64, 2, 4, 8]),
        base in prop::collection::vec(0u64..64, 16),
        same in any::<bool>(),
    ) {
        let s0 = base[0] * elem;
        let ranks: Vec<(u64, u64, u64)> = (0..k).map(|u| {
            let send = if same { 4096 * (u + 1) + s0 } else { 4096 * (u + 1) + base[u as usize] * elem };
            let recv = (1 << 30) | ((send + u * n * elem) % PACK_BYTES);
            (u, send, recv)
        }).collect();
        match common_residue(ranks.iter().copied(), n, elem) {
            Some(r) => {
                for &(u, send, recv) in &ranks {
                    prop_assert_eq!(send % PACK_BYTES, r);
                    for b in 0..k {
                        prop_assert_eq!((send + b * n * elem) % PACK_BYTES, block_residue(r, b, n, elem));
                    }
                    prop_assert_eq!(recv % PACK_BYTES, block_residue(r, u, n, elem));
                }
            }
            None => prop_assert!(ranks.iter().any(|&(_, s, _)| s % PACK_BYTES != ranks[0].1 % PACK_BYTES)),
        }
    }
}
