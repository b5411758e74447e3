//! Checked collectives over any [`Collectives`] backend: buffers poisoned
//! around the data, the collective enqueued, and every element (guards
//! included) compared bit for bit with the sequential reference.

use crate::data::{Gen, Rng};
use ringreduce::{reference, Algorithm, Collective, Collectives, Op, Region, Result, RingOrder};

/// One collective to run: user rank `u` sends `inputs[u]`, placed
/// `send_off[u]` elements into its buffer; out of place, `recv` sits
/// `recv_off[u]` elements into a buffer of its own.
#[derive(Clone, Debug)]
pub struct Spec<T> {
    pub collective: Collective,
    pub inputs: Vec<Vec<T>>,
    /// The count: elements per block.
    pub n: usize,
    pub op: Op,
    pub in_place: bool,
    pub send_off: Vec<usize>,
    pub recv_off: Vec<usize>,
}

/// Elements outside the data the collective may write are filled with
/// this many guard elements on each side and checked afterwards.
pub const GUARD: usize = 5;

/// [`Collective::lengths`] in `usize`, for indexing host vectors.
pub fn lengths(c: Collective, k: usize, n: usize) -> (usize, usize) {
    let (s, r) = c.lengths(k as u64, n as u64);
    (s as usize, r as usize)
}

/// The in-place buffer's length, and where rank `u`'s input and output
/// sit in it.
fn in_place_layout(c: Collective, k: usize, n: usize, u: usize) -> (usize, usize, usize) {
    let (send_len, recv_len) = lengths(c, k, n);
    let (input, output) = c.in_place_offsets(u as u64, n as u64);
    (send_len.max(recv_len), input as usize, output as usize)
}

/// A submitted collective, checked once its backend is synchronised.
pub trait Pending {
    /// The algorithm the collective ran.
    fn algorithm(&self) -> Algorithm;
    /// Elements that differ from the reference, plus every guard or input
    /// element that changed.
    fn wrong(self: Box<Self>) -> Result<usize>;
}

fn same_bits<T: bytemuck::Pod>(a: &T, b: &T) -> bool {
    bytemuck::bytes_of(a) == bytemuck::bytes_of(b)
}

fn count_diff<T: bytemuck::Pod>(a: &[T], b: &[T]) -> usize {
    a.iter().zip(b).filter(|(x, y)| !same_bits(*x, *y)).count() + a.len().abs_diff(b.len())
}

/// The initial contents of every buffer, and what each must hold afterwards.
struct Layout<T> {
    send_init: Vec<Vec<T>>,
    recv_init: Vec<Vec<T>>,
    send_want: Vec<Vec<T>>,
    recv_want: Vec<Vec<T>>,
}

fn layout<T: Gen>(spec: &Spec<T>, ring: &RingOrder, algorithm: Algorithm, seed: u64) -> Layout<T> {
    let k = spec.inputs.len();
    let (c, n) = (spec.collective, spec.n);
    let (send_len, recv_len) = lengths(c, k, n);
    let mut rng = Rng(seed ^ 0x5eed);
    let refs: Vec<&[T]> = spec.inputs.iter().map(|v| v.as_slice()).collect();
    let want = reference::collective_by(c, algorithm, &refs, ring, spec.op);
    let mut l = Layout {
        send_init: vec![],
        recv_init: vec![],
        send_want: vec![],
        recv_want: vec![],
    };
    let poisoned =
        |rng: &mut Rng, len: usize| -> Vec<T> { (0..len).map(|_| T::gen(rng)).collect() };
    for (u, want) in want.iter().enumerate() {
        let so = spec.send_off[u];
        if spec.in_place {
            let (len, at, output) = in_place_layout(c, k, n, u);
            let mut s = poisoned(&mut rng, so + len + GUARD);
            s[so + at..so + at + send_len].copy_from_slice(&spec.inputs[u]);
            let mut sw = s.clone();
            let out = so + output;
            sw[out..out + recv_len].copy_from_slice(want);
            l.send_init.push(s);
            l.send_want.push(sw);
            l.recv_init.push(vec![]);
            l.recv_want.push(vec![]);
        } else {
            let mut s = poisoned(&mut rng, so + send_len + GUARD);
            s[so..so + send_len].copy_from_slice(&spec.inputs[u]);
            let ro = spec.recv_off[u];
            let r = poisoned(&mut rng, ro + recv_len + GUARD);
            let mut rw = r.clone();
            rw[ro..ro + recv_len].copy_from_slice(want);
            l.send_want.push(s.clone());
            l.send_init.push(s);
            l.recv_init.push(r);
            l.recv_want.push(rw);
        }
    }
    l
}

/// A collective's buffers on its backend, and what they must hold.
struct Checked<'a, C: Collectives, T: Gen> {
    comm: &'a C,
    /// The user rank of `send[0]` and `recv[0]`.
    first: usize,
    send: Vec<C::Buf<T>>,
    recv: Vec<Option<C::Buf<T>>>,
    want: Layout<T>,
    algorithm: Algorithm,
}

impl<C: Collectives, T: Gen> Pending for Checked<'_, C, T> {
    fn algorithm(&self) -> Algorithm {
        self.algorithm
    }
    fn wrong(self: Box<Self>) -> Result<usize> {
        let mut wrong = 0;
        for (u, b) in (self.first..).zip(&self.send) {
            wrong += count_diff(&self.comm.download(u, b)?, &self.want.send_want[u]);
        }
        for (u, b) in (self.first..).zip(&self.recv) {
            if let Some(b) = b {
                wrong += count_diff(&self.comm.download(u, b)?, &self.want.recv_want[u]);
            }
        }
        Ok(wrong)
    }
}

