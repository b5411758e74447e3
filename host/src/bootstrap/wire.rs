//! The rendezvous protocol's messages and their framing: a 4-byte length,
//! then the message as postcard bytes. Small and ours; every message
//! starts with the magic and the version, so a stranger on the port is
//! told apart from a rank of another build or another job.

use super::identity::Identity;
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::net::TcpStream;

/// The first field of every message.
pub const MAGIC: u64 = u64::from_le_bytes(*b"ringrdc\0");

/// The protocol's version: ranks of different versions refuse each other.
pub const VERSION: u32 = 1;

/// The largest message accepted: a rank's exports are a few handles.
pub const MAX_MESSAGE: u32 = 1 << 20;

/// A member's first message to rank 0.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    pub magic: u64,
    pub version: u32,
    pub job: u64,
    pub world: u32,
    pub me: Identity,
}

/// Why rank 0 refused a member, or gave the rendezvous up: sent to the
/// members so that every rank returns the same error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Refusal {
    /// Another protocol version or build.
    Version { theirs: u32, ours: u32 },
    /// A rank of another job on this port.
    ForeignJob,
    /// A member's world size differs from rank 0's.
    World { rank: u32, theirs: u32, ours: u32 },
    /// Two members claim one rank.
    DuplicateRank { rank: u32 },
    /// A rank outside `0..world`.
    RankOutOfRange { rank: u32, world: u32 },
    /// These ranks never arrived within the timeout.
    Missing { ranks: Vec<u32>, waited_ms: u64 },
}

/// Rank 0's answer to every member.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reply {
    /// Every rank's identity, by rank.
    Table { magic: u64, ranks: Vec<Identity> },
    /// The rendezvous failed.
    Refused { magic: u64, why: Refusal },
}

/// An all-gather over the links after the rendezvous
/// ([`Rendezvous::exchange`](super::Rendezvous::exchange)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Gather {
    /// A member's part, to rank 0.
    Part { magic: u64, bytes: Vec<u8> },
    /// Every rank's part, by rank, from rank 0.
    All { magic: u64, parts: Vec<Vec<u8>> },
    /// Rank 0 lost rank `rank` before it gave its part.
    Lost { magic: u64, rank: u32 },
}

impl Refusal {
    /// The library's error for this refusal.
    pub fn to_error(&self) -> Error {
        match self {
            Refusal::Version { theirs, ours } => Error::Rendezvous(format!(
                "protocol version {theirs} met version {ours}: every rank must run the same ringreduce"
            )),
            Refusal::ForeignJob => Error::ForeignJob,
            Refusal::World { rank, theirs, ours } => Error::WorldMismatch {
                rank: *rank as usize,
                theirs: *theirs as usize,
                ours: *ours as usize,
            },
            Refusal::DuplicateRank { rank } => Error::DuplicateRank {
                rank: *rank as usize,
            },
            Refusal::RankOutOfRange { rank, world } => Error::RankOutOfRange {
                rank: *rank as usize,
                world: *world as usize,
            },
            Refusal::Missing { ranks, waited_ms } => Error::RanksMissing {
                ranks: ranks.iter().map(|&r| r as usize).collect(),
                waited: std::time::Duration::from_millis(*waited_ms),
            },
        }
    }
}

/// Writes one message.
pub fn send<M: Serialize>(s: &mut TcpStream, m: &M) -> Result<()> {
    let body =
        postcard::to_stdvec(m).map_err(|e| Error::Bootstrap(format!("encoding a message: {e}")))?;
    let mut frame = (body.len() as u32).to_le_bytes().to_vec();
    frame.extend_from_slice(&body);
    s.write_all(&frame)
        .map_err(|e| Error::Bootstrap(format!("sending to {}: {e}", peer(s))))
}

/// Reads one message (the stream's read timeout bounds the wait).
pub fn recv<M: for<'de> Deserialize<'de>>(s: &mut TcpStream) -> Result<M> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).map_err(|e| read_error(s, e))?;
    let len = u32::from_le_bytes(len);
    if len > MAX_MESSAGE {
        return Err(Error::Rendezvous(format!(
            "a message of {len} bytes from {}: not a ringreduce rank",
            peer(s)
        )));
    }
    let mut body = vec![0u8; len as usize];
    s.read_exact(&mut body).map_err(|e| read_error(s, e))?;
    postcard::from_bytes(&body)
        .map_err(|e| Error::Rendezvous(format!("an unreadable message from {}: {e}", peer(s))))
}

fn read_error(s: &TcpStream, e: std::io::Error) -> Error {
    use std::io::ErrorKind::*;
    match e.kind() {
        UnexpectedEof | ConnectionReset | ConnectionAborted | BrokenPipe => {
            Error::Bootstrap(format!("{} closed the connection", peer(s)))
        }
        WouldBlock | TimedOut => Error::Bootstrap(format!("{} sent nothing in time", peer(s))),
        _ => Error::Bootstrap(format!("reading from {}: {e}", peer(s))),
    }
}

fn peer(s: &TcpStream) -> String {
    s.peer_addr()
        .map_or_else(|_| "a peer".into(), |a| a.to_string())
}
