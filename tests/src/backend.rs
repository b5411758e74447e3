//! One interface over the CPU execution and the GPU, so the same cases run
//! on both.

use crate::data::{Gen, Rng};
use cudarc::driver::{CudaSlice, CudaStream};
use ringreduce::reference;
use ringreduce::{
    CommConfig, Communicator, CpuBuffers, CpuCommunicator, HostBuffer, Op, Result, RingOrder,
    RsBuffers,
};
use std::sync::Arc;

/// One collective to run: user rank `u` sends `inputs[u]` (`k * n`
/// elements), placed `send_off[u]` elements into its buffer; out of place,
/// `recv` sits `recv_off[u]` elements into a buffer of its own.
#[derive(Clone, Debug)]
pub struct Spec<T> {
    pub inputs: Vec<Vec<T>>,
    pub n: usize,
    pub op: Op,
    pub in_place: bool,
    pub send_off: Vec<usize>,
    pub recv_off: Vec<usize>,
}

/// Elements outside the data the collective may write are filled with
/// this many guard elements on each side and checked afterwards.
pub const GUARD: usize = 5;

/// A submitted collective, checked once its backend is synchronised.
pub trait Pending {
    /// Elements that differ from the reference, plus every guard or input
    /// element that changed.
    fn wrong(self: Box<Self>) -> Result<usize>;
}

pub trait Backend {
    fn k(&self) -> usize;
    fn ring(&self) -> &RingOrder;
    /// Enqueues without waiting.
    fn submit<T: Gen>(&self, spec: Spec<T>, seed: u64) -> Result<Box<dyn Pending + '_>>;
    fn sync(&self) -> Result<()>;
    fn name(&self) -> String;

    /// Submit, sync, check.
    fn run<T: Gen>(&self, spec: Spec<T>, seed: u64) -> Result<usize> {
        let p = self.submit(spec, seed)?;
        self.sync()?;
        p.wrong()
    }
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

fn layout<T: Gen>(spec: &Spec<T>, ring: &RingOrder, seed: u64) -> Layout<T> {
    let k = spec.inputs.len();
    let n = spec.n;
    let mut rng = Rng(seed ^ 0x5eed);
    let refs: Vec<&[T]> = spec.inputs.iter().map(|v| v.as_slice()).collect();
    let want = reference::reduce_scatter(&refs, ring, spec.op);
    let mut l = Layout {
        send_init: vec![],
        recv_init: vec![],
        send_want: vec![],
        recv_want: vec![],
    };
    for u in 0..k {
        let so = spec.send_off[u];
        let mut s: Vec<T> = (0..so + k * n + GUARD).map(|_| T::gen(&mut rng)).collect();
        s[so..so + k * n].copy_from_slice(&spec.inputs[u]);
        let mut sw = s.clone();
        if spec.in_place {
            sw[so + u * n..so + (u + 1) * n].copy_from_slice(&want[u]);
            l.recv_init.push(vec![]);
            l.recv_want.push(vec![]);
        } else {
            let ro = spec.recv_off[u];
            let r: Vec<T> = (0..ro + n + GUARD).map(|_| T::gen(&mut rng)).collect();
            let mut rw = r.clone();
            rw[ro..ro + n].copy_from_slice(&want[u]);
            l.recv_init.push(r);
            l.recv_want.push(rw);
        }
        l.send_init.push(s);
        l.send_want.push(sw);
    }
    l
}

pub struct CpuBackend {
    pub comm: CpuCommunicator,
}

impl CpuBackend {
    pub fn new(k: usize, config: CommConfig) -> Result<Self> {
        Ok(CpuBackend {
            comm: CpuCommunicator::with_config(k, config)?,
        })
    }
}

struct CpuPending<T> {
    send: Vec<HostBuffer<T>>,
    recv: Vec<HostBuffer<T>>,
    want: Layout<T>,
}

impl<T: Gen> Pending for CpuPending<T> {
    fn wrong(self: Box<Self>) -> Result<usize> {
        let mut wrong = 0;
        for (b, w) in self.send.iter().zip(&self.want.send_want) {
            wrong += count_diff(&b.to_vec(), w);
        }
        for (b, w) in self.recv.iter().zip(&self.want.recv_want) {
            wrong += count_diff(&b.to_vec(), w);
        }
        Ok(wrong)
    }
}

impl Backend for CpuBackend {
    fn k(&self) -> usize {
        self.comm.k()
    }
    fn ring(&self) -> &RingOrder {
        self.comm.ring_order()
    }
    fn name(&self) -> String {
        format!("cpu k={}", self.k())
    }
    fn submit<T: Gen>(&self, spec: Spec<T>, seed: u64) -> Result<Box<dyn Pending + '_>> {
        let k = self.k();
        let n = spec.n;
        let l = layout(&spec, self.ring(), seed);
        let send: Vec<HostBuffer<T>> = l
            .send_init
            .iter()
            .map(|v| HostBuffer::from_slice(v))
            .collect();
        let recv: Vec<HostBuffer<T>> = l
            .recv_init
            .iter()
            .map(|v| HostBuffer::from_slice(v))
            .collect();
        let bufs: Vec<CpuBuffers<T>> = (0..k)
            .map(|u| {
                let so = spec.send_off[u];
                let s = send[u].view(so..so + k * n);
                if spec.in_place {
                    CpuBuffers::in_place(s)
                } else {
                    let ro = spec.recv_off[u];
                    CpuBuffers::out_of_place(s, recv[u].view(ro..ro + n))
                }
            })
            .collect();
        self.comm.reduce_scatter(&bufs, spec.op)?;
        Ok(Box::new(CpuPending {
            send,
            recv,
            want: l,
        }))
    }
    fn sync(&self) -> Result<()> {
        self.comm.synchronize()
    }
}

