//! The dense paths: one tensor, a whole list through buckets, the
//! streaming [`Session`], and their half-precision forms.

use super::backend::{GradBackend, Wire, BEGUN_AT_ONCE};
use super::bucket::{pieces, plan, words, Bucket, Item, Packer};
use super::descs::DescCache;
use super::{across, slot, GradSync, Precision, Slots};
use crate::element::RsElement;
use crate::error::{Error, Result};
use crate::region::Region;
use ringreduce_kernels::grad::abi::{half_arg, Task, TaskKind};
use ringreduce_kernels::{Collective, DataType, Op};

/// Buckets whose all-reduce is begun and not yet ended, oldest first:
/// each one's slot, its tensors' places and what the backend began.
type Flight<'c, C> = std::collections::VecDeque<(usize, Vec<Item>, <C as GradBackend>::Begun<'c>)>;

/// A session's buckets in flight, as [`Flight`]'s, each with its tensors.
type SessionFlight<'c, 't, C> = std::collections::VecDeque<(
    usize,
    Vec<Item>,
    Vec<&'t [<C as crate::collectives::Collectives>::Buf<f32>]>,
    <C as GradBackend>::Begun<'c>,
)>;

/// How a bucket or tensor is reduced.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Reduce {
    Plain,
    /// Converted to half precision (divided by `k` first if `true`),
    /// all-reduced in it, converted back.
    Half(Precision, bool),
}

impl<'c, C: GradBackend> GradSync<'c, C> {
    /// SINGA's `synch`: an all-reduce of one tensor, in place.
    pub fn all_reduce(&mut self, tensor: &mut [C::Buf<f32>]) -> Result<()> {
        let n = self.check_tensor(tensor)?;
        let mut bufs: Vec<&mut C::Buf<f32>> = tensor.iter_mut().collect();
        let own = self.own.clone();
        reduce_plain(self.comm, &mut bufs, n, self.op(), &own)
    }

    /// SINGA's `synchHalf`: the tensor converted to `precision` on the
    /// device (divided by `k` first with `prescale`, as DDP's
    /// `fp16_compress_hook`, so the result is the average), all-reduced in
    /// it, and converted back. An `f16` sum beyond 65504 becomes infinite
    /// and stays so; `bf16` has `f32`'s range. Needs `f32` tensors.
    pub fn all_reduce_half<T: RsElement>(
        &mut self,
        tensor: &mut [C::Buf<T>],
        precision: Precision,
        prescale: bool,
    ) -> Result<()> {
        if T::DTYPE != DataType::F32 {
            return Err(Error::HalfNeedsF32(T::DTYPE.name()));
        }
        let n = self.check_tensor(tensor)?;
        let own = self.own.clone();
        let wire = Wire::Half {
            precision,
            prescale,
        };
        let mut bufs: Vec<&mut C::Buf<T>> = tensor.iter_mut().collect();
        if let Some(done) = across(self.comm, &mut bufs, n, wire, None, &own) {
            return done.map(|_| ());
        }
        let addrs: Vec<u64> = (0..tensor.len())
            .map(|u| self.comm.addr(u, &tensor[u]))
            .collect();
        let holds = tensor.iter().map(|b| vec![C::hold(b)]).collect();
        self.reduce_half(&addrs, holds, n, precision, prescale, &own)
    }

    /// SINGA's `fusedSynch`: every tensor of the list all-reduced through
    /// buckets of [`GradConfig::bucket_bytes`](super::GradConfig): packed
    /// by one batched copy, all-reduced, unpacked. A tensor longer than a
    /// bucket is all-reduced alone, in place.
    pub fn fused_all_reduce(&mut self, tensors: &mut [Vec<C::Buf<f32>>]) -> Result<()> {
        self.fused(tensors, Reduce::Plain)
    }

    /// [`fused_all_reduce`](Self::fused_all_reduce) with each bucket in
    /// half precision, as [`all_reduce_half`](Self::all_reduce_half).
    pub fn fused_all_reduce_half(
        &mut self,
        tensors: &mut [Vec<C::Buf<f32>>],
        precision: Precision,
        prescale: bool,
    ) -> Result<()> {
        self.fused(tensors, Reduce::Half(precision, prescale))
    }

