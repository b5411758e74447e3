//! The buffers a sweep times on and the timed window: shared by every
//! sweep, below all of them.

use crate::cli::BenchArgs;
use crate::clock::Clock;
use crate::exact::{fill, FromSmall};
use ringreduce::{Collective, Collectives, Op, Region, RsElement};
use std::time::Instant;

/// nccl-tests shifts each iteration's buffers by one message within the
/// allocation, so back-to-back iterations do not hit the same cache lines.
pub(crate) fn shift(iter: usize, size: u64, max: u64) -> u64 {
    let steps = max.checked_div(size).unwrap_or(1).max(1);
    iter as u64 % steps
}

/// Each rank's buffers: `send` and `recv` sized for the largest point,
/// with room for nccl-tests' shifting.
pub(crate) struct Bufs<B> {
    pub(crate) send: Vec<B>,
    pub(crate) recv: Vec<B>,
}

/// Every local rank's buffers (all of them, or a job's process's own) for
/// calls of collective `c` up to count `max_count`, and their length in
/// elements. They start from the exact-check data: never time on zeros.
pub(crate) fn upload_bufs<C: Collectives, T: RsElement + FromSmall>(
    comm: &C,
    c: Collective,
    max_count: u64,
) -> ringreduce::Result<(Bufs<C::Buf<T>>, usize)> {
    let k = comm.k();
    let (send_cap, recv_cap) = c.lengths(k as u64, max_count);
    let cap = send_cap.max(recv_cap).max(1) as usize;
    let local = comm.local_ranks();
    let mut bufs = Bufs {
        send: Vec::with_capacity(local.len()),
        recv: Vec::with_capacity(local.len()),
    };
    // Filled on every core when every rank is here.
    let data = if local.len() == k {
        fill_all::<T>(Op::Sum, k, cap, 1)
    } else {
        local
            .clone()
            .map(|u| fill::<T>(Op::Sum, k, u, cap, 1))
            .collect()
    };
    for (u, data) in local.zip(&data) {
        bufs.send.push(comm.upload(u, data)?);
        bufs.recv.push(comm.upload(u, data)?);
    }
    Ok((bufs, cap))
}

/// The regions of one call of collective `c` with count `n`, `sh`
/// messages into the buffers. In place, the buffer that holds every block
/// is used: `send` for a reduce-scatter and an all-reduce, `recv` for an
/// all-gather.
pub(crate) fn regions<'a, B>(
    c: Collective,
    k: usize,
    n: usize,
    in_place: bool,
    sh: usize,
    bufs: &'a mut Bufs<B>,
) -> Vec<Region<'a, B>> {
    let (send_len, recv_len) = c.lengths(k as u64, n as u64);
    let (send_len, recv_len) = (send_len as usize, recv_len as usize);
    let whole = send_len.max(recv_len);
    let Bufs { send, recv } = bufs;
    if in_place {
        let pool = if c == Collective::AllGather {
            recv
        } else {
            send
        };
        pool.iter_mut()
            .map(|buf| Region::InPlace {
                buf,
                at: sh * whole..(sh + 1) * whole,
            })
            .collect()
    } else {
        send.iter()
            .zip(recv.iter_mut())
            .map(|(s, r)| Region::OutOfPlace {
                send: s,
                send_at: sh * send_len..(sh + 1) * send_len,
                recv: r,
                recv_at: sh * recv_len..(sh + 1) * recv_len,
            })
            .collect()
    }
}

/// One timed window: `iters` calls launched back to back between two
/// marks. Returns the device time per call (µs) and, unless `-z 1`, the
/// host's time to enqueue one.
pub(crate) fn window<C: Clock>(
    args: &BenchArgs,
    comm: &C,
    launch: &mut dyn FnMut(usize) -> ringreduce::Result<()>,
) -> ringreduce::Result<(f64, Option<f64>)> {
    let start = comm.mark()?;
    let t0 = Instant::now();
    for it in 0..args.iters {
        launch(it)?;
        if args.blocking {
            comm.synchronize()?;
        }
    }
    let per = t0.elapsed().as_secs_f64() * 1e6 / args.iters.max(1) as f64;
    let stop = comm.mark()?;
    let t = comm.elapsed_us(&start, &stop)? / args.iters.max(1) as f64;
    Ok((t, (!args.blocking).then_some(per)))
}

/// Every rank's exact-check data, one thread per rank: at 1 GiB per rank
/// filling is what a sweep's large sizes wait for.
pub(crate) fn fill_all<T: RsElement + FromSmall>(
    op: Op,
    k: usize,
    len: usize,
    seed: u64,
) -> Vec<Vec<T>> {
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..k)
            .map(|u| s.spawn(move || fill::<T>(op, k, u, len, seed)))
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("fill thread"))
            .collect()
    })
}
