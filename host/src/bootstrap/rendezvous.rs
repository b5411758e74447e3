//! The rendezvous over TCP: rank 0 listens, every other rank connects and
//! says who it is, and rank 0 answers each with every rank's identity, or
//! with why the job cannot start. Every check is rank 0's, so every rank
//! of a job returns the same error.

use super::id::UniqueId;
use super::identity::Identity;
use super::wire::{recv, send, Gather, Hello, Refusal, Reply, MAGIC, VERSION};
use crate::error::{Error, Result};
use std::io::ErrorKind;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// How long a member waits for rank 0's answer beyond its own timeout:
/// rank 0 reports missing ranks at its own deadline, which may come later.
const ANSWER_GRACE: Duration = Duration::from_secs(1);

/// How long rank 0 waits for a connection's first message: a stranger
/// that says nothing must not hold the rendezvous up.
const HELLO_WAIT: Duration = Duration::from_secs(2);

/// A finished rendezvous: every rank's identity, and this rank's links
/// (rank 0: one to every member, by rank; a member: one to rank 0, at 0).
/// The links stay open: a closed one is how a dead peer shows.
#[derive(Debug)]
pub struct Rendezvous {
    /// This rank.
    pub rank: usize,
    /// Every rank's identity, by rank.
    pub ranks: Vec<Identity>,
    /// This rank's open links, by the peer's rank.
    pub links: Vec<Option<TcpStream>>,
}

impl Rendezvous {
    /// Every rank's `mine`, by rank, once every rank has given its own:
    /// an all-gather through rank 0 over the open links, and so a barrier
    /// (the processes of a job meet once more after mapping each other's
    /// memory). A rank whose link closes first, or that sends nothing
    /// within `timeout`, fails it on every rank with
    /// [`Error::PeerLost`] naming it.
    pub fn exchange(&mut self, mine: &[u8], timeout: Duration) -> Result<Vec<Vec<u8>>> {
        let world = self.ranks.len();
        let wait = timeout + ANSWER_GRACE;
        if self.rank == 0 {
            let mut parts = vec![Vec::new(); world];
            parts[0] = mine.to_vec();
            let mut lost = None;
            for (r, part) in parts.iter_mut().enumerate().skip(1) {
                let heard = self.links[r].as_mut().map(|s| {
                    s.set_read_timeout(Some(wait))
                        .map_err(|e| Error::Bootstrap(e.to_string()))
                        .and_then(|()| recv::<Gather>(s))
                });
                match heard {
                    Some(Ok(Gather::Part { magic, bytes })) if magic == MAGIC => *part = bytes,
                    _ => {
                        lost = Some(r);
                        break;
                    }
                }
            }
            let answer = match lost {
                Some(r) => Gather::Lost {
                    magic: MAGIC,
                    rank: r as u32,
                },
                None => Gather::All {
                    magic: MAGIC,
                    parts: parts.clone(),
                },
            };
            for s in self.links.iter_mut().flatten() {
                let _ = send(s, &answer);
            }
            match lost {
                Some(rank) => Err(Error::PeerLost { rank }),
                None => Ok(parts),
            }
        } else {
            let lost0 = Error::PeerLost { rank: 0 };
            let s = self.links[0].as_mut().ok_or(lost0.clone())?;
            let part = Gather::Part {
                magic: MAGIC,
                bytes: mine.to_vec(),
            };
            send(s, &part).map_err(|_| lost0.clone())?;
            // Rank 0 waits up to `wait` for each member in turn.
            s.set_read_timeout(Some(wait * world as u32))
                .map_err(|e| Error::Bootstrap(e.to_string()))?;
            match recv::<Gather>(s) {
                Ok(Gather::All { magic, parts }) if magic == MAGIC && parts.len() == world => {
                    Ok(parts)
                }
                Ok(Gather::Lost { magic, rank }) if magic == MAGIC => Err(Error::PeerLost {
                    rank: rank as usize,
                }),
                _ => Err(lost0),
            }
        }
    }
}