pub struct GpuBackend {
    pub comm: Communicator,
    pub streams: Vec<Arc<CudaStream>>,
}

impl GpuBackend {
    /// `k` ranks placed by [`crate::placement`] from `device` on.
    pub fn new(device: usize, k: usize, config: CommConfig) -> Result<Self> {
        let comm = crate::gpu_comm(device, k, config)?;
        let streams = comm.new_streams()?;
        Ok(GpuBackend { comm, streams })
    }
}

struct GpuPending<T> {
    streams: Vec<Arc<CudaStream>>,
    send: Vec<CudaSlice<T>>,
    recv: Vec<Option<CudaSlice<T>>>,
    want: Layout<T>,
}

impl<T: Gen> Pending for GpuPending<T> {
    fn wrong(self: Box<Self>) -> Result<usize> {
        let mut wrong = 0;
        for (u, b) in self.send.iter().enumerate() {
            wrong += count_diff(&self.streams[u].clone_dtoh(b)?, &self.want.send_want[u]);
        }
        for (u, b) in self.recv.iter().enumerate() {
            if let Some(b) = b {
                wrong += count_diff(&self.streams[u].clone_dtoh(b)?, &self.want.recv_want[u]);
            }
        }
        Ok(wrong)
    }
}

impl Backend for GpuBackend {
    fn k(&self) -> usize {
        self.comm.k()
    }
    fn ring(&self) -> &RingOrder {
        self.comm.ring_order()
    }
    fn name(&self) -> String {
        format!("gpu k={}", self.k())
    }
    fn submit<T: Gen>(&self, spec: Spec<T>, seed: u64) -> Result<Box<dyn Pending + '_>> {
        let k = self.k();
        let n = spec.n;
        let l = layout(&spec, self.ring(), seed);
        let mut send = Vec::with_capacity(k);
        let mut recv = Vec::with_capacity(k);
        for u in 0..k {
            let s = &self.streams[u];
            send.push(s.clone_htod(&l.send_init[u])?);
            recv.push(if spec.in_place {
                None
            } else {
                Some(s.clone_htod(&l.recv_init[u])?)
            });
        }
        {
            let mut bufs: Vec<RsBuffers<'_, T>> = Vec::with_capacity(k);
            for (u, (s, r)) in send.iter_mut().zip(recv.iter_mut()).enumerate() {
                let so = spec.send_off[u];
                if spec.in_place {
                    bufs.push(RsBuffers::in_place(s.slice_mut(so..so + k * n)));
                } else {
                    let ro = spec.recv_off[u];
                    let r = r.as_mut().expect("out of place has recv");
                    bufs.push(RsBuffers::out_of_place(
                        s.slice(so..so + k * n),
                        r.slice_mut(ro..ro + n),
                    ));
                }
            }
            self.comm
                .reduce_scatter(&mut bufs, spec.op, &self.streams)?;
        }
        Ok(Box::new(GpuPending {
            streams: self.streams.clone(),
            send,
            recv,
            want: l,
        }))
    }
    fn sync(&self) -> Result<()> {
        for s in &self.streams {
            s.synchronize()?;
        }
        self.comm.synchronize()
    }
}

/// Submits collective `i`: a random type, op, count (`count` draws it) and
/// placement (in place or not, element offsets 0..4), all from `rng`, so
/// that back-to-back tests and soaks share one generator. Returns the
/// pending check and the elements each rank sends.
pub fn submit_random<'a, B: Backend>(
    b: &'a B,
    rng: &mut Rng,
    i: u64,
    count: impl FnOnce(&mut Rng) -> usize,
) -> Result<(Box<dyn Pending + 'a>, usize)> {
    let k = b.k();
    let dtype = ringreduce::DataType::ALL[rng.below(10) as usize];
    let op = Op::ALL[rng.below(5) as usize];
    let n = count(rng);
    let in_place = rng.below(2) == 0;
    let send_off: Vec<usize> = (0..k).map(|_| rng.below(4) as usize).collect();
    let recv_off: Vec<usize> = (0..k).map(|_| rng.below(4) as usize).collect();
    let p = crate::with_type!(dtype, T => {
        b.submit(Spec::<T> { inputs: crate::data::inputs::<T>(i, k, k * n), n, op, in_place, send_off, recv_off }, i)?
    });
    Ok((p, k * n))
}
