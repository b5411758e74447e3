//! The compressed steps between nodes, in the rank's own memory by the
//! gradient layer's tasks: half precision, and the sparse selection with
//! error feedback. Only the bytes that cross the network are compressed.

use super::steps::room;
use super::{HierComm, HERE};
use crate::collectives::Collectives;
use crate::element::RsElement;
use crate::error::Result;
use crate::front::Backend;
use crate::grad::{goes_dense, selection_tasks, sparse_top_k, Precision, SparseSent, Sparsity};
use crate::region::Region;
use ringreduce_kernels::grad::abi::{
    candidates_for, half_arg, tiles_for, SelectState, Task, TaskKind,
};
use ringreduce_kernels::Op;
use std::ops::Range;

impl<B: Backend> HierComm<B> {
    /// The half-precision step in the rank's own memory: its owned `f32`
    /// elements (`shard`, then `tail`, of `buf`) rounded to `precision`
    /// (divided by the job's size first with `prescale`) by the gradient
    /// layer's task, every node's gathered, widened back to `f32` and
    /// summed in node order into place, as the reference folds them.
    pub(super) fn cross_half_in_place<T: RsElement>(
        &self,
        buf: &B::Buf<T>,
        shard: Range<usize>,
        tail: Range<usize>,
        precision: Precision,
        prescale: bool,
    ) -> Result<()> {
        let b = &self.intra.b;
        let (c, t, m) = (shard.len(), tail.len(), self.nodes.count());
        let len = c + t;
        if len == 0 {
            return Ok(());
        }
        let (half, wide) = (len * 2, len * 4);
        let (send_room, all_room) = (room(half), room(m * half));
        let (_staging, send) = self.staging(send_room + all_room + m * wide)?;
        let all = send + send_room as u64;
        let widened = all + all_room as u64;
        let out = b.addr_at(HERE, buf, shard.start);
        let out_tail = b.addr_at(HERE, buf, tail.start);
        let div = if prescale {
            self.nodes.world() as f32
        } else {
            1.0
        };
        let format = precision.format();
        let task = |kind: TaskKind, src: u64, dst: u64, n: usize, arg: u64| -> Result<()> {
            if n == 0 {
                return Ok(());
            }
            let task = Task {
                kind: kind as u64,
                src,
                dst,
                n: n as u64,
                arg,
                ..Task::default()
            };
            // SAFETY: `src` and `dst` hold `n` elements of what the task
            // reads and writes, in `buf` or the staging held, until the
            // synchronize that ends the step.
            unsafe { b.task(HERE, task) }
        };
        let to = half_arg(format, div);
        task(TaskKind::ToHalf, out, send, c, to)?;
        task(TaskKind::ToHalf, out_tail, send + (c * 2) as u64, t, to)?;
        self.gather_in_place(send, half, all)?;
        for u in 0..m {
            let (from, into) = (all + (u * half) as u64, widened + (u * wide) as u64);
            task(TaskKind::FromHalf, from, into, len, format as u64)?;
        }
        let node =
            |at: usize| -> Vec<u64> { (0..m).map(|u| widened + (u * wide + at) as u64).collect() };
        self.fold_chain::<f32>(out, &node(0), c, Op::Sum)?;
        self.fold_chain::<f32>(out_tail, &node(c * 4), t, Op::Sum)
    }