/// Enqueues `spec` on `comm` without waiting: the buffers of its local
/// ranks (every rank, or one process's own in a job, where every process
/// computes the same inputs and reference).
pub fn submit<'a, C: Collectives, T: Gen>(
    comm: &'a C,
    spec: Spec<T>,
    seed: u64,
) -> Result<Box<dyn Pending + 'a>> {
    let k = comm.k();
    let (c, n) = (spec.collective, spec.n);
    let (send_len, recv_len) = lengths(c, k, n);
    let algorithm = comm.algorithm_for::<T>(c, n)?;
    let l = layout(&spec, comm.ring_order(), algorithm, seed);
    let local = comm.local_ranks();
    let mut send = Vec::with_capacity(local.len());
    let mut recv = Vec::with_capacity(local.len());
    for u in local.clone() {
        send.push(comm.upload(u, &l.send_init[u])?);
        recv.push(if spec.in_place {
            None
        } else {
            Some(comm.upload(u, &l.recv_init[u])?)
        });
    }
    {
        let mut regions: Vec<Region<'_, C::Buf<T>>> = Vec::with_capacity(local.len());
        for (u, (s, r)) in local.clone().zip(send.iter_mut().zip(recv.iter_mut())) {
            let so = spec.send_off[u];
            if spec.in_place {
                let (len, _, _) = in_place_layout(c, k, n, u);
                regions.push(Region::InPlace {
                    buf: s,
                    at: so..so + len,
                });
            } else {
                let ro = spec.recv_off[u];
                regions.push(Region::OutOfPlace {
                    send: s,
                    send_at: so..so + send_len,
                    recv: r.as_mut().expect("out of place has recv"),
                    recv_at: ro..ro + recv_len,
                });
            }
        }
        comm.collective(c, &mut regions, spec.op)?;
    }
    Ok(Box::new(Checked {
        comm,
        first: local.start,
        send,
        recv,
        want: l,
        algorithm,
    }))
}

/// Submit, synchronise, check.
pub fn run<C: Collectives, T: Gen>(comm: &C, spec: Spec<T>, seed: u64) -> Result<usize> {
    let p = submit(comm, spec, seed)?;
    comm.synchronize()?;
    p.wrong()
}

/// Submits collective `i`: a random collective, type, op, count (`count`
/// draws it) and placement (in place or not, element offsets 0..4), all
/// from `rng`, so that back-to-back tests and soaks share one generator.
/// Returns the pending check and the elements each rank sends.
pub fn submit_random<'a, C: Collectives>(
    comm: &'a C,
    rng: &mut Rng,
    i: u64,
    count: impl FnOnce(&mut Rng) -> usize,
) -> Result<(Box<dyn Pending + 'a>, usize)> {
    let k = comm.k();
    let collective = Collective::ALL[rng.below(3) as usize];
    let dtype = ringreduce::DataType::ALL[rng.below(10) as usize];
    let op = Op::ALL[rng.below(5) as usize];
    let n = count(rng);
    let in_place = rng.below(2) == 0;
    let send_off: Vec<usize> = (0..k).map(|_| rng.below(4) as usize).collect();
    let recv_off: Vec<usize> = (0..k).map(|_| rng.below(4) as usize).collect();
    let send_len = lengths(collective, k, n).0;
    let p = crate::with_type!(dtype, T => {
        submit(comm, Spec::<T> {
            collective,
            inputs: crate::data::inputs::<T>(i, k, send_len),
            n, op, in_place, send_off, recv_off,
        }, i)?
    });
    Ok((p, send_len))
}

/// What [`back_to_back`] saw.
#[derive(Debug, Default, Clone, Copy)]
pub struct Tally {
    /// Elements each rank sent, over every call.
    pub elements: usize,
    /// Calls that ran a direct algorithm.
    pub direct: usize,
    /// Calls that ran the local algorithm.
    pub local: usize,
    /// Wrong output elements, over every call.
    pub wrong: usize,
    /// Synchronisations, each followed by the checks of the calls before it.
    pub checkpoints: usize,
}

/// Queues `calls` random collectives ([`submit_random`], counts drawn by
/// `count`) with no synchronisation between them, except every `batch`
/// calls and after the last: there it waits for the communicator and checks
/// what it queued, which bounds the host memory the checks hold.
pub fn back_to_back<C: Collectives>(
    comm: &C,
    rng: &mut Rng,
    calls: u64,
    batch: u64,
    count: impl Fn(&mut Rng) -> usize,
) -> Result<Tally> {
    let mut t = Tally::default();
    let mut pending: Vec<Box<dyn Pending + '_>> = Vec::new();
    for i in 0..calls {
        let (p, sent) = submit_random(comm, rng, i, &count)?;
        t.elements += sent;
        pending.push(p);
        if (i + 1) % batch.max(1) == 0 || i + 1 == calls {
            comm.synchronize()?;
            for p in pending.drain(..) {
                let a = p.algorithm();
                t.direct += matches!(a, Algorithm::OneShot | Algorithm::TwoShot) as usize;
                t.local += (a == Algorithm::Local) as usize;
                t.wrong += p.wrong()?;
            }
            t.checkpoints += 1;
        }
    }
    Ok(t)
}
