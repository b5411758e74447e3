//! Which ranks share a host: a job's nodes as the rendezvous reported them
//! (each rank's host name, or `RINGREDUCE_HOST_NAME` where a test sets
//! one), never guessed from rank numbers. A hierarchical collective runs
//! our kernels among the ranks of a node and the network engine among the
//! ranks that hold the same local index on every node.

use crate::error::{Error, Result};

/// A job's ranks grouped by host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nodes {
    /// Each node's host name, in node order.
    names: Vec<String>,
    /// Each node's ranks, ascending: position is the local index.
    members: Vec<Vec<usize>>,
    /// Each rank's node.
    node_of: Vec<usize>,
    /// Each rank's local index on its node.
    local_of: Vec<usize>,
}

impl Nodes {
    /// Groups ranks `0..hosts.len()` by `hosts[rank]`. Nodes are numbered
    /// in the order of their lowest rank and a node's ranks in rank order,
    /// so every rank computes the same grouping from the same table,
    /// whatever order a launcher placed ranks in (node-major as torchrun
    /// does, or round-robin). Every node must hold as many ranks, since the
    /// step between nodes pairs the ranks of equal local index.
    pub fn group<S: AsRef<str>>(hosts: &[S]) -> Result<Nodes> {
        if hosts.is_empty() {
            return Err(Error::ZeroRanks);
        }
        let mut names: Vec<String> = Vec::new();
        let mut members: Vec<Vec<usize>> = Vec::new();
        let mut node_of = Vec::with_capacity(hosts.len());
        let mut local_of = Vec::with_capacity(hosts.len());
        for (rank, h) in hosts.iter().enumerate() {
            let h = h.as_ref();
            let node = match names.iter().position(|n| n == h) {
                Some(n) => n,
                None => {
                    names.push(h.to_string());
                    members.push(Vec::new());
                    names.len() - 1
                }
            };
            node_of.push(node);
            local_of.push(members[node].len());
            members[node].push(rank);
        }
        let per_node = members[0].len();
        if members.iter().any(|m| m.len() != per_node) {
            return Err(Error::UnevenNodes {
                sizes: names
                    .iter()
                    .zip(&members)
                    .map(|(n, m)| (n.clone(), m.len()))
                    .collect(),
            });
        }
        Ok(Nodes {
            names,
            members,
            node_of,
            local_of,
        })
    }

    /// Nodes in the job.
    pub fn count(&self) -> usize {
        self.members.len()
    }

    /// Ranks on each node.
    pub fn per_node(&self) -> usize {
        self.members[0].len()
    }

    /// Ranks in the job.
    pub fn world(&self) -> usize {
        self.node_of.len()
    }

    /// The host name of node `node`.
    pub fn name(&self, node: usize) -> &str {
        &self.names[node]
    }

    /// The node rank `rank` runs on.
    pub fn node_of(&self, rank: usize) -> usize {
        self.node_of[rank]
    }

    /// Rank `rank`'s index among its node's ranks.
    pub fn local_of(&self, rank: usize) -> usize {
        self.local_of[rank]
    }

    /// The ranks of node `node`, by local index.
    pub fn members(&self, node: usize) -> &[usize] {
        &self.members[node]
    }

    /// The ranks of local index `local` on every node, in node order: the
    /// group the step between nodes runs in.
    pub fn across(&self, local: usize) -> Vec<usize> {
        self.members.iter().map(|m| m[local]).collect()
    }

    /// Whether every rank shares one host: no step between nodes.
    pub fn is_one_node(&self) -> bool {
        self.members.len() == 1
    }

    /// Whether node `node`'s ranks are consecutive job ranks, so that its
    /// ranks' blocks of a job-wide array are one run, in local order.
    pub fn is_run(&self, node: usize) -> bool {
        self.members[node].windows(2).all(|w| w[1] == w[0] + 1)
    }

    /// Whether each node's ranks are consecutive (`node * per_node +
    /// local`), as torchrun and Slurm's block distribution number them.
    pub fn is_node_major(&self) -> bool {
        let l = self.per_node();
        (0..self.world()).all(|r| r == self.node_of[r] * l + self.local_of[r])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn torchrun_numbering_groups_node_major() {
        let n = Nodes::group(&["a", "a", "b", "b"]).unwrap();
        assert_eq!((n.count(), n.per_node(), n.world()), (2, 2, 4));
        assert_eq!(n.members(1), &[2, 3]);
        assert_eq!((n.node_of(3), n.local_of(3)), (1, 1));
        assert_eq!(n.across(0), vec![0, 2]);
        assert_eq!(n.across(1), vec![1, 3]);
        assert_eq!(n.name(1), "b");
        assert!(n.is_node_major() && !n.is_one_node());
        assert!(n.is_run(0) && n.is_run(1));
    }

    #[test]
    fn round_robin_placement_keeps_rank_order_within_a_node() {
        // mpirun --map-by node: ranks alternate between the hosts.
        let n = Nodes::group(&["b", "a", "b", "a", "b", "a"]).unwrap();
        // Node 0 is the host of rank 0, whatever its name sorts as.
        assert_eq!(n.name(0), "b");
        assert_eq!(n.members(0), &[0, 2, 4]);
        assert_eq!(n.members(1), &[1, 3, 5]);
        assert_eq!(n.across(2), vec![4, 5]);
        assert_eq!((n.node_of(5), n.local_of(5)), (1, 2));
        assert!(!n.is_node_major());
        assert!(!n.is_run(0) && !n.is_run(1));
    }

    #[test]
    fn one_host_and_one_rank_per_host() {
        let one = Nodes::group(&["h"; 4]).unwrap();
        assert!(one.is_one_node() && one.is_node_major());
        assert_eq!(one.across(3), vec![3]);
        let flat = Nodes::group(&["a", "b", "c", "d"]).unwrap();
        assert_eq!((flat.count(), flat.per_node()), (4, 1));
        assert_eq!(flat.across(0), vec![0, 1, 2, 3]);
    }

    #[test]
    fn uneven_nodes_and_no_ranks_are_typed_errors() {
        match Nodes::group(&["a", "a", "b"]) {
            Err(Error::UnevenNodes { sizes }) => {
                assert_eq!(sizes, vec![("a".to_string(), 2), ("b".to_string(), 1)]);
            }
            other => panic!("expected UnevenNodes, got {other:?}"),
        }
        assert!(matches!(Nodes::group::<&str>(&[]), Err(Error::ZeroRanks)));
    }
}
