//! The sparse all-reduce: error feedback, selection on the device (radix
//! select for top-K, a threshold otherwise), an index-ordered compaction
//! into `(index, value)` pairs, an all-gather of the pairs, and a
//! scatter-add in user-rank order into the zeroed tensor. Above
//! [`GradConfig::dense_above`](super::GradConfig) it sends the selection
//! dense instead, with one all-reduce.

use super::backend::{GradBackend, Wire};
use super::bucket::{pieces, Item};
use super::fused::{copy_items, copy_task, reduce_plain};
use super::{across, slot, GradSync, Slots, Sparsity};
use crate::error::{Error, Result};
use crate::region::Region;
use ringreduce_kernels::grad::abi::{
    candidates_for, tiles_for, SelectState, Task, TaskKind, SELECT_PASSES,
};
use ringreduce_kernels::{Collective, Op};

/// What a sparse call sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SparseSent {
    /// Pairs each rank sent (the padded count), or 0 when it went dense.
    pub pairs: u64,
    /// Whether the selection went as one dense all-reduce.
    pub dense: bool,
}

impl<'c, C: GradBackend> GradSync<'c, C> {
    /// SINGA's `sparsification`: sends only the selected elements of
    /// `g' = tensor + residual`, and leaves in `tensor` the sum over ranks
    /// of what each sent. With a residual (error feedback), it becomes
    /// `g'` less what was sent. Top-K needs no host synchronisation; a
    /// threshold synchronises once, to size the exchange to the largest
    /// count. Results are sums (the layer's `average` does not apply). NaN
    /// magnitudes count as the largest and are sent.
    pub fn sparse_all_reduce(
        &mut self,
        tensor: &mut [C::Buf<f32>],
        sparsity: Sparsity,
        residual: Option<&mut [C::Buf<f32>]>,
    ) -> Result<SparseSent> {
        sparsity.check()?;
        let n = self.check_tensor(tensor)?;
        if let Some(r) = &residual {
            self.check_residual(r, n)?;
        }
        if n as u64 >= u32::MAX as u64 {
            return Err(Error::SparseTooLong(n as u64));
        }
        let mut residual = residual;
        let wire = self.sparse_wire(sparsity);
        let own = self.own.clone();
        let mut bufs: Vec<&mut C::Buf<f32>> = tensor.iter_mut().collect();
        let r = residual.as_deref_mut().and_then(|r| r.first_mut());
        if let Some(done) = across(self.comm, &mut bufs, n, wire, r, &own) {
            return done;
        }
        let k = tensor.len();
        let g: Vec<u64> = (0..k).map(|u| self.comm.addr(u, &tensor[u])).collect();
        let r: Option<Vec<u64>> = residual
            .as_ref()
            .map(|r| (0..k).map(|u| self.comm.addr(u, &r[u])).collect());
        let mut holds: Vec<Vec<C::Hold>> = tensor.iter().map(|b| vec![C::hold(b)]).collect();
        if let Some(rs) = &residual {
            for (h, b) in holds.iter_mut().zip(rs.iter()) {
                h.push(C::hold(b));
            }
        }
        self.sparse_core(&g, r.as_deref(), holds, n, sparsity)
    }