/// Meets the other `world - 1` ranks of job `id` as `me`, within
/// `timeout`.
pub fn rendezvous(
    id: &UniqueId,
    me: Identity,
    world: usize,
    timeout: Duration,
) -> Result<Rendezvous> {
    let rank = me.rank as usize;
    if world == 0 {
        return Err(Error::ZeroRanks);
    }
    if rank >= world || world > u32::MAX as usize {
        return Err(Error::RankOutOfRange { rank, world });
    }
    let deadline = Instant::now() + timeout;
    if rank == 0 {
        root(id, me, world, deadline, timeout)
    } else {
        member(id, me, world, deadline)
    }
}

/// Rank 0: takes every member's hello until all have come, refusing
/// strangers and other jobs, and gives up at `deadline` naming who is
/// missing.
fn root(
    id: &UniqueId,
    me: Identity,
    world: usize,
    deadline: Instant,
    timeout: Duration,
) -> Result<Rendezvous> {
    let listener = match id.take_listener() {
        Some(l) => l,
        None => {
            let any = SocketAddr::from((Ipv4Addr::UNSPECIFIED, id.root().port()));
            TcpListener::bind(any)
                .map_err(|e| Error::Bootstrap(format!("rank 0 cannot listen on {any}: {e}")))?
        }
    };
    listener
        .set_nonblocking(true)
        .map_err(|e| Error::Bootstrap(format!("the listener: {e}")))?;
    let mut members: Vec<Option<(TcpStream, Identity)>> = (0..world).map(|_| None).collect();
    let mut arrived = 1;
    while arrived < world {
        let (mut s, _) = match listener.accept() {
            Ok(c) => c,
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => {
                if Instant::now() >= deadline {
                    let ranks = (1..world)
                        .filter(|&r| members[r].is_none())
                        .map(|r| r as u32)
                        .collect();
                    let why = Refusal::Missing {
                        ranks,
                        waited_ms: timeout.as_millis() as u64,
                    };
                    return Err(fail_all(&mut members, None, why));
                }
                std::thread::sleep(Duration::from_millis(2));
                continue;
            }
            Err(e) => return Err(Error::Bootstrap(format!("accepting a rank: {e}"))),
        };
        let wait = deadline
            .saturating_duration_since(Instant::now())
            .clamp(Duration::from_millis(100), HELLO_WAIT);
        let ready = s
            .set_nonblocking(false)
            .and_then(|()| s.set_read_timeout(Some(wait)));
        if ready.is_err() {
            continue;
        }
        let _ = s.set_nodelay(true);
        // A connection that says nothing readable is not one of ours.
        let Ok(h) = recv::<Hello>(&mut s) else {
            continue;
        };
        if h.magic != MAGIC {
            continue;
        }
        let refuse = |s: &mut TcpStream, why: Refusal| {
            let _ = send(s, &Reply::Refused { magic: MAGIC, why });
        };
        if h.version != VERSION {
            refuse(
                &mut s,
                Refusal::Version {
                    theirs: h.version,
                    ours: VERSION,
                },
            );
            continue;
        }
        if h.job != id.job() {
            refuse(&mut s, Refusal::ForeignJob);
            continue;
        }
        // One of this job's ranks: from here a disagreement ends the job.
        let r = h.me.rank;
        let why = if h.world as usize != world {
            Some(Refusal::World {
                rank: r,
                theirs: h.world,
                ours: world as u32,
            })
        } else if r as usize >= world {
            Some(Refusal::RankOutOfRange {
                rank: r,
                world: world as u32,
            })
        } else if r == 0 || members[r as usize].is_some() {
            Some(Refusal::DuplicateRank { rank: r })
        } else {
            None
        };
        if let Some(why) = why {
            let told = arrived; // the members so far and this one
            fail_all(&mut members, Some(s), why.clone());
            tell_late(&listener, id, why.clone(), world - 1 - told, deadline);
            return Err(why.to_error());
        }
        members[r as usize] = Some((s, h.me));
        arrived += 1;
    }
    let mut ranks = vec![me];
    let mut links = vec![None];
    for m in members.into_iter().skip(1) {
        let (s, who) = m.expect("every member arrived");
        ranks.push(who);
        links.push(Some(s));
    }
    for s in links.iter_mut().flatten() {
        send(
            s,
            &Reply::Table {
                magic: MAGIC,
                ranks: ranks.clone(),
            },
        )?;
    }
    Ok(Rendezvous {
        rank: 0,
        ranks,
        links,
    })
}

