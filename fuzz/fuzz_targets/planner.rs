//! Fuzzes the planner and its input validation: any k, counts up to 2^40,
//! any element type, buffer size and offsets. It must never panic or
//! overflow, must reject impossible inputs with a typed error, and valid
//! plans must keep every staging access inside the buffer.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ringreduce::kernels::plan::{block_residue, CPU_THREADS, GPU_THREADS, PACK_BYTES};
use ringreduce::internals::{plan_reduce_scatter, BufferSpan, Control, Plan, RankWiring};
use ringreduce::{DataType, RingOrder};

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
    let k = (take(&mut d, 1) % 64 + 1) as usize;
    let n = take(&mut d, 5) % (1 << 40);
    let dtype = DataType::ALL[(take(&mut d, 1) % 10) as usize];
    let buffer = take(&mut d, 4);
    let threads = if take(&mut d, 1) & 1 == 0 { GPU_THREADS } else { CPU_THREADS };
    let sz = dtype.size();
    let spans: Vec<BufferSpan> = (0..k as u64)
        .map(|u| {
            let off = take(&mut d, 1) * sz;
            let bad = take(&mut d, 1);
            let send = (1u64 << 50) + u * (1 << 44) + off;
            BufferSpan {
                send: if bad == 1 { send + 1 } else { send },
                send_len: if bad == 2 { n * k as u64 + 1 } else { n.wrapping_mul(k as u64) },
                recv: if bad == 3 { send } else { (1u64 << 51) + u * (1 << 44) + off },
                recv_len: n,
            }
        })
        .collect();
    let wiring: Vec<RankWiring> = (0..k as u64)
        .map(|u| RankWiring { staging: (1 << 40) + u * (1 << 30), ..Default::default() })
        .collect();
    let ring = RingOrder::identity(k);
    match plan_reduce_scatter(&ring, &wiring, &spans, dtype, buffer, threads, Control::default()) {
        Err(_) => {}
        Ok(Plan::Nothing) | Ok(Plan::Copy { .. }) => assert!(n == 0 || k == 1),
        Ok(Plan::Launch { sizing, aligned, args }) => {
            assert_eq!(args.len(), k);
            assert!(sizing.staging_bytes(k as u64) <= buffer);
            let mut covered = 0;
            for c in [0, sizing.num_chunks - 1] {
                let sl = sizing.slices(c);
                for (sub, len) in sl.iter().enumerate() {
                    for b in 0..k as u64 {
                        let r = if aligned { block_residue(args[0].send_residue, b, n, sz) } else { 0 };
                        let end = sizing.slot_offset(b, sub as u64) + r + len * sz;
                        assert!(end <= sizing.slot_offset(b, sub as u64) + sizing.slot_stride_bytes);
                        assert!(end <= sizing.staging_bytes(k as u64));
                    }
                }
                if c + 1 == sizing.num_chunks {
                    covered = c * sizing.chunk_elems + sl[0] + sl[1];
                }
            }
            assert_eq!(covered, n);
            if aligned {
                assert!(args.iter().all(|a| a.send % PACK_BYTES == args[0].send % PACK_BYTES));
            }
        }
    }
});
