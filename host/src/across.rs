//! The step between nodes of a hierarchical collective: the ranks of one
//! local index, one per node, in node order. On GPUs this is NCCL's job
//! (see `docs/beyond-one-node.md`); CI has neither a GPU nor NCCL, so the
//! CPU execution's hierarchical jobs use [`TcpAcross`], a stand-in over
//! TCP for simulated nodes on one machine, behind the same trait. It is
//! for tests: it moves whole shards and is as slow as that sounds.

use crate::error::{Error, Result};
use cudarc::driver::{result, CudaContext, CudaEvent};
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The step between nodes, as the hierarchical schedule uses it.
pub(crate) trait Across: Send + Sync {
    /// Members, one per node.
    fn members(&self) -> usize;
    /// Every member's `mine` (as long on every member), member `m`'s at
    /// `all[m * mine.len()..]`: an all-gather, whose folding the caller
    /// does in node order, so the order is fixed whatever moves the bytes.
    fn all_gather(&self, mine: &[u8], all: &mut [u8]) -> Result<()>;
    /// [`all_gather`](Self::all_gather) between addresses of the ranks'
    /// memory (a GPU's, or the host's for the CPU execution): `bytes` at
    /// `mine`, every member's to `all + m * bytes`. The hierarchical
    /// schedule runs the step in the ranks' own buffers with it.
    ///
    /// # Safety
    /// Both ranges must be valid in that memory, must not overlap, and
    /// nothing else may use them until the call returns.
    unsafe fn all_gather_at(&self, mine: u64, bytes: usize, all: u64) -> Result<()>;
    /// [`all_gather_at`](Self::all_gather_at), queued to start once the
    /// rank's queue has run what it holds now, returning without waiting
    /// for it, so that the rank's queue goes on with other work (another
    /// bucket's steps inside the node) while the bytes move.
    /// [`join`](Self::join) orders the rank's later work after it and
    /// [`settle`](Self::settle) waits for every step queued. The default
    /// runs it at once, after `drain` has emptied the rank's queue: the
    /// stand-ins move bytes through the host, which cannot wait on a queue.
    ///
    /// # Safety
    /// As [`all_gather_at`](Self::all_gather_at)'s, until
    /// [`settle`](Self::settle) has returned.
    unsafe fn queue_all_gather_at(
        &self,
        mine: u64,
        bytes: usize,
        all: u64,
        drain: &dyn Fn() -> Result<()>,
    ) -> Result<Ticket> {
        drain()?;
        // SAFETY: the caller's promise, passed on.
        unsafe { self.all_gather_at(mine, bytes, all)? };
        Ok(Ticket::Done)
    }
    /// Makes the rank's queue wait, on the device, for a queued step.
    fn join(&self, ticket: &Ticket) -> Result<()> {
        let _ = ticket;
        Ok(())
    }
    /// Waits for every queued step, polling for errors, an abort and the
    /// timeout as [`all_gather_at`](Self::all_gather_at) does.
    fn settle(&self) -> Result<()> {
        Ok(())
    }
    /// Ends every call in flight on every member (a lost peer, an abort).
    fn abort(&self);
}

/// A step queued by [`Across::queue_all_gather_at`].
pub(crate) enum Ticket {
    /// It has run.
    Done,
    /// It ends where this event, on the step's own stream, completes.
    #[cfg_attr(not(feature = "nccl"), allow(dead_code))]
    Queued(CudaEvent),
}

/// One link to another member: a reading and a writing handle of one
/// stream, so both directions run at once.
struct Link {
    read: Mutex<TcpStream>,
    write: Mutex<TcpStream>,
}

/// The stand-in: a full mesh of loopback TCP links between the members.
pub(crate) struct TcpAcross {
    me: usize,
    /// Each member's rank in the job, for errors.
    ranks: Vec<usize>,
    /// One link per other member (`None` at `me`).
    links: Vec<Option<Link>>,
    /// How long a read waits.
    timeout: Duration,
}

impl TcpAcross {
    /// This member's listener and the address peers reach it at, made
    /// before the addresses are exchanged.
    pub fn listen() -> Result<(TcpListener, SocketAddr)> {
        let l = TcpListener::bind("127.0.0.1:0")
            .map_err(|e| Error::Bootstrap(format!("the step between nodes: listening: {e}")))?;
        let a = l
            .local_addr()
            .map_err(|e| Error::Bootstrap(format!("the step between nodes: {e}")))?;
        Ok((l, a))
    }