    /// The sparse step in the rank's own memory, by the gradient layer's
    /// tasks: `g' = owned + residual` (the tail always whole), the shard's
    /// selection (the residual keeping what it leaves), every node's
    /// count, then either `(index, value)` pairs padded to the longest,
    /// gathered and scatter-added from `+0.0` in node order, or, above
    /// `dense_above`, the selection dense, gathered and summed from `+0.0`
    /// in node order: the reference's results, bit for bit. A member's
    /// pairs are its selected shard's, its padding, then its tail's; each
    /// element takes at most one pair from a member, so the order inside a
    /// member's list changes no bit.
    ///
    /// Top-K's lists are as long on every rank of the node, so the node
    /// all-gathers them and each rank rebuilds every shard of `node` (and
    /// the tail) from them: it writes its buffer once, where an all-gather
    /// of the dense shards would read and write it again. Whether it did
    /// so, leaving the node's all-gather nothing to do, comes back with
    /// what was sent.
    pub(super) fn cross_sparse_in_place<T: RsElement>(
        &self,
        buf: &B::Buf<T>,
        node: Range<usize>,
        (shard, tail): (Range<usize>, Range<usize>),
        (sparsity, dense_above): (Sparsity, f64),
        residual: Option<&mut B::Buf<f32>>,
    ) -> Result<(SparseSent, bool)> {
        let b = &self.intra.b;
        let me = self.intra.local_ranks().start;
        let (c, t, m) = (shard.len(), tail.len(), self.nodes.count());
        let (l, per) = (self.nodes.local_of(self.rank), self.nodes.per_node());
        let node_wide = matches!(sparsity, Sparsity::TopK(_));
        let len = c + t;
        let (nn, tiles) = (c as u64, tiles_for(c as u64));
        // Pairs a sparse exchange may send: beyond the dense bound it goes
        // dense.
        let bound = (dense_above * c as f64).floor().clamp(0.0, c as f64) as usize;
        let cap = (bound + t).min(len);
        let rooms = [
            room(len * 4),
            room(SelectState::BYTES),
            room(tiles as usize * 16),
            room(candidates_for(nn) as usize * 4),
            room(len * 4),
            room(cap * 8),
            (m * len * 4).max(per * m * cap * 8),
        ];
        let mut at = [0usize; 7];
        for i in 1..7 {
            at[i] = at[i - 1] + rooms[i - 1];
        }
        let (mut staging, base) = self.staging(at[6] + rooms[6])?;
        let [work, state, tile_counts, listed, acc, pairs, all] = at.map(|a| base + a as u64);
        let out = b.addr_at(HERE, buf, shard.start);
        let out_tail = b.addr_at(HERE, buf, tail.start);
        let res = residual.map_or(0, |r| b.addr_at(HERE, r, shard.start));
        let task = |t: Task| -> Result<()> {
            // SAFETY: every address is `buf`'s, the residual's or the
            // staging held, each as long as the task's `n` and `tiles`
            // name, until the synchronize that ends the step.
            unsafe { b.task(HERE, t) }
        };
        let feedback = |src: u64, aux: u64, dst: u64, n: usize| Task {
            kind: TaskKind::Feedback as u64,
            src,
            aux,
            dst,
            n: n as u64,
            ..Task::default()
        };
        let fill = |dst: u64, n: usize| Task {
            kind: TaskKind::Fill as u64,
            dst,
            n: n as u64,
            ..Task::default()
        };
        let select = Task {
            src: work,
            state,
            aux: tile_counts,
            n: nn,
            tiles,
            ..Task::default()
        };
        // Top-K's pairs, where they stay sparse, come first in the member's
        // list either way, so their any-order pass joins the selection.
        let any_order = sparse_top_k(sparsity, nn, dense_above).map(|k| Task {
            dst: pairs,
            aux2: res,
            arg: k,
            ..select
        });
        if c > 0 {
            let feedback = feedback(out, res, work, c);
            for t in selection_tasks(select, feedback, sparsity, listed, any_order) {
                task(t)?;
            }
        }
        if t > 0 {
            task(feedback(out_tail, 0, work + (c * 4) as u64, t))?;
        }
        let count = match sparsity {
            _ if c == 0 => 0,
            Sparsity::TopK(f) => Sparsity::k_of(f, nn),
            Sparsity::Threshold(_) => {
                // Host reads wait for no task (tasks hold nothing here).
                self.intra.synchronize()?;
                let word = (state - base) as usize + 8 * SelectState::COUNT_WORD;
                let held = staging.as_ref().expect("made");
                let bytes = self.intra.read(me, held, word..word + 8)?;
                u64::from_le_bytes(bytes.try_into().expect("eight bytes"))
            }
        };
        // Top-K selects as many on every node (their shards are equal):
        // only a threshold's counts need to cross.
        let most = match sparsity {
            Sparsity::TopK(_) => count as usize + t,
            Sparsity::Threshold(_) => {
                let counts = self.gather_across(&[count + t as u64])?;
                counts.iter().copied().max().unwrap_or(0) as usize
            }
        };
        let dense = goes_dense((most - t) as u64, nn, dense_above);
        if dense {
            task(fill(acc, len))?;
            if c > 0 {
                task(Task {
                    kind: TaskKind::WriteSelected as u64,
                    dst: work,
                    aux2: res,
                    arg: u64::MAX,
                    ..select
                })?;
            }
            let bytes = len * 4;
            self.gather_in_place(work, bytes, all)?;
            let from = |at: usize| -> Vec<u64> {
                let node = (0..m).map(|u| all + (u * bytes + at) as u64);
                std::iter::once(acc + at as u64).chain(node).collect()
            };
            self.fold_chain::<f32>(out, &from(0), c, Op::Sum)?;
            self.fold_chain::<f32>(out_tail, &from(c * 4), t, Op::Sum)?;
            return Ok((SparseSent { pairs: 0, dense }, false));
        }
        // Without a tail the sums land in the shard itself; with one, in
        // `acc` first, since the shard and the tail are apart.
        let sums = if t == 0 { out } else { acc };
        if !node_wide {
            task(fill(sums, len))?;
        }
        let written = Task {
            kind: TaskKind::WriteSelected as u64,
            dst: pairs,
            aux2: res,
            arg: (most - t) as u64,
            ..select
        };
        if c > 0 {
            task(written)?;
            if res != 0 {
                task(Task {
                    kind: TaskKind::ResidualUntied as u64,
                    ..written
                })?;
            }
        }
        if t > 0 {
            // The tail's pairs, every element of it, after the padding,
            // written once the queued tasks are done with the staging.
            self.intra.synchronize()?;
            let values: Vec<T> = self.intra.read(me, buf, tail.clone())?;
            let words: Vec<u32> = bytemuck::cast_slice::<T, u32>(&values)
                .iter()
                .enumerate()
                .flat_map(|(i, &v)| [(c + i) as u32, v])
                .collect();
            let held = staging.as_mut().expect("made");
            let at = (pairs - base) as usize + (most - t) * 8;
            self.intra
                .write(me, held, at, bytemuck::cast_slice(&words))?;
        }
        // Node-wide, local rank `l`'s lists from every node are block `l`.
        let lists = m * most * 8;
        let mine = all + if node_wide { l * lists } else { 0 } as u64;
        self.gather_in_place(pairs, most * 8, mine)?;
        // The pairs at `src` in `first..end` of what they index, added to
        // `dst`, which holds that range.
        let scatter = |src: u64, dst: u64, (first, end): (usize, usize)| Task {
            kind: TaskKind::ScatterAdd as u64,
            src,
            dst,
            aux: first as u64,
            n: most as u64,
            arg: end as u64,
            ..Task::default()
        };
        let sent = SparseSent {
            pairs: most as u64,
            dense,
        };
        if node_wide {
            let at = (all - base) as usize;
            let held = staging.as_mut().expect("made");
            self.intra.all_gather(&mut [Region::InPlace {
                buf: held,
                at: at..at + per * lists,
            }])?;
            // Every element of the node's shards and the tail from `+0.0`,
            // each node's pair added in node order, as the reference folds.
            let whole = b.addr_at(HERE, buf, node.start);
            task(fill(whole, per * c))?;
            if t > 0 {
                task(fill(out_tail, t))?;
            }
            for k in 0..per {
                let from = |u: usize| all + (k * lists + u * most * 8) as u64;
                let into = whole + (k * c * 4) as u64;
                for u in 0..m {
                    task(scatter(from(u), into, (0, c)))?;
                    if k == l && t > 0 {
                        // Every rank of the node sends the same tail.
                        task(scatter(from(u), out_tail, (c, len)))?;
                    }
                }
            }
            return Ok((sent, true));
        }
        for u in 0..m {
            task(scatter(all + (u * most * 8) as u64, sums, (0, len)))?;
        }
        if t > 0 {
            self.fold_chain::<f32>(out, &[acc], c, Op::Sum)?;
            self.fold_chain::<f32>(out_tail, &[acc + (c * 4) as u64], t, Op::Sum)?;
        }
        Ok((sent, false))
    }
}