    /// Starts the streaming form: gradients are produced on `producers`
    /// (one queue per rank), and [`Session::push`]ed as they are ready.
    pub fn session<'t>(&mut self, producers: Vec<C::Queue>) -> Result<Session<'_, 'c, 't, C>> {
        let k = self.comm.local_ranks().len();
        if producers.len() != k {
            return Err(Error::WrongStreamCount {
                got: producers.len(),
                k,
            });
        }
        // The buckets may still be in use by calls queued on the own
        // queues: the session's queues start after them.
        self.comm.order(&self.copy, &self.own)?;
        self.comm.order(&self.net, &self.own)?;
        Ok(Session {
            g: self,
            flight: Default::default(),
            producers,
            packer: Packer::default(),
            open: Vec::new(),
            slot: 0,
            pushed: false,
            done: false,
        })
    }

    fn fused(&mut self, tensors: &mut [Vec<C::Buf<f32>>], mode: Reduce) -> Result<()> {
        let mut lens = Vec::with_capacity(tensors.len());
        for t in tensors.iter() {
            lens.push(self.check_tensor(t)?);
        }
        let own = self.own.clone();
        let done = self.fused_buckets(tensors, &lens, mode, &own);
        // Whatever happened, nothing runs on into the caller's tensors
        // once the call has returned.
        let settled = self.comm.settle();
        done.and(settled)
    }

    /// The buckets of a fused call, in order. Where the backend begins an
    /// all-reduce ([`GradBackend::begin_all_reduce`]: ranks on several
    /// nodes), a bucket's step between nodes runs while the next bucket is
    /// packed and reduced inside the node, two buckets in flight, each in
    /// its own slot; each bucket's result is the one a lone all-reduce of
    /// it gives.
    fn fused_buckets(
        &mut self,
        tensors: &mut [Vec<C::Buf<f32>>],
        lens: &[usize],
        mode: Reduce,
        own: &[C::Queue],
    ) -> Result<()> {
        let mut flight: Flight<'c, C> = Default::default();
        let mut next = 0;
        for b in plan(lens, self.cap()) {
            match b {
                Bucket::Alone { tensor } => {
                    self.land_all(&mut flight, tensors, own)?;
                    self.reduce_tensor(&mut tensors[tensor], lens[tensor], mode, own)?
                }
                Bucket::Packed { items, len } => {
                    let s = next;
                    next = (next + 1) % BEGUN_AT_ONCE;
                    let all: Vec<&[C::Buf<f32>]> = tensors.iter().map(|t| t.as_slice()).collect();
                    self.pack(s, &items, &all, own, true)?;
                    match self.begin_bucket(s, len, mode, own) {
                        Some(begun) => {
                            flight.push_back((s, items, begun?));
                            if flight.len() == BEGUN_AT_ONCE {
                                self.land_oldest(&mut flight, tensors, own)?;
                            }
                        }
                        None => {
                            self.reduce_bucket(s, len, mode, own)?;
                            self.pack(s, &items, &all, own, false)?;
                        }
                    }
                }
            }
        }
        self.land_all(&mut flight, tensors, own)
    }

