//! The hierarchical reduce-scatter and all-gather: the node's step into
//! the rank's memory, every node's part gathered across nodes, then placed
//! (all-gather) or folded in node order (reduce-scatter).

use super::steps::room;
use super::{HierComm, HERE};
use crate::collectives::Collectives;
use crate::element::RsElement;
use crate::error::{Error, Result};
use crate::front::{Backend, Comm};
use crate::region::Region;
use ringreduce_kernels::Op;
use std::ops::Range;

impl<B: Backend> HierComm<B> {
    /// Rank `g` gets `op` over every rank of block `g` of `send` (`world`
    /// blocks of `recv`'s length), and waits for it. On one host, the
    /// host's reduce-scatter. Across hosts: for each node `m`, the
    /// blocks of `m`'s ranks (in local order) are reduce-scattered inside
    /// this node, so local rank `l` holds this node's part of the block of
    /// `m`'s rank `l`; the step between nodes then brings every rank each
    /// node's part of its own block, folded in node order. `Avg` sums
    /// throughout and divides once.
    pub fn reduce_scatter<T: RsElement>(
        &self,
        send: &B::Buf<T>,
        recv: &mut B::Buf<T>,
        op: Op,
    ) -> Result<()> {
        self.guarded(|| self.reduce_scatter_steps(send, recv, op))
    }

    fn reduce_scatter_steps<T: RsElement>(
        &self,
        send: &B::Buf<T>,
        recv: &mut B::Buf<T>,
        op: Op,
    ) -> Result<()> {
        let c = <Comm<B> as Collectives>::len_of(recv);
        let (nodes, per) = (&self.nodes, self.nodes.per_node());
        if c == 0 {
            return Ok(());
        }
        if nodes.is_one_node() {
            let mut r = [Region::OutOfPlace {
                send,
                send_at: 0..per * c,
                recv,
                recv_at: 0..c,
            }];
            self.intra.reduce_scatter(&mut r, op)?;
            return self.intra.synchronize();
        }
        let mut region = Region::OutOfPlace {
            send,
            send_at: 0..c * nodes.world(),
            recv,
            recv_at: 0..c,
        };
        self.reduce_scatter_apart(&mut region, 0..c * nodes.world(), 0..c, op)
    }

    /// Every rank gets every rank's `send` (as long on every rank), in
    /// rank order, in `recv`, and waits for it: on one host the host's
    /// all-gather; across hosts an all-gather inside the node, then of the
    /// node's blocks across nodes.
    pub fn all_gather<T: RsElement>(&self, send: &B::Buf<T>, recv: &mut B::Buf<T>) -> Result<()> {
        self.guarded(|| self.all_gather_steps(send, recv))
    }

    fn all_gather_steps<T: RsElement>(&self, send: &B::Buf<T>, recv: &mut B::Buf<T>) -> Result<()> {
        let c = <Comm<B> as Collectives>::len_of(send);
        let mut region = Region::OutOfPlace {
            send,
            send_at: 0..c,
            recv,
            recv_at: 0..self.nodes.world() * c,
        };
        self.all_gather_apart(&mut region, 0..c, 0..self.nodes.world() * c)
    }