/// Tells every member that arrived (and `also`) why the job ends, and
/// returns that as the error.
fn fail_all(
    members: &mut [Option<(TcpStream, Identity)>],
    also: Option<TcpStream>,
    why: Refusal,
) -> Error {
    let reply = Reply::Refused {
        magic: MAGIC,
        why: why.clone(),
    };
    for (s, _) in members.iter_mut().flatten() {
        let _ = send(s, &reply);
    }
    if let Some(mut s) = also {
        let _ = send(&mut s, &reply);
    }
    why.to_error()
}

/// After a refusal, tells the `left` members still to come the same, as
/// they arrive until `deadline`, so that every rank of the job returns one
/// error rather than the late ones timing out.
fn tell_late(listener: &TcpListener, id: &UniqueId, why: Refusal, left: usize, deadline: Instant) {
    let reply = Reply::Refused { magic: MAGIC, why };
    let mut left = left;
    while left > 0 && Instant::now() < deadline {
        let Ok((mut s, _)) = listener.accept() else {
            std::thread::sleep(Duration::from_millis(2));
            continue;
        };
        let wait = deadline
            .saturating_duration_since(Instant::now())
            .clamp(Duration::from_millis(100), HELLO_WAIT);
        if s.set_nonblocking(false).is_err() || s.set_read_timeout(Some(wait)).is_err() {
            continue;
        }
        if let Ok(h) = recv::<Hello>(&mut s) {
            if h.magic == MAGIC && h.job == id.job() {
                let _ = send(&mut s, &reply);
                left -= 1;
            }
        }
    }
}

/// A member: connects to rank 0 (again and again until `deadline`, since
/// it may not listen yet), says hello, and waits for the answer.
fn member(id: &UniqueId, me: Identity, world: usize, deadline: Instant) -> Result<Rendezvous> {
    let rank = me.rank as usize;
    let root = id.root();
    let mut s = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match TcpStream::connect_timeout(
            &root,
            left.clamp(Duration::from_millis(10), Duration::from_secs(1)),
        ) {
            Ok(s) => break s,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Err(_) => {
                return Err(Error::RanksMissing {
                    ranks: vec![0],
                    waited: deadline.elapsed() + left,
                })
            }
        }
    };
    let _ = s.set_nodelay(true);
    let hello = Hello {
        magic: MAGIC,
        version: VERSION,
        job: id.job(),
        world: world as u32,
        me: me.clone(),
    };
    send(&mut s, &hello)?;
    let wait = deadline.saturating_duration_since(Instant::now()) + ANSWER_GRACE;
    s.set_read_timeout(Some(wait))
        .map_err(|e| Error::Bootstrap(format!("the link to rank 0: {e}")))?;
    match recv::<Reply>(&mut s)? {
        Reply::Table { magic, ranks } if magic == MAGIC => {
            let sane = ranks.len() == world
                && ranks.iter().enumerate().all(|(r, i)| i.rank as usize == r)
                && ranks[rank] == me;
            if !sane {
                return Err(Error::Rendezvous(
                    "rank 0's table does not match this rank".into(),
                ));
            }
            let mut links: Vec<Option<TcpStream>> = (0..world).map(|_| None).collect();
            links[0] = Some(s);
            Ok(Rendezvous { rank, ranks, links })
        }
        Reply::Refused { magic, why } if magic == MAGIC => Err(why.to_error()),
        _ => Err(Error::Rendezvous(format!(
            "{root} is not a ringreduce rank 0"
        ))),
    }
}