    /// Links member `me` to every other: it connects to the members after
    /// it (their listeners queue the connection, so no member waits on
    /// another's accept) and accepts the ones before it, each of which
    /// says who it is first.
    pub fn connect(
        me: usize,
        ranks: Vec<usize>,
        addrs: &[SocketAddr],
        listener: TcpListener,
        timeout: Duration,
    ) -> Result<TcpAcross> {
        let io = |e: std::io::Error| Error::Bootstrap(format!("the step between nodes: {e}"));
        let n = ranks.len();
        let mut streams: Vec<Option<TcpStream>> = (0..n).map(|_| None).collect();
        for (j, addr) in addrs.iter().enumerate().skip(me + 1) {
            let mut s = TcpStream::connect_timeout(addr, timeout).map_err(io)?;
            s.write_all(&(me as u32).to_le_bytes()).map_err(io)?;
            streams[j] = Some(s);
        }
        listener.set_nonblocking(false).map_err(io)?;
        for _ in 0..me {
            let (mut s, _) = listener.accept().map_err(io)?;
            s.set_read_timeout(Some(timeout)).map_err(io)?;
            let mut who = [0u8; 4];
            s.read_exact(&mut who).map_err(io)?;
            let j = u32::from_le_bytes(who) as usize;
            if j >= me || streams[j].is_some() {
                return Err(Error::Bootstrap(format!(
                    "the step between nodes: member {me} was reached by {j}, not one before it"
                )));
            }
            streams[j] = Some(s);
        }
        let links = streams
            .into_iter()
            .map(|s| {
                s.map(|s| -> Result<Link> {
                    s.set_read_timeout(Some(timeout)).map_err(io)?;
                    s.set_nodelay(true).map_err(io)?;
                    Ok(Link {
                        write: Mutex::new(s.try_clone().map_err(io)?),
                        read: Mutex::new(s),
                    })
                })
                .transpose()
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(TcpAcross {
            me,
            ranks,
            links,
            timeout,
        })
    }

    /// The error for member `j`'s link failing with `e`.
    fn lost(&self, j: usize, e: std::io::Error) -> Error {
        match e.kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => Error::NoProgress {
                what: format!("the step between nodes (waiting on rank {})", self.ranks[j]),
                waited: self.timeout,
            },
            _ => Error::PeerLost {
                rank: self.ranks[j],
            },
        }
    }
}

impl Across for TcpAcross {
    fn members(&self) -> usize {
        self.ranks.len()
    }

    fn all_gather(&self, mine: &[u8], all: &mut [u8]) -> Result<()> {
        let len = mine.len();
        assert_eq!(
            all.len(),
            len * self.members(),
            "all holds every member's part"
        );
        all[self.me * len..(self.me + 1) * len].copy_from_slice(mine);
        std::thread::scope(|s| {
            // Writers first, so that no two members block writing to each
            // other with full socket buffers.
            let writers: Vec<_> = self
                .links
                .iter()
                .enumerate()
                .filter_map(|(j, l)| l.as_ref().map(|l| (j, l)))
                .map(|(j, l)| {
                    s.spawn(move || {
                        let mut w = l.write.lock().unwrap_or_else(|e| e.into_inner());
                        w.write_all(mine).map_err(|e| self.lost(j, e))
                    })
                })
                .collect();
            let mut first = Ok(());
            for (j, part) in all.chunks_mut(len.max(1)).enumerate().take(self.members()) {
                let Some(l) = &self.links[j] else { continue };
                if len == 0 {
                    continue;
                }
                let mut r = l.read.lock().unwrap_or_else(|e| e.into_inner());
                if let Err(e) = r.read_exact(part) {
                    if first.is_ok() {
                        first = Err(self.lost(j, e));
                    }
                    break;
                }
            }
            for w in writers {
                let r = w
                    .join()
                    .unwrap_or_else(|_| Err(Error::Bootstrap("a writer panicked".into())));
                if first.is_ok() {
                    first = r;
                }
            }
            first
        })
    }