    /// Begins the plain all-reduce of the first `len` elements of bucket
    /// `b` (staging slot `b`), where the backend begins them: one rank of
    /// a job that spans nodes.
    fn begin_bucket(
        &mut self,
        b: usize,
        len: usize,
        mode: Reduce,
        q: &[C::Queue],
    ) -> Option<Result<C::Begun<'c>>> {
        let (comm, op) = (self.comm, self.op());
        match (mode, self.buckets[b].all_mut().as_mut_slice(), q) {
            (Reduce::Plain, [buf], [q]) if len > 0 => comm.begin_all_reduce(buf, len, op, q, b),
            _ => None,
        }
    }

    /// Ends the all-reduce [`begin_bucket`](Self::begin_bucket) began in
    /// bucket `b`, then unpacks the bucket into `items` of `tensors`, on
    /// `q`.
    fn land(
        &mut self,
        b: usize,
        items: &[Item],
        tensors: &[&[C::Buf<f32>]],
        begun: C::Begun<'c>,
        q: &[C::Queue],
    ) -> Result<()> {
        let comm = self.comm;
        if let ([buf], [qu]) = (self.buckets[b].all_mut().as_mut_slice(), q) {
            comm.end_all_reduce(buf, begun, qu)?;
        }
        self.pack(b, items, tensors, q, false)
    }

    /// Ends the oldest bucket in flight and unpacks it.
    fn land_oldest(
        &mut self,
        flight: &mut Flight<'c, C>,
        tensors: &[Vec<C::Buf<f32>>],
        q: &[C::Queue],
    ) -> Result<()> {
        let Some((b, items, begun)) = flight.pop_front() else {
            return Ok(());
        };
        let all: Vec<&[C::Buf<f32>]> = tensors.iter().map(|t| t.as_slice()).collect();
        self.land(b, &items, &all, begun, q)
    }

    /// Ends and unpacks every bucket in flight, oldest first.
    fn land_all(
        &mut self,
        flight: &mut Flight<'c, C>,
        tensors: &[Vec<C::Buf<f32>>],
        q: &[C::Queue],
    ) -> Result<()> {
        while !flight.is_empty() {
            self.land_oldest(flight, tensors, q)?;
        }
        Ok(())
    }

    pub(super) fn reduce_tensor(
        &mut self,
        t: &mut [C::Buf<f32>],
        n: usize,
        mode: Reduce,
        q: &[C::Queue],
    ) -> Result<()> {
        match mode {
            Reduce::Plain => {
                let mut bufs: Vec<&mut C::Buf<f32>> = t.iter_mut().collect();
                reduce_plain(self.comm, &mut bufs, n, self.op(), q)
            }
            Reduce::Half(p, s) => {
                let wire = Wire::Half {
                    precision: p,
                    prescale: s,
                };
                let mut bufs: Vec<&mut C::Buf<f32>> = t.iter_mut().collect();
                if let Some(done) = across(self.comm, &mut bufs, n, wire, None, q) {
                    return done.map(|_| ());
                }
                let addrs: Vec<u64> = (0..t.len()).map(|u| self.comm.addr(u, &t[u])).collect();
                let holds = t.iter().map(|b| vec![C::hold(b)]).collect();
                self.reduce_half(&addrs, holds, n, p, s, q)
            }
        }
    }

    /// Reduces the first `len` elements of bucket `b` on `q`.
    fn reduce_bucket(&mut self, b: usize, len: usize, mode: Reduce, q: &[C::Queue]) -> Result<()> {
        let cap = self.cap();
        for (u, qu) in q.iter().enumerate() {
            slot(self.comm, &mut self.buckets[b], u, qu, cap)?;
        }
        let (comm, op) = (self.comm, self.op());
        let mut bufs: Vec<&mut C::Buf<f32>> = self.buckets[b].all_mut();
        match mode {
            Reduce::Plain => reduce_plain(comm, &mut bufs, len, op, q),
            Reduce::Half(p, s) => {
                let wire = Wire::Half {
                    precision: p,
                    prescale: s,
                };
                if let Some(done) = across(comm, &mut bufs, len, wire, None, q) {
                    return done.map(|_| ());
                }
                let addrs: Vec<u64> = bufs
                    .iter()
                    .enumerate()
                    .map(|(u, b)| comm.addr(u, b))
                    .collect();
                let holds = bufs.iter().map(|b| vec![C::hold(b)]).collect();
                drop(bufs);
                self.reduce_half(&addrs, holds, len, p, s, q)
            }
        }
    }

    /// Packs (or unpacks) `items` of `tensors` into bucket `b`, one
    /// batched copy per rank on `q`.
    fn pack(
        &mut self,
        b: usize,
        items: &[Item],
        tensors: &[&[C::Buf<f32>]],
        q: &[C::Queue],
        into_bucket: bool,
    ) -> Result<()> {
        let cap = self.cap();
        for (u, qu) in q.iter().enumerate() {
            let bucket = slot(self.comm, &mut self.buckets[b], u, qu, cap)?;
            let base = self.comm.addr(u, bucket);
            let holds = vec![C::hold(bucket)];
            copy_items(
                self.comm,
                u,
                qu,
                tensors,
                items,
                base,
                into_bucket,
                holds,
                &mut self.descs,
            )?;
        }
        Ok(())
    }

    /// The half path over raw `f32` addresses, one per rank.
    fn reduce_half(
        &mut self,
        addrs: &[u64],
        holds: Vec<Vec<C::Hold>>,
        n: usize,
        p: Precision,
        prescale: bool,
        q: &[C::Queue],
    ) -> Result<()> {
        match p {
            Precision::F16 => {
                half_via::<C, half::f16>(self.comm, &mut self.half, addrs, holds, n, p, prescale, q)
            }
            Precision::Bf16 => half_via::<C, half::bf16>(
                self.comm,
                &mut self.bhalf,
                addrs,
                holds,
                n,
                p,
                prescale,
                q,
            ),
        }
    }
}