    /// The sparse all-reduce of a whole list as one selection (top-K over
    /// all of it): packed into one buffer (and the residuals into another),
    /// then as [`sparse_all_reduce`](Self::sparse_all_reduce), then
    /// unpacked.
    pub fn fused_sparse_all_reduce(
        &mut self,
        tensors: &mut [Vec<C::Buf<f32>>],
        sparsity: Sparsity,
        residuals: Option<&mut [Vec<C::Buf<f32>>]>,
    ) -> Result<SparseSent> {
        sparsity.check()?;
        let mut lens = Vec::with_capacity(tensors.len());
        for t in tensors.iter() {
            lens.push(self.check_tensor(t)?);
        }
        if let Some(rs) = &residuals {
            if rs.len() != tensors.len() {
                return Err(Error::WrongBufferCount {
                    got: rs.len(),
                    k: tensors.len(),
                });
            }
            for (r, &n) in rs.iter().zip(&lens) {
                self.check_residual(r, n)?;
            }
        }
        // Back to back, with no padding between tensors: a gap would be
        // an element the selection could pick.
        let mut items = Vec::with_capacity(lens.len());
        let mut len = 0;
        for (tensor, &n) in lens.iter().enumerate() {
            items.push(Item {
                tensor,
                offset: len,
                len: n,
            });
            len += n;
        }
        if len as u64 >= u32::MAX as u64 {
            return Err(Error::SparseTooLong(len as u64));
        }
        let own = self.own.clone();
        let k = self.comm.local_ranks().len();
        let mut g = Vec::with_capacity(k);
        let mut r = Vec::with_capacity(k);
        for (u, q) in own.iter().enumerate() {
            let pg = slot(self.comm, &mut self.buckets[1], u, q, len)?;
            g.push(self.comm.addr(u, pg));
            if residuals.is_some() {
                let pr = slot(self.comm, &mut self.packed_residual, u, q, len)?;
                r.push(self.comm.addr(u, pr));
            }
        }
        let lists: Vec<&[Vec<C::Buf<f32>>]> = match &residuals {
            Some(rs) => vec![&tensors[..], &rs[..]],
            None => vec![&tensors[..]],
        };
        let bases = [&g, &r];
        for (list, base) in lists.iter().zip(bases) {
            self.copy_list(list, &items, base, true)?;
        }
        let wire = self.sparse_wire(sparsity);
        let comm = self.comm;
        let mut bufs = self.buckets[1].all_mut();
        let pr = match residuals.is_some() {
            true => self.packed_residual.all_mut().pop(),
            false => None,
        };
        let sent = match across(comm, &mut bufs, len, wire, pr, &own) {
            Some(done) => done?,
            None => {
                // Held only for the layer's own tasks: a hold keeps the
                // host's accessors waiting, which the backend's step
                // between nodes would be.
                let mut holds: Vec<Vec<C::Hold>> = self.buckets[1]
                    .all_mut()
                    .into_iter()
                    .map(|b| vec![C::hold(b)])
                    .collect();
                if residuals.is_some() {
                    for (h, b) in holds.iter_mut().zip(self.packed_residual.all_mut()) {
                        h.push(C::hold(b));
                    }
                }
                let rr = residuals.is_some().then_some(&r[..]);
                self.sparse_core(&g, rr, holds, len, sparsity)?
            }
        };
        for (list, base) in lists.iter().zip(bases) {
            self.copy_list(list, &items, base, false)?;
        }
        Ok(sent)
    }

    /// The sparse step between nodes, for a backend that has one.
    fn sparse_wire(&self, sparsity: Sparsity) -> Wire {
        Wire::Sparse {
            sparsity,
            dense_above: self.config.dense_above,
        }
    }

    fn check_residual(&self, r: &[C::Buf<f32>], n: usize) -> Result<()> {
        self.check_lengths(r, n, |rank, got, want| Error::ResidualLength {
            rank,
            got,
            want,
        })
    }

    /// Packs (`into`) or unpacks a list's tensors at `items` of the packed
    /// buffers at `base` (one address per rank), on the own queues.
    fn copy_list(
        &mut self,
        list: &[Vec<C::Buf<f32>>],
        items: &[Item],
        base: &[u64],
        into: bool,
    ) -> Result<()> {
        for (u, q) in self.own.iter().enumerate() {
            copy_items(
                self.comm,
                u,
                q,
                list,
                items,
                base[u],
                into,
                Vec::new(),
                &mut self.descs,
            )?;
        }
        Ok(())
    }

