//! Fuzzes the planner and its input validation: any collective, k, count up
//! to 2^40, element type, staging size, channel count and offsets. It must
//! never panic or overflow, must reject impossible inputs with a typed
//! error, and valid plans must cover every block once, channel by channel,
//! with every slice inside its staging slot.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ringreduce::internals::{plan, BufferSpan, CallOpts, Plan};
use ringreduce::kernels::abi::{CPU_THREADS, GPU_THREADS};
use ringreduce::kernels::plan::{Chunking, PACK_BYTES};
use ringreduce::{Collective, DataType};

fn take(d: &mut &[u8], n: usize) -> u64 {
    let mut v = 0u64;
    for _ in 0..n {
        let (b, rest) = d.split_first().map(|(b, r)| (*b, r)).unwrap_or((0, &[]));
        v = v << 8 | b as u64;
        *d = rest;
    }
    v
}

fuzz_target!(|data: &[u8]| {
    let mut d = data;
    let c = Collective::ALL[(take(&mut d, 1) % 3) as usize];
    let k = (take(&mut d, 1) % 64 + 1) as usize;
    let n = take(&mut d, 5) % (1 << 40);
    let dtype = DataType::ALL[(take(&mut d, 1) % 10) as usize];
    let buffer = take(&mut d, 4);
    let threads = if take(&mut d, 1) & 1 == 0 { GPU_THREADS } else { CPU_THREADS };
    let requested = match take(&mut d, 1) % 34 {
        0 => None,
        ch => Some(ch),
    };
    let max_channels = take(&mut d, 1) % 33;
    let algo = take(&mut d, 1);
    let sz = dtype.size();
    let (send_len, recv_len) = c.lengths(k as u64, n);
    let spans: Vec<BufferSpan> = (0..k as u64)
        .map(|u| {
            let off = take(&mut d, 1) * sz;
            let bad = take(&mut d, 1);
            let send = (1u64 << 50) + u * (1 << 44) + off;
            BufferSpan {
                send: if bad == 1 { send + 1 } else { send },
                send_len: if bad == 2 { send_len + 1 } else { send_len },
                recv: if bad == 3 { send } else { (1u64 << 51) + u * (1 << 44) + off },
                recv_len,
            }
        })
        .collect();
    let opts = CallOpts {
        buffer_bytes: buffer,
        threads,
        channels: requested,
        max_channels,
        prefetch_rounds: 0,
        fault: None,
        algorithm: ringreduce::Algo::ALL[(algo % 5) as usize],
        direct_half_bytes: if algo & 8 == 0 { 0 } else { buffer },
        direct_channels: 4,
        local_blocks: if algo & 16 == 0 { 0 } else { 132 },
    };
    let conns: Vec<u64> = (0..k as u64).map(|u| (1 << 40) + u * 4096).collect();
    match plan(c, &conns, &spans, dtype, opts) {
        Err(_) => {}
        Ok(Plan::Nothing) | Ok(Plan::Copy { .. }) => assert!(n == 0 || k == 1),
        Ok(Plan::Launch { algorithm, channels, sizing, aligned, works }) => {
            assert_eq!(works.len(), k);
            if algorithm == ringreduce::kernels::Algorithm::Local {
                // A local call's channels are its share of one grid.
                assert!(opts.local_blocks > 0 && channels >= 1);
                assert!(channels * k as u64 <= opts.local_blocks.max(k as u64) || requested.is_some());
            } else {
                assert!((1..=32).contains(&channels));
            }
            assert!(sizing.staging_bytes() <= buffer);
            let g = works[0].geometry;
            if aligned {
                assert!(works.iter().all(|w| w.aligned == 1 && w.residue < PACK_BYTES));
            }
            assert!(works.iter().all(|w| w.geometry == g && w.channels == channels));
            let mut total = 0;
            for b in 0..k as u64 {
                let len = g.block_len(b);
                total += len;
                let mut next = 0;
                for ch in 0..channels {
                    let (off, l) = g.channel_part(ch, len);
                    if l == 0 {
                        continue;
                    }
                    assert_eq!(off, next);
                    next += l;
                    let chunks = Chunking::new(&sizing, g.channel_len(ch));
                    let last = chunks.num_chunks - 1;
                    for c in [0, last] {
                        for s in chunks.slices(c, l) {
                            // Whole slices fit a slot, padding included.
                            assert!(s <= sizing.slot_elems);
                        }
                    }
                    assert!(sizing.slot_elems * sz <= sizing.slot_stride_bytes);
                    if l == g.channel_len(ch) {
                        // The longest share ends exactly in the last chunk.
                        let sl = chunks.slices(last, l);
                        assert_eq!(last * chunks.chunk_elems + sl[0] + sl[1], l);
                    }
                }
                assert_eq!(next, len);
            }
            assert_eq!(total, g.total);
        }
    }
});
