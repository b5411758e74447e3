//! Joining a job whose ranks span hosts: one rendezvous of the whole job
//! finds the hosts, then each rank joins its host's ranks ([`Comm`], one
//! process per rank) and links to the ranks of its local index on the
//! other hosts (the step between nodes, [`Across`]). The collectives on top
//! are `crate::hier`'s.

use super::engine::{Comm, Engine};
use super::{meet, peer_error};
use crate::across::{Across, TcpAcross, ThroughHost};
use crate::bootstrap::{Identity, UniqueId, Watch};
use crate::config::CommConfig;
use crate::error::{Error, Result};
use crate::job::Table;
use crate::nodes::Nodes;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

/// What each rank tells every other once the hosts are known: its offer
/// to its node and where its member of the step between nodes listens.
#[derive(Serialize, Deserialize)]
struct Card {
    offer: Vec<u8>,
    device: [u8; 16],
    across: SocketAddr,
    /// Where NCCL links the nodes: the NCCL id of this rank's local index
    /// (from its member on node 0; empty from the others), or why this
    /// rank cannot load NCCL.
    nccl: std::result::Result<Vec<u8>, String>,
}

/// What a rank says at the last meeting: it is linked to every peer.
const LINKED: &[u8] = b"linked";

/// A rank joined to a job across hosts.
pub(crate) struct Joined<B: Engine> {
    /// This rank's node's communicator: it holds the rank's local index.
    pub intra: Comm<B>,
    /// The step between nodes among the ranks of this local index.
    pub across: Arc<dyn Across>,
    pub nodes: Nodes,
    /// The whole job's watch: a lost peer anywhere stops every rank.
    pub watch: Watch,
    /// What the watch heard first: the step between nodes, cut short by
    /// it, reports this rather than the link it was reading.
    pub cause: Arc<OnceLock<Error>>,
}

impl<B: Engine> Joined<B> {
    /// Rank `rank` of a job of `world` processes sharing `id`, whose
    /// ranks may span hosts (see `HierComm::init_rank`): hosts come from the rendezvous (each rank's
    /// host name, or `RINGREDUCE_HOST_NAME`), every host must hold as many
    /// ranks ([`Error::UnevenNodes`]), and every rank fails with the same
    /// typed error as [`Comm::init_rank`] does.
    ///
    /// The step between nodes is NCCL's or the test stand-in's, as
    /// [`uses_nccl`] says.
    pub fn init_rank(
        id: &UniqueId,
        rank: usize,
        world: usize,
        device: usize,
        config: CommConfig,
    ) -> Result<Joined<B>> {
        let timeout = config.effective_timeout();
        let mut met = meet(id, rank, world, &config)?;
        let hosts: Vec<&str> = met.ranks.iter().map(|i| i.host.as_str()).collect();
        let nodes = Nodes::group(&hosts)?;
        let (node, local) = (nodes.node_of(rank), nodes.local_of(rank));
        // Each node's ranks form a job of their own, named apart.
        let job = id.job() ^ ((node as u64 + 1) << 40);
        let (joining, offer, device) = B::prepare(local, device, &config, job)?;
        let (listener, across_at) = TcpAcross::listen()?;
        let by_nccl = uses_nccl::<B>(&nodes);
        let nccl = match (by_nccl, node) {
            (false, _) => Ok(Vec::new()),
            (true, 0) => new_nccl_id(),
            (true, _) => nccl_loads().map(|_| Vec::new()),
        }
        .map_err(|e| e.to_string());
        let card = Card {
            offer: offer.to_bytes()?,
            device,
            across: across_at,
            nccl,
        };
        let card = postcard::to_stdvec(&card)
            .map_err(|e| Error::Bootstrap(format!("encoding a card: {e}")))?;
        let cards = met
            .exchange(&card, timeout)?
            .iter()
            .map(|c| postcard::from_bytes::<Card>(c))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| Error::Rendezvous(format!("a rank's card is unreadable: {e}")))?;
        let ids = nodes
            .members(node)
            .iter()
            .enumerate()
            .map(|(l, &r)| Identity {
                rank: l as u32,
                host: met.ranks[r].host.clone(),
                pid: met.ranks[r].pid,
                device: cards[r].device,
                exports: cards[r].offer.clone(),
            })
            .collect();
        // Every rank fails alike where any rank cannot load NCCL.
        if let Some((r, e)) = cards
            .iter()
            .enumerate()
            .find_map(|(r, c)| c.nccl.as_ref().err().map(|e| (r, e)))
        {
            return Err(Error::NcclUnavailable(format!("on rank {r}: {e}")));
        }
        let joined = Table::check(local, ids).and_then(|t| B::join(joining, &t, config.clone()));
        let group = nodes.across(local);
        let addrs: Vec<SocketAddr> = group.iter().map(|&r| cards[r].across).collect();
        let linked = joined.and_then(|b| {
            let across: Arc<dyn Across> = if by_nccl {
                let id = cards[group[0]].nccl.as_deref().unwrap_or_default();
                link_by_nccl(&b, id, node, &group, timeout)?
            } else {
                let tcp = TcpAcross::connect(node, group.clone(), &addrs, listener, timeout)?;
                match b.device_context() {
                    Some(ctx) => Arc::new(ThroughHost { tcp, ctx }),
                    None => Arc::new(tcp),
                }
            };
            Ok((b, across))
        });
        let said: &[u8] = if linked.is_ok() { LINKED } else { b"failed" };
        let parts = met.exchange(said, timeout);
        let (mut b, across) = linked?;
        if let Some(r) = parts?.iter().position(|p| p != LINKED) {
            return Err(Error::Rendezvous(format!(
                "rank {r} could not join its node or link to the other nodes (its own error says why)"
            )));
        }
        b.mapped();
        let (alarm, cut) = (b.alarm(), across.clone());
        let cause = Arc::new(OnceLock::new());
        let heard = cause.clone();
        let watch = Watch::start(met, move |e| {
            let e = peer_error(e);
            let _ = heard.set(e.clone());
            cut.abort();
            alarm(e)
        })?;
        Ok(Joined {
            intra: Comm { b, job: None },
            across,
            nodes,
            watch,
            cause,
        })
    }
}