/// An in-place all-reduce of the first `n` elements of every rank's buffer.
pub(super) fn reduce_plain<C: GradBackend>(
    comm: &C,
    bufs: &mut [&mut C::Buf<f32>],
    n: usize,
    op: Op,
    q: &[C::Queue],
) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    let mut regions: Vec<Region<'_, C::Buf<f32>>> = bufs
        .iter_mut()
        .map(|b| Region::InPlace {
            buf: &mut **b,
            at: 0..n,
        })
        .collect();
    comm.collective_on(Collective::AllReduce, &mut regions, op, q)
}

/// One batched copy on rank `u`'s queue between `items` of `tensors` and
/// the packed buffer at `base` (into it with `into`, out of it otherwise),
/// keeping `holds` and the tensors alive until it has run. A single item
/// goes as one range by value, so a push uploads no descriptors.
#[allow(clippy::too_many_arguments)]
pub(super) fn copy_items<C: GradBackend, L: AsRef<[C::Buf<f32>]>>(
    comm: &C,
    u: usize,
    q: &C::Queue,
    tensors: &[L],
    items: &[Item],
    base: u64,
    into: bool,
    mut holds: Vec<C::Hold>,
    kept: &mut DescCache<C>,
) -> Result<()> {
    if let [it] = items {
        // One tensor (a pushed gradient): by value, nothing to upload.
        let t = &tensors[it.tensor].as_ref()[u];
        let (at, bytes) = (base + 4 * it.offset as u64, 4 * it.len as u64);
        let (src, dst) = if into {
            (comm.addr(u, t), at)
        } else {
            (at, comm.addr(u, t))
        };
        holds.push(C::hold(t));
        let task = Task {
            kind: TaskKind::CopyRange as u64,
            src,
            dst,
            n: bytes,
            ..Task::default()
        };
        // SAFETY: the tensor and the packed buffer at `base` hold the range
        // on this rank, and are held.
        return unsafe { comm.run_task(u, q, task, holds) };
    }
    let mut descs = Vec::new();
    for it in items {
        let t = &tensors[it.tensor].as_ref()[u];
        let at = base + 4 * it.offset as u64;
        pieces(comm.addr(u, t), at, it.len, into, &mut descs);
        holds.push(C::hold(t));
    }
    copy_task(comm, u, q, &descs, holds, kept)
}

/// One batched copy of `descs` on rank `u`'s queue, its descriptors
/// uploaded once and kept in `kept`.
pub(super) fn copy_task<C: GradBackend>(
    comm: &C,
    u: usize,
    q: &C::Queue,
    descs: &[ringreduce_kernels::grad::abi::CopyDesc],
    mut holds: Vec<C::Hold>,
    kept: &mut DescCache<C>,
) -> Result<()> {
    if descs.is_empty() {
        return Ok(());
    }
    let d = kept.get(comm, u, q, &words(descs))?;
    holds.push(C::hold(d));
    let task = Task {
        kind: TaskKind::Copy as u64,
        src: comm.addr(u, d),
        n: descs.len() as u64,
        ..Task::default()
    };
    // SAFETY: the descriptors name live buffers of this rank, held.
    unsafe { comm.run_task(u, q, task, holds) }
}