    /// The sparse path over raw addresses: `g` (and the residual `r`) of
    /// `n` f32s per rank, kept alive by `holds`.
    fn sparse_core(
        &mut self,
        g: &[u64],
        r: Option<&[u64]>,
        holds: Vec<Vec<C::Hold>>,
        n: usize,
        sparsity: Sparsity,
    ) -> Result<SparseSent> {
        if n == 0 {
            return Ok(SparseSent {
                pairs: 0,
                dense: false,
            });
        }
        let comm = self.comm;
        let own = self.own.clone();
        let k = comm.k();
        let nn = n as u64;
        let tiles = tiles_for(nn);
        let dense_above = self.config.dense_above;
        let [states, tile_counts, pairs, gathered, counts, listed] = &mut self.words;
        let state_words = SelectState::BYTES.div_ceil(8);
        let sparse_k = sparse_top_k(sparsity, nn, dense_above);
        // Selection, per rank.
        let mut at = Vec::with_capacity(k);
        for (u, q) in own.iter().enumerate() {
            let work = slot(comm, &mut self.work, u, q, n)?;
            let st = slot(comm, states, u, q, state_words)?;
            let tc = slot(comm, tile_counts, u, q, 2 * tiles as usize)?;
            let li = slot(comm, listed, u, q, candidates_for(nn).div_ceil(2) as usize)?;
            let (w, s, t) = (comm.addr(u, &*work), comm.addr(u, &*st), comm.addr(u, &*tc));
            at.push((w, s, t));
            let base = Task {
                src: w,
                state: s,
                aux: t,
                n: nn,
                tiles,
                ..Task::default()
            };
            let feedback = Task {
                kind: TaskKind::Feedback as u64,
                src: g[u],
                aux: r.map_or(0, |r| r[u]),
                dst: w,
                ..base
            };
            let pr = match sparse_k {
                Some(k) => Some(&*slot(comm, pairs, u, q, k as usize)?),
                None => None,
            };
            let any_order = pr.zip(sparse_k).map(|(pr, k)| Task {
                dst: comm.addr(u, pr),
                aux2: r.map_or(0, |r| r[u]),
                arg: k,
                ..base
            });
            let tasks = selection_tasks(base, feedback, sparsity, comm.addr(u, &*li), any_order);
            for t in tasks {
                let mut h = vec![C::hold(&*work), C::hold(&*st), C::hold(&*tc), C::hold(&*li)];
                h.extend(pr.map(C::hold));
                // SAFETY: every address is a live buffer of this rank, of
                // the lengths the task's `n` and `tiles` name (held).
                unsafe { comm.run_task(u, q, t, h)? };
            }
        }
        // How many pairs each rank sends.
        let cap = match sparsity {
            Sparsity::TopK(f) => Sparsity::k_of(f, nn),
            Sparsity::Threshold(_) => {
                for (u, q) in own.iter().enumerate() {
                    slot(comm, counts, u, q, k)?;
                }
                let word = SelectState::COUNT_WORD;
                gather_slots(comm, states, word..word + 1, counts, &own)?;
                // The one host synchronisation of the threshold path.
                let first = comm.local_ranks().start;
                let all = comm.read(first, counts.all_mut()[0], 0..k)?;
                all.into_iter().max().unwrap_or(0)
            }
        };
        let dense = goes_dense(cap, nn, dense_above);
        let mut holds = holds;
        if dense {
            for (u, q) in own.iter().enumerate() {
                let (w, s, t) = at[u];
                let task = Task {
                    kind: TaskKind::WriteSelected as u64,
                    src: w,
                    dst: w,
                    aux: t,
                    aux2: r.map_or(0, |r| r[u]),
                    state: s,
                    n: nn,
                    arg: u64::MAX,
                    tiles,
                };
                let h = hold_slots::<C>(&self.work, states, tile_counts, u);
                // SAFETY: as above; `r[u]` is the held residual.
                unsafe { comm.run_task(u, q, task, h)? };
            }
            reduce_plain(comm, &mut self.work.all_mut(), n, Op::Sum, &own)?;
            for (u, q) in own.iter().enumerate() {
                let mut descs = Vec::new();
                pieces(g[u], at[u].0, n, false, &mut descs);
                let mut h = std::mem::take(&mut holds[u]);
                h.push(C::hold(&self.work.bufs[u].as_ref().expect("allocated").0));
                copy_task(comm, u, q, &descs, h, &mut self.descs)?;
            }
            return Ok(SparseSent {
                pairs: 0,
                dense: true,
            });
        }
        let cap_n = cap as usize;
        for (u, q) in own.iter().enumerate() {
            let pr = slot(comm, pairs, u, q, cap_n)?;
            slot(comm, gathered, u, q, k * cap_n)?;
            let (w, s, t) = at[u];
            let task = Task {
                kind: TaskKind::WriteSelected as u64,
                src: w,
                dst: comm.addr(u, &*pr),
                aux: t,
                aux2: r.map_or(0, |r| r[u]),
                state: s,
                n: nn,
                arg: cap,
                tiles,
            };
            let mut h = hold_slots::<C>(&self.work, states, tile_counts, u);
            h.push(C::hold(&*pr));
            // SAFETY: `pr` holds `cap` pairs; the rest as above.
            unsafe { comm.run_task(u, q, task, h)? };
            if task.aux2 != 0 {
                let rest = Task {
                    kind: TaskKind::ResidualUntied as u64,
                    ..task
                };
                let h = hold_slots::<C>(&self.work, states, tile_counts, u);
                // SAFETY: as above; it reads `w` and the state, writes the
                // residual, which is not `w`.
                unsafe { comm.run_task(u, q, rest, h)? };
            }
        }
        gather_slots(comm, pairs, 0..cap_n, gathered, &own)?;
        for (u, q) in own.iter().enumerate() {
            let gb = &gathered.bufs[u].as_ref().expect("allocated").0;
            let ga = comm.addr(u, gb);
            let mut tasks = vec![Task {
                kind: TaskKind::Fill as u64,
                dst: g[u],
                n: nn,
                ..Task::default()
            }];
            // User-rank order: every element folds 0 + v0 + v1 + ….
            for v in 0..k as u64 {
                tasks.push(Task {
                    kind: TaskKind::ScatterAdd as u64,
                    src: ga + 8 * v * cap,
                    dst: g[u],
                    n: cap,
                    arg: nn,
                    ..Task::default()
                });
            }
            let last = tasks.len() - 1;
            for (i, t) in tasks.into_iter().enumerate() {
                let mut h = vec![C::hold(gb)];
                if i == last {
                    h.extend(std::mem::take(&mut holds[u]));
                }
                // SAFETY: `g[u]` holds `n` f32s (held), `gb` k * cap pairs.
                unsafe { comm.run_task(u, q, t, h)? };
            }
        }
        Ok(SparseSent {
            pairs: cap,
            dense: false,
        })
    }
}

