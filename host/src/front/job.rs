//! A communicator as one rank of a job of processes, as `torchrun`,
//! `mpirun` and `srun` start them: the steps of joining (prepare the
//! rank's memory, meet at the rendezvous, check the table, map the peers,
//! meet once more, watch the peers), for every backend.

use super::engine::{Comm, Engine};
use crate::bootstrap::{
    host_name, rendezvous, Event, Identity, Launch, Leave, Rendezvous, UniqueId, Watch,
};
use crate::config::CommConfig;
use crate::error::{Error, Result};
use crate::job::Table;

/// What a rank says at the second meeting: it mapped every peer.
const MAPPED: &[u8] = b"mapped";

impl<B: Engine> Comm<B> {
    /// Rank `rank` of a job of `world` processes that share `id` (made by
    /// [`UniqueId::new`] on rank 0 and passed to the others out of band),
    /// driving `device` (the CPU execution ignores it): NCCL's
    /// `ncclCommInitRank`. It returns once every rank has joined, or fails
    /// on every rank with the same typed error: a rank missing after the
    /// timeout ([`Error::RanksMissing`]), a mismatch of world size, rank,
    /// host or settings, or a rank that could not map its peers.
    ///
    /// The communicator holds one rank ([`local_ranks`](Self::local_ranks)):
    /// its calls take that rank's buffers only. A peer that dies or aborts
    /// ends every pending and later call with [`Error::PeerLost`] or
    /// [`Error::PeerAborted`] naming it.
    pub fn init_rank(
        id: &UniqueId,
        rank: usize,
        world: usize,
        device: usize,
        config: CommConfig,
    ) -> Result<Self> {
        check_join(rank, world, &config)?;
        let timeout = config.effective_timeout();
        let (joining, offer, uuid) = B::prepare(rank, device, &config, id.job())?;
        let me = Identity {
            rank: rank as u32,
            host: host_name(),
            pid: std::process::id(),
            device: uuid,
            exports: offer.to_bytes()?,
        };
        let mut met = rendezvous(id, me, world, timeout)?;
        let table = Table::check(rank, met.ranks.clone())?;
        let joined = B::join(joining, &table, config);
        // Every rank meets once more, so that no name goes before every
        // peer has mapped it, and a rank that could not join fails all.
        let said: &[u8] = if joined.is_ok() { MAPPED } else { b"failed" };
        let parts = met.exchange(said, timeout);
        let mut b = joined?;
        if let Some(r) = parts?.iter().position(|p| p != MAPPED) {
            return Err(Error::Rendezvous(format!(
                "rank {r} could not map its peers' memory (its own error says why)"
            )));
        }
        b.mapped();
        let alarm = b.alarm();
        let watch = Watch::start(met, move |e| alarm(peer_error(e)))?;
        Ok(Comm {
            b,
            job: Some(watch),
        })
    }

    /// [`init_rank`](Self::init_rank) from the launcher's variables
    /// ([`Launch::from_env`]: torchrun's, then Open MPI's, then Slurm's).
    /// The device is the first of [`CommConfig::devices`] if it names one,
    /// else the process's local rank modulo the GPUs it sees (so that
    /// processes share GPUs where there are fewer GPUs than processes).
    pub fn from_env(config: CommConfig) -> Result<Self> {
        let (launch, id, device) = launched::<B>(&config)?;
        Self::init_rank(&id, launch.rank, launch.world, device, config)
    }
}

/// What a process a launcher started joins with: its launch (the
/// launcher's variables), the job's id, and its device: the first of
/// [`CommConfig::devices`] if it names one, else its local rank's.
pub(crate) fn launched<B: Engine>(config: &CommConfig) -> Result<(Launch, UniqueId, usize)> {
    let launch = Launch::from_env()?;
    let id = launch.unique_id()?;
    let device = config
        .devices
        .as_ref()
        .and_then(|d| d.first().copied())
        .unwrap_or_else(|| B::device_of_local_rank(launch.local_rank));
    Ok((launch, id, device))
}

/// A join's arguments, checked before anything is set up: a world of
/// ranks, a rank inside it, and the watchdog that stops a kernel waiting
/// for a dead peer.
fn check_join(rank: usize, world: usize, config: &CommConfig) -> Result<()> {
    if world == 0 {
        return Err(Error::ZeroRanks);
    }
    if rank >= world {
        return Err(Error::RankOutOfRange { rank, world });
    }
    if !config.watchdog {
        return Err(Error::NeedsWatchdog);
    }
    Ok(())
}

/// A join's arguments checked (`check_join`), then the rendezvous of
/// `world` ranks sharing `id`, this rank saying only who it is: for
/// joins whose offers travel in a later exchange.
pub(crate) fn meet(
    id: &UniqueId,
    rank: usize,
    world: usize,
    config: &CommConfig,
) -> Result<Rendezvous> {
    check_join(rank, world, config)?;
    let me = Identity {
        rank: rank as u32,
        host: host_name(),
        pid: std::process::id(),
        device: [0; 16],
        exports: Vec::new(),
    };
    rendezvous(id, me, world, config.effective_timeout())
}

/// What the watch heard, as every pending and later call reports it.
pub(crate) fn peer_error(e: Event) -> Error {
    match e {
        Event::Lost(rank) => Error::PeerLost { rank },
        Event::Aborted(rank) => Error::PeerAborted { rank },
    }
}

impl<B: Engine> Comm<B> {
    /// Leaves the job `watch` watches in order: this rank's work ends and
    /// it lets go of its peers' memory, then it waits until they let go of
    /// its own (bounded by the timeout) before the backend frees it, since
    /// a GPU's IPC memory must not be freed while another process maps it.
    pub(crate) fn leave(&mut self, watch: Watch) {
        self.b.release_peers();
        let wait = self.b.state().config.effective_timeout();
        if watch.leave(wait) == Leave::TimedOut {
            self.b.abandon();
        }
    }
}

/// A rank of a job leaves in order (`Comm::leave`). Dropping the ranks
/// in any order, or some never (a dead process), is safe.
impl<B: Engine> Drop for Comm<B> {
    fn drop(&mut self) {
        if let Some(watch) = self.job.take() {
            self.leave(watch);
        }
    }
}