/// Convert, all-reduce in `H`, convert back.
#[allow(clippy::too_many_arguments)]
fn half_via<C: GradBackend, H: RsElement>(
    comm: &C,
    slots: &mut Slots<C::Buf<H>>,
    addrs: &[u64],
    holds: Vec<Vec<C::Hold>>,
    n: usize,
    p: Precision,
    prescale: bool,
    q: &[C::Queue],
) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    let format = p.format();
    let divisor = if prescale { comm.k() as f32 } else { 1.0 };
    let mut hh = Vec::new();
    for (u, qu) in q.iter().enumerate() {
        let h = slot(comm, slots, u, qu, n)?;
        let task = Task {
            kind: TaskKind::ToHalf as u64,
            src: addrs[u],
            dst: comm.addr(u, h),
            n: n as u64,
            arg: half_arg(format, divisor),
            ..Task::default()
        };
        let hold = vec![C::hold(h)];
        // SAFETY: `addrs[u]` holds `n` f32s (checked by the caller), `h` n halves.
        unsafe { comm.run_task(u, qu, task, hold)? };
        hh.push(comm.addr(u, h));
    }
    {
        let mut bufs: Vec<&mut C::Buf<H>> = slots.all_mut();
        let mut regions: Vec<Region<'_, C::Buf<H>>> = bufs
            .iter_mut()
            .map(|b| Region::InPlace {
                buf: &mut **b,
                at: 0..n,
            })
            .collect();
        comm.collective_on(Collective::AllReduce, &mut regions, Op::Sum, q)?;
    }
    for ((u, qu), hold) in q.iter().enumerate().zip(holds) {
        let task = Task {
            kind: TaskKind::FromHalf as u64,
            src: hh[u],
            dst: addrs[u],
            n: n as u64,
            arg: format as u64,
            ..Task::default()
        };
        let mut hold = hold;
        hold.push(C::hold(&slots.bufs[u].as_ref().expect("allocated").0));
        // SAFETY: as above.
        unsafe { comm.run_task(u, qu, task, hold)? };
    }
    Ok(())
}

/// The streaming fused all-reduce (see [`GradSync::session`]): tensors are
/// packed as they are pushed, on the layer's copy queue; each full bucket is
/// all-reduced and unpacked on its communication queue while packing goes
/// on into the other bucket. The pushed tensors stay borrowed until
/// [`wait`](Self::wait), so nothing touches them before their results are
/// ordered.
pub struct Session<'g, 'c, 't, C: GradBackend> {
    g: &'g mut GradSync<'c, C>,
    /// Buckets whose all-reduce is begun (a job that spans nodes), oldest
    /// first, each with its tensors, to end and unpack.
    flight: SessionFlight<'c, 't, C>,
    producers: Vec<C::Queue>,
    packer: Packer,
    /// The tensors of the open bucket, by the packer's item index.
    open: Vec<&'t [C::Buf<f32>]>,
    slot: usize,
    pushed: bool,
    done: bool,
}

impl<'t, C: GradBackend> Session<'_, '_, 't, C> {
    /// Queues one gradient: after the work its producer queues hold, it is
    /// packed into the open bucket; a tensor longer than the cap is
    /// all-reduced alone, in place, with no copy.
    pub fn push(&mut self, tensor: &'t mut [C::Buf<f32>]) -> Result<()> {
        let n = self.g.check_tensor(tensor)?;
        if n == 0 {
            return Ok(());
        }
        self.pushed = true;
        let g = &mut *self.g;
        let (copy, net) = (g.copy.clone(), g.net.clone());
        // The packer's tensor index is unused here: a bucket's tensors are
        // the open list, in order.
        let (closed, alone) = self.packer.push(0, n, g.cap());
        if let Some(Bucket::Packed { items, len }) = closed {
            self.launch(&items, len)?;
        }
        if alone.is_some() {
            // It runs now, alone: the buckets in flight end first.
            self.land_all()?;
        }
        let g = &mut *self.g;
        if alone.is_some() {
            g.comm.order(&net, &self.producers)?;
            g.comm.order(&net, &copy)?;
            let mut bufs: Vec<&mut C::Buf<f32>> = tensor.iter_mut().collect();
            return reduce_plain(g.comm, &mut bufs, n, g.op(), &net);
        }
        let first = self.packer.items().len() == 1;
        g.comm.order(&copy, &self.producers)?;
        if first {
            // The bucket's last use (two buckets ago) is unpacked.
            g.comm.order(&copy, &net)?;
        }
        let item = *self.packer.items().last().expect("just pushed");
        let tensor: &'t [C::Buf<f32>] = tensor;
        self.open.push(tensor);
        let one = Item {
            tensor: self.open.len() - 1,
            ..item
        };
        g.pack(self.slot, &[one], &self.open, &copy, true)
    }

