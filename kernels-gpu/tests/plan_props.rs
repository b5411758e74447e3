//! Property tests of the sizing and ring rules: coverage, bounds, alignment.

use proptest::prelude::*;
use ringreduce_kernels::abi::{CPU_THREADS, GPU_THREADS};
use ringreduce_kernels::plan::{
    block_residue, common_residue, Chunking, Geometry, PlanError, Sizing, NUM_SUBCHUNKS,
    PACK_BYTES, STAGING_SLOTS,
};
use ringreduce_kernels::ring::{block_for_step, ring_index_for_step};
use ringreduce_kernels::types::Collective;

/// Checks every slice of one block's share of one channel, or the first
/// and last chunks when there are many: they tile the share in order, each
/// starts on a tile boundary (so it keeps the block's residue), and each
/// fits its slot, padding included. Returns the elements covered.
fn check_share(
    s: &Sizing,
    chunks: &Chunking,
    len: u64,
    elem: u64,
    padded: bool,
) -> Result<u64, TestCaseError> {
    let residue = if padded { PACK_BYTES - elem } else { 0 };
    let n = chunks.num_chunks;
    let walk: Vec<u64> = if n <= 256 {
        (0..n).collect()
    } else {
        (0..4).chain(n - 4..n).collect()
    };
    let mut covered = 0;
    for c in walk {
        let sl = chunks.slices(c, len);
        let mut off = c * chunks.chunk_elems;
        for &l in &sl {
            if l > 0 {
                prop_assert_eq!(off % chunks.tile_elems, 0, "slice start keeps the residue");
                prop_assert!(
                    residue + l * elem <= s.slot_stride_bytes,
                    "slice overruns its slot"
                );
            }
            off += l;
        }
        prop_assert!(off - c * chunks.chunk_elems <= len.saturating_sub(c * chunks.chunk_elems));
        if sl.iter().sum::<u64>() > 0 {
            // Where the last non-empty chunk ends.
            covered = off;
        }
    }
    Ok(covered)
}

#[allow(clippy::too_many_arguments)]
fn check_plan(
    coll: Collective,
    k: u64,
    n: u64,
    channels: u64,
    elem: u64,
    buffer: u64,
    threads: u64,
    padded: bool,
) -> Result<(), TestCaseError> {
    // The buffer check is the same with or without padding.
    prop_assert_eq!(
        Sizing::new(elem, buffer, threads, padded).is_ok(),
        Sizing::new(elem, buffer, threads, !padded).is_ok()
    );
    let s = match Sizing::new(elem, buffer, threads, padded) {
        Err(PlanError::BufferTooSmall { need, have }) => {
            prop_assert_eq!(have, buffer);
            prop_assert!(need > buffer);
            // The error is honest: the stated need is enough.
            prop_assert!(Sizing::new(elem, need, threads, padded).is_ok());
            return Ok(());
        }
        Err(e) => return Err(TestCaseError::fail(format!("unexpected {e:?}"))),
        Ok(s) => s,
    };
    prop_assert_eq!(s.slot_elems % s.tile_elems, 0);
    prop_assert!(s.slot_elems > 0);
    prop_assert!(s.staging_bytes() <= buffer);
    for j in [0, STAGING_SLOTS - 1, 12345] {
        prop_assert!(s.slot_offset(j) + s.slot_stride_bytes <= s.staging_bytes());
    }
    let g = Geometry::new(coll, k, n, elem, s.tile_elems, channels);
    prop_assert_eq!(g.share % s.tile_elems, 0);
    // Every block is covered once, by the channels in order, and blocks
    // tile the whole buffer.
    let mut total = 0;
    for b in 0..k {
        let len = g.block_len(b);
        total += len;
        if b > 0 && b + 1 < k && k > 4 {
            continue;
        }
        let mut next = 0;
        for ch in 0..channels {
            let (off, l) = g.channel_part(ch, len);
            prop_assert!(l <= g.channel_len(ch));
            if l == 0 {
                continue;
            }
            prop_assert_eq!(off, next);
            let chunks = Chunking::new(&s, g.channel_len(ch));
            prop_assert_eq!(chunks.chunk_elems, NUM_SUBCHUNKS * chunks.slice_elems);
            prop_assert!(chunks.slice_elems <= s.slot_elems);
            let covered = check_share(&s, &chunks, l, elem, padded)?;
            prop_assert_eq!(covered, l, "channel {} of block {}", ch, b);
            next += l;
        }
        prop_assert_eq!(next, len);
    }
    prop_assert_eq!(total, g.total);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 20_000, ..ProptestConfig::default() })]

    #[test]
    fn plans_cover_every_block_and_stay_in_bounds(
        coll in prop::sample::select(Collective::ALL.to_vec()),
        k in 2u64..=16,
        n in prop_oneof![0u64..5000, 0u64..(1 << 22), 0u64..(1 << 34)],
        channels in 1u64..=32,
        elem in prop::sample::select(vec![1u64, 2, 4, 8]),
        buffer in prop_oneof![1u64..(1 << 16), (1u64 << 16)..(1 << 26)],
        gpu in any::<bool>(),
        padded in any::<bool>(),
    ) {
        let threads = if gpu { GPU_THREADS } else { CPU_THREADS };
        check_plan(coll, k, n, channels, elem, buffer, threads, padded)?;
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