    /// Host addresses: the CPU execution's ranks ([`ThroughHost`] serves
    /// GPU ranks).
    unsafe fn all_gather_at(&self, mine: u64, bytes: usize, all: u64) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        // SAFETY: host ranges, valid and unshared as the caller promises.
        let (mine, all) = unsafe {
            (
                std::slice::from_raw_parts(mine as *const u8, bytes),
                std::slice::from_raw_parts_mut(all as *mut u8, bytes * self.members()),
            )
        };
        self.all_gather(mine, all)
    }

    fn abort(&self) {
        for l in self.links.iter().flatten() {
            if let Ok(s) = l.write.lock() {
                let _ = s.shutdown(Shutdown::Both);
            }
        }
    }
}

/// The stand-in between GPU ranks (a build without NCCL): device bytes
/// copied to the host, moved by [`TcpAcross`], and copied back.
pub(crate) struct ThroughHost {
    pub tcp: TcpAcross,
    pub ctx: Arc<CudaContext>,
}

impl Across for ThroughHost {
    fn members(&self) -> usize {
        self.tcp.members()
    }

    fn all_gather(&self, mine: &[u8], all: &mut [u8]) -> Result<()> {
        self.tcp.all_gather(mine, all)
    }

    /// Device addresses of the context's GPU.
    unsafe fn all_gather_at(&self, mine: u64, bytes: usize, all: u64) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        self.ctx.bind_to_thread()?;
        let mut here = vec![0u8; bytes];
        let mut there = vec![0u8; bytes * self.members()];
        // SAFETY: the caller's promise: `bytes` at `mine`, every member's
        // room at `all`, on this device.
        unsafe { result::memcpy_dtoh_sync(&mut here, mine)? };
        self.tcp.all_gather(&here, &mut there)?;
        // SAFETY: as above.
        unsafe { result::memcpy_htod_sync(all, &there)? };
        Ok(())
    }

    fn abort(&self) {
        self.tcp.abort()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` members on threads, linked.
    fn mesh(n: usize) -> Vec<TcpAcross> {
        let (ls, addrs): (Vec<_>, Vec<_>) = (0..n).map(|_| TcpAcross::listen().unwrap()).unzip();
        let addrs = Arc::new(addrs);
        let hs: Vec<_> = ls
            .into_iter()
            .enumerate()
            .map(|(me, l)| {
                let addrs = addrs.clone();
                std::thread::spawn(move || {
                    let ranks = (0..n).map(|m| 10 + m).collect();
                    TcpAcross::connect(me, ranks, &addrs, l, Duration::from_secs(10)).unwrap()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    }

    #[test]
    fn every_member_gets_every_part_in_node_order() {
        for n in [1, 2, 4] {
            // Large parts: each exceeds a socket buffer, so a member that
            // wrote before reading would block.
            let len = 3 << 20;
            let members = mesh(n);
            let outs: Vec<Vec<u8>> = std::thread::scope(|s| {
                let hs: Vec<_> = members
                    .iter()
                    .map(|m| {
                        s.spawn(move || {
                            let mine = vec![m.me as u8 + 1; len];
                            let mut all = vec![0u8; len * m.members()];
                            m.all_gather(&mine, &mut all).unwrap();
                            all
                        })
                    })
                    .collect();
                hs.into_iter().map(|h| h.join().unwrap()).collect()
            });
            for all in outs {
                for (j, part) in all.chunks(len).enumerate() {
                    assert!(part.iter().all(|&b| b == j as u8 + 1), "n {n}, part {j}");
                }
            }
        }
    }

    #[test]
    fn a_member_that_goes_is_named_by_the_others() {
        let mut members = mesh(3);
        drop(members.remove(2));
        let errs: Vec<Error> = std::thread::scope(|s| {
            let hs: Vec<_> = members
                .iter()
                .map(|m| s.spawn(move || m.all_gather(&[1, 2, 3], &mut [0; 9]).unwrap_err()))
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for e in errs {
            assert!(matches!(e, Error::PeerLost { rank: 12 }), "{e:?}");
        }
    }

    #[test]
    fn abort_ends_a_call_waiting_on_a_member() {
        let members = mesh(2);
        std::thread::scope(|s| {
            let waiting = s.spawn(|| members[0].all_gather(&[1], &mut [0; 2]));
            std::thread::sleep(Duration::from_millis(100));
            members[0].abort();
            assert!(waiting.join().unwrap().is_err());
        });
    }
}