    /// All-reduces the partly filled bucket now.
    pub fn flush(&mut self) -> Result<()> {
        if let Some(Bucket::Packed { items, len }) = self.packer.take() {
            self.launch(&items, len)?;
        }
        self.land_all()
    }

    /// Flushes, then makes each of `queues` (one per rank) wait on the
    /// device for every result; no host synchronisation. With nothing
    /// pushed it does nothing.
    pub fn wait(mut self, queues: &[C::Queue]) -> Result<()> {
        if queues.len() != self.g.net.len() {
            // Dropping the session still flushes and orders the buckets.
            return Err(Error::WrongStreamCount {
                got: queues.len(),
                k: self.g.net.len(),
            });
        }
        self.done = true;
        if !self.pushed {
            return Ok(());
        }
        let flushed = self.flush();
        // Nothing runs on into the tensors once the call has returned.
        let settled = self.g.comm.settle();
        flushed.and(settled)?;
        let g = &*self.g;
        g.comm.order(queues, &g.net)?;
        g.comm.order(queues, &g.copy)?;
        // Later calls on the own queues reuse the buckets.
        g.comm.order(&g.own, &g.net)?;
        Ok(())
    }

    /// The closed bucket in the current slot: all-reduced and unpacked on
    /// the communication queue after its packing. Where the backend begins
    /// it (a job that spans nodes), it stays in flight while the next
    /// bucket fills, and the one before it ends, as the fused call's do.
    fn launch(&mut self, items: &[Item], len: usize) -> Result<()> {
        let g = &mut *self.g;
        let (copy, net) = (g.copy.clone(), g.net.clone());
        g.comm.order(&net, &copy)?;
        // Its tensors are the first of the open list, in order.
        let items: Vec<Item> = items
            .iter()
            .enumerate()
            .map(|(i, it)| Item { tensor: i, ..*it })
            .collect();
        let tensors: Vec<&'t [C::Buf<f32>]> = self
            .open
            .drain(..items.len().min(self.open.len()))
            .collect();
        let slot = self.slot;
        self.slot ^= 1;
        match g.begin_bucket(slot, len, Reduce::Plain, &net) {
            Some(begun) => {
                self.flight.push_back((slot, items, tensors, begun?));
                if self.flight.len() == BEGUN_AT_ONCE {
                    self.land_oldest()?;
                }
                Ok(())
            }
            None => {
                g.reduce_bucket(slot, len, Reduce::Plain, &net)?;
                g.pack(slot, &items, &tensors, &net, false)
            }
        }
    }

    /// Ends the oldest bucket in flight and unpacks it on the
    /// communication queue.
    fn land_oldest(&mut self) -> Result<()> {
        let Some((b, items, tensors, begun)) = self.flight.pop_front() else {
            return Ok(());
        };
        let net = self.g.net.clone();
        self.g.land(b, &items, &tensors, begun, &net)
    }

    /// Ends and unpacks every bucket in flight, oldest first.
    fn land_all(&mut self) -> Result<()> {
        while !self.flight.is_empty() {
            self.land_oldest()?;
        }
        Ok(())
    }
}

impl<C: GradBackend> Drop for Session<'_, '_, '_, C> {
    /// A session dropped without `wait` still finishes its buckets and
    /// orders the communicator's own queues after them, so no pushed tensor
    /// is written after its borrow ends unnoticed by those queues.
    fn drop(&mut self) {
        if !self.done && self.pushed {
            let _ = self.flush();
            let _ = self.g.comm.settle();
            let g = &*self.g;
            let _ = g.comm.order(&g.own, &g.net);
            let _ = g.comm.order(&g.own, &g.copy);
        }
    }
}