/// Whether NCCL links this job's nodes: GPU ranks of a build with the
/// `nccl` feature, on more than one node (on one node, never NCCL). The
/// CPU execution, and a build without the feature, use the test
/// stand-in, which reaches simulated hosts on one machine only.
fn uses_nccl<B: Engine>(nodes: &Nodes) -> bool {
    cfg!(feature = "nccl") && B::ON_DEVICE && !nodes.is_one_node()
}

#[cfg(feature = "nccl")]
fn new_nccl_id() -> Result<Vec<u8>> {
    crate::nccl::link::new_id()
}

#[cfg(feature = "nccl")]
fn nccl_loads() -> Result<()> {
    crate::nccl::library::nccl().map(|_| ())
}

/// The NCCL step between nodes of `b`'s rank: member `me` of `members`.
#[cfg(feature = "nccl")]
fn link_by_nccl<B: Engine>(
    b: &B,
    id: &[u8],
    me: usize,
    group: &[usize],
    timeout: std::time::Duration,
) -> Result<Arc<dyn Across>> {
    let none = || Error::NcclUnavailable("this backend has no device for NCCL".into());
    let ctx = b.device_context().ok_or_else(none)?;
    let rank_stream = b.device_stream().ok_or_else(none)?;
    let a = crate::nccl::across::NcclAcross::init(ctx, rank_stream, id, me, group, timeout)?;
    Ok(Arc::new(a))
}

#[cfg(not(feature = "nccl"))]
fn new_nccl_id() -> Result<Vec<u8>> {
    Err(no_nccl())
}

#[cfg(not(feature = "nccl"))]
fn nccl_loads() -> Result<()> {
    Err(no_nccl())
}

#[cfg(not(feature = "nccl"))]
fn link_by_nccl<B: Engine>(
    _b: &B,
    _id: &[u8],
    _me: usize,
    _group: &[usize],
    _timeout: std::time::Duration,
) -> Result<Arc<dyn Across>> {
    Err(no_nccl())
}

/// A build without the `nccl` feature has no NCCL ([`uses_nccl`] never
/// asks it for one).
#[cfg(not(feature = "nccl"))]
fn no_nccl() -> Error {
    Error::NcclUnavailable("this build has no `nccl` feature".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::CpuBackend;
    use crate::gpu::GpuBackend;

    #[test]
    fn nccl_links_gpu_nodes_only_across_hosts() {
        let one = Nodes::group(&["a", "a"]).expect("one host");
        let two = Nodes::group(&["a", "b"]).expect("two hosts");
        // On one node, never NCCL; the CPU execution never.
        assert!(!uses_nccl::<GpuBackend>(&one));
        assert!(!uses_nccl::<CpuBackend>(&one));
        assert!(!uses_nccl::<CpuBackend>(&two));
        assert_eq!(uses_nccl::<GpuBackend>(&two), cfg!(feature = "nccl"));
    }
}