/// Whether a selection of `count` of `n` elements goes dense: above
/// `dense_above` of them, or none at all. The flat sparse all-reduce and
/// the step between nodes both decide so.
pub(crate) fn goes_dense(count: u64, n: u64, dense_above: f64) -> bool {
    n == 0 || count as f64 > dense_above * n as f64
}

/// Top-K's count of `n` elements where its exchange stays sparse: known
/// before it selects, so that its pairs' any-order pass can join the
/// selection ([`selection_tasks`]).
pub(crate) fn sparse_top_k(sparsity: Sparsity, n: u64, dense_above: f64) -> Option<u64> {
    match sparsity {
        Sparsity::TopK(f) => Some(Sparsity::k_of(f, n)),
        Sparsity::Threshold(_) => None,
    }
    .filter(|&k| !goes_dense(k, n, dense_above))
}

/// The tasks that select from the `n` f32s of work at `base.src` (its
/// state at `base.state`, tile counts at `base.aux`): `feedback` (which
/// writes `g + r` into the work, and for top-K counts its first radix pass
/// on the way), then top-K's radix passes (the last two over the candidate
/// list at `listed`, [`candidates_for`] words, where it holds them) or the
/// threshold, then the tile counts and their scan. With `pairs` (top-K's
/// write of its pairs where the exchange stays sparse: `dst`, `arg` and
/// the residual `aux2`), the any-order pass goes before the counts: where
/// every tie is taken it writes the pairs and the residual in one
/// coalesced pass, and the ordered tasks, the counts and those the caller
/// queues after them, find nothing to do. The flat sparse all-reduce and
/// the hierarchical step between nodes both select so.
pub(crate) fn selection_tasks(
    base: Task,
    feedback: Task,
    sparsity: Sparsity,
    listed: u64,
    pairs: Option<Task>,
) -> Vec<Task> {
    debug_assert_eq!(
        feedback.dst, base.src,
        "the selection reads what feedback writes"
    );
    let mut tasks = Vec::new();
    match sparsity {
        Sparsity::TopK(f) => {
            tasks.push(Task {
                kind: TaskKind::SelectTopK as u64,
                arg: Sparsity::k_of(f, base.n),
                ..base
            });
            // The feedback counts pass 0 as it writes the sums.
            tasks.push(Task {
                state: base.state,
                ..feedback
            });
            for p in 0..SELECT_PASSES {
                if p > 0 {
                    tasks.push(Task {
                        kind: TaskKind::Histogram as u64,
                        arg: p,
                        aux2: listed,
                        ..base
                    });
                }
                tasks.push(Task {
                    kind: TaskKind::PickDigit as u64,
                    arg: p,
                    ..base
                });
            }
            if let Some(w) = pairs {
                tasks.push(Task {
                    kind: TaskKind::WriteAnyOrder as u64,
                    dst: w.dst,
                    aux2: w.aux2,
                    arg: w.arg,
                    ..base
                });
            }
        }
        Sparsity::Threshold(th) => {
            tasks.push(feedback);
            tasks.push(Task {
                kind: TaskKind::SelectThreshold as u64,
                arg: th.abs().to_bits() as u64,
                ..base
            });
        }
    }
    for kind in [TaskKind::CountTiles, TaskKind::ScanTiles] {
        tasks.push(Task {
            kind: kind as u64,
            ..base
        });
    }
    tasks
}