    /// The all-gather of `region`, whose input (`send_at`) and output
    /// (`recv_at`, every rank's block in rank order) lie apart, in the
    /// rank's memory: the node's all-gather into the head of the output
    /// (its scratch until the end), every node's run gathered into
    /// staging, then each block copied to its rank's place (a fold of one
    /// source, so bit for bit). Nothing crosses the host.
    pub(crate) fn all_gather_apart<T: RsElement>(
        &self,
        region: &mut Region<'_, B::Buf<T>>,
        send_at: Range<usize>,
        recv_at: Range<usize>,
    ) -> Result<()> {
        let (nodes, per, c) = (&self.nodes, self.nodes.per_node(), send_at.len());
        if c == 0 {
            return Ok(());
        }
        let head = recv_at.start..recv_at.start + per * c;
        let node = region.apart(send_at, head.clone());
        let mut node =
            [node.ok_or_else(|| Error::Broken("internal: an in-place all-gather".into()))?];
        self.intra.all_gather(&mut node)?;
        if nodes.is_one_node() {
            return self.intra.synchronize();
        }
        let out = region.output();
        let sz = std::mem::size_of::<T>();
        let bytes = per * c * sz;
        let (_staging, all) = self.staging(nodes.count() * bytes)?;
        let b = &self.intra.b;
        self.gather_in_place(b.addr_at(HERE, out, head.start), bytes, all)?;
        for m in 0..nodes.count() {
            for (l, &g) in nodes.members(m).iter().enumerate() {
                let from = all + ((m * per + l) * c * sz) as u64;
                let to = b.addr_at(HERE, out, recv_at.start + g * c);
                self.fold_chain::<T>(to, &[from], c, Op::Sum)?;
            }
        }
        self.intra.synchronize()
    }

    /// The reduce-scatter of `region` (input and output apart) in the
    /// rank's memory: each node's run of the input (its ranks' blocks in
    /// local order: one range where they are consecutive job ranks, as
    /// torchrun and srun's block distribution place them, else gathered
    /// into device scratch first) reduce-scattered inside this node into
    /// the output, whose result, this node's part of that node's rank's
    /// block, is copied to staging; every node's parts gathered; this
    /// rank's block folded from them in node order (`Avg` sums and divides
    /// once, by the job's size).
    pub(crate) fn reduce_scatter_apart<T: RsElement>(
        &self,
        region: &mut Region<'_, B::Buf<T>>,
        send_at: Range<usize>,
        recv_at: Range<usize>,
        op: Op,
    ) -> Result<()> {
        let inner = if op == Op::Avg { Op::Sum } else { op };
        let (nodes, per, c) = (&self.nodes, self.nodes.per_node(), recv_at.len());
        if c == 0 {
            return Ok(());
        }
        let (count, sz) = (nodes.count(), std::mem::size_of::<T>());
        let bytes = count * c * sz;
        let (_staging, parts) = self.staging(room(bytes) + count * bytes)?;
        let all = parts + room(bytes) as u64;
        let b = &self.intra.b;
        let scratch = if (0..count).all(|m| nodes.is_run(m)) {
            None
        } else {
            Some(b.zeroed::<T>(HERE, per * c)?)
        };
        for m in 0..count {
            let members = nodes.members(m);
            let node = match &scratch {
                Some(run) if !nodes.is_run(m) => {
                    // One scratch for every such node: the queue runs these
                    // copies after the previous node's step has taken its run.
                    for (l, &g) in members.iter().enumerate() {
                        let at = send_at.start + g * c;
                        self.copy_into(run, l * c, region.input(), at..at + c)?;
                    }
                    Some(region.with_input(run, 0..per * c, recv_at.clone()))
                }
                _ => {
                    let first = send_at.start + members[0] * c;
                    region.apart(first..first + per * c, recv_at.clone())
                }
            };
            let mut node =
                [node
                    .ok_or_else(|| Error::Broken("internal: an in-place reduce-scatter".into()))?];
            self.intra.reduce_scatter(&mut node, inner)?;
            let out = node[0].output();
            let to = parts + (m * c * sz) as u64;
            self.fold_chain::<T>(to, &[b.addr_at(HERE, out, recv_at.start)], c, Op::Sum)?;
        }
        self.gather_in_place(parts, bytes, all)?;
        let node = nodes.node_of(self.rank);
        let from: Vec<u64> = (0..count)
            .map(|m| all + ((m * count + node) * c * sz) as u64)
            .collect();
        let out = region.output();
        self.fold_chain::<T>(b.addr_at(HERE, out, recv_at.start), &from, c, op)?;
        self.intra.synchronize()
    }
}
