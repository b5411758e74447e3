//! Bootstrapping a job of one process per rank, as `torchrun`, `mpirun`
//! and `srun` start them: rank 0 makes a [`UniqueId`] (or every rank
//! derives it from its launcher's variables, [`Launch`]), and every rank
//! meets the others at rank 0 over TCP ([`rendezvous`]), saying who it is
//! and what it exports. The protocol is ours and small: a magic and a
//! version on every message, and every check made by rank 0, so that
//! every rank of a job returns the same typed error. The links stay open
//! afterwards: [`Watch`] reports a peer that dies and carries an abort to
//! every rank.

mod env;
mod id;
mod identity;
mod rendezvous;
mod watch;
mod wire;

pub use env::{Launch, Launcher, ROOT_ENV};
pub use id::{UniqueId, ADVERTISE_ENV, LISTEN_ENV, UNIQUE_ID_BYTES};
pub use identity::{host_name, Identity, HOST_ENV};
pub use rendezvous::{rendezvous, Rendezvous};
pub use watch::{Event, Leave, Watch, POLL};
pub use wire::VERSION;