/// An all-gather of `send_at` of every rank's `send` slot into the start of
/// its `recv` slot (`k` times as long), on `queues`.
fn gather_slots<C: GradBackend>(
    comm: &C,
    send: &mut Slots<C::Buf<u64>>,
    send_at: std::ops::Range<usize>,
    recv: &mut Slots<C::Buf<u64>>,
    queues: &[C::Queue],
) -> Result<()> {
    let k = comm.k();
    let mut regions: Vec<Region<'_, C::Buf<u64>>> = send
        .all_mut()
        .into_iter()
        .zip(recv.all_mut())
        .map(|(s, r)| Region::OutOfPlace {
            send: &*s,
            send_at: send_at.clone(),
            recv: r,
            recv_at: 0..k * send_at.len(),
        })
        .collect();
    comm.collective_on(Collective::AllGather, &mut regions, Op::Sum, queues)
}

/// Holds of rank `u`'s work, state and tile buffers.
fn hold_slots<C: GradBackend>(
    work: &Slots<C::Buf<f32>>,
    states: &Slots<C::Buf<u64>>,
    tiles: &Slots<C::Buf<u64>>,
    u: usize,
) -> Vec<C::Hold> {
    let mut h = Vec::new();
    if let Some((b, _)) = &work.bufs[u] {
        h.push(C::hold(b));
    }
    for s in [states, tiles] {
        if let Some((b, _)) = &s.bufs[u] {
            h.push(C::hold(b));
        }
    }
    h
}
