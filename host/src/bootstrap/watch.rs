//! After the rendezvous its links stay open, and one thread per process
//! watches them: a link that closes without a goodbye is a dead peer
//! (`kill -9`, a crash), and an abort on any rank travels over them to
//! every rank. Rank 0 is the hub: it tells every member about a death or
//! an abort it learns of, so every rank hears of it within a poll.

use super::rendezvous::Rendezvous;
use super::wire::{recv, send};
use crate::error::Result;
use serde::{Deserialize, Serialize};
use std::io::ErrorKind;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often the watch looks at its links: a peer's death is known within
/// about this long.
pub const POLL: Duration = Duration::from_millis(20);

/// What the links carry after the rendezvous.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
enum Control {
    /// Rank `rank` leaves cleanly: its link closing is no death.
    Bye { rank: u32 },
    /// Rank `rank` called `abort()`.
    Abort { rank: u32 },
    /// Rank `rank` is dead (as rank 0 saw).
    Lost { rank: u32 },
    /// Rank 0 to every member as it leaves: every rank has left (or died),
    /// so none maps another's memory any more.
    Released,
}

/// What the watch reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A peer died: its link closed without a goodbye.
    Lost(usize),
    /// A peer called `abort()`.
    Aborted(usize),
}

/// The thread that watches a rank's links; stopped (with a goodbye to the
/// peers) when dropped.
pub struct Watch {
    rank: usize,
    links: Arc<Mutex<Vec<Option<TcpStream>>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// How a rank's leaving ended (see [`Watch::leave`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leave {
    /// Every peer had left or died: no process maps this rank's memory.
    Released,
    /// The wait ran out first: some peer may still map it.
    TimedOut,
}

impl Watch {
    /// Watches `r`'s links, calling `on` for each event (from the watch's
    /// thread; it must not block).
    pub fn start(r: Rendezvous, on: impl Fn(Event) + Send + 'static) -> Result<Watch> {
        // One pass over the links takes about a poll.
        let links_open = r.links.iter().flatten().count().max(1) as u32;
        let peek = (POLL / links_open).max(Duration::from_millis(1));
        for s in r.links.iter().flatten() {
            s.set_read_timeout(Some(peek))
                .map_err(|e| crate::error::Error::Bootstrap(format!("a peer link: {e}")))?;
        }
        let links = Arc::new(Mutex::new(r.links));
        let stop = Arc::new(AtomicBool::new(false));
        let (l, st, rank) = (links.clone(), stop.clone(), r.rank);
        let thread = std::thread::Builder::new()
            .name(format!("ringreduce-watch-rank{rank}"))
            .spawn(move || watch(rank, &l, &st, &on))
            .map_err(|e| crate::error::Error::Bootstrap(format!("the watch thread: {e}")))?;
        Ok(Watch {
            rank,
            links,
            stop,
            thread: Some(thread),
        })
    }

    /// Tells every rank that this one aborts (through rank 0).
    pub fn abort(&self) {
        let msg = Control::Abort {
            rank: self.rank as u32,
        };
        for s in lock(&self.links).iter_mut().flatten() {
            let _ = send(s, &msg);
        }
    }
}

impl Watch {
    fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    /// Leaves the job once this rank no longer touches its peers' memory,
    /// and returns when no peer touches its own: every peer has left or
    /// died, or `wait` ran out. A member says goodbye to rank 0 and waits
    /// for its word that all have left; rank 0 waits for every member's
    /// goodbye (or death), then gives that word. Memory a peer may still
    /// map must not be freed (CUDA IPC's rule), and this is how a rank
    /// knows.
    pub fn leave(mut self, wait: Duration) -> Leave {
        self.stop();
        let deadline = std::time::Instant::now() + wait;
        let bye = Control::Bye {
            rank: self.rank as u32,
        };
        let mut links = std::mem::take(&mut *lock(&self.links));
        let left = |s: &mut TcpStream, until: &dyn Fn(Control) -> bool| loop {
            let now = std::time::Instant::now();
            if now >= deadline {
                return false;
            }
            let _ = s.set_read_timeout(Some((deadline - now).max(Duration::from_millis(1))));
            match recv::<Control>(s) {
                Ok(c) if until(c) => return true,
                Ok(_) => continue,
                // Before the deadline, a closed link (or garbage): the
                // peer is gone, and its mappings with it.
                Err(_) => return std::time::Instant::now() < deadline,
            }
        };
        let mut released = true;
        if self.rank == 0 {
            for s in links.iter_mut().flatten() {
                released &= left(s, &|c| matches!(c, Control::Bye { .. }));
            }
            for s in links.iter_mut().flatten() {
                let _ = send(s, &Control::Released);
            }
        } else if let Some(s) = links.get_mut(0).and_then(Option::as_mut) {
            let _ = send(s, &bye);
            released = left(s, &|c| matches!(c, Control::Released));
        }
        if released {
            Leave::Released
        } else {
            Leave::TimedOut
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.stop();
        let bye = Control::Bye {
            rank: self.rank as u32,
        };
        for s in lock(&self.links).iter_mut().flatten() {
            let _ = send(s, &bye);
        }
    }
}

/// The watch's loop: every link in turn, a short read each.
fn watch(
    rank: usize,
    links: &Mutex<Vec<Option<TcpStream>>>,
    stop: &AtomicBool,
    on: &dyn Fn(Event),
) {
    while !stop.load(Ordering::SeqCst) {
        let count = lock(links).len();
        // Each peek waits a share of a poll; with no link left, wait one.
        if lock(links).iter().all(Option::is_none) {
            std::thread::sleep(POLL);
            continue;
        }
        for peer in 0..count {
            // Read a clone, so that senders are not held while it waits.
            let Some(mut s) = lock(links)[peer].as_ref().and_then(|s| s.try_clone().ok()) else {
                continue;
            };
            if !readable(&s) {
                continue;
            }
            // A message's few bytes come in one piece; wait for them
            // longer than a peek all the same.
            let peek = s.read_timeout().ok().flatten();
            let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
            let heard = recv::<Control>(&mut s);
            let _ = s.set_read_timeout(peek);
            let heard = match heard {
                Ok(c) => c,
                // Closed, or garbage: either way the peer is gone.
                Err(_) => Control::Lost { rank: peer as u32 },
            };
            let (event, forward) = match heard {
                Control::Bye { .. } => {
                    lock(links)[peer] = None;
                    continue;
                }
                Control::Lost { rank: r } => {
                    if r as usize == peer {
                        lock(links)[peer] = None;
                    }
                    (Event::Lost(r as usize), Control::Lost { rank: r })
                }
                Control::Abort { rank: r } => (Event::Aborted(r as usize), heard),
                // Only `leave` waits for it; rank 0 sends it as it goes.
                Control::Released => continue,
            };
            on(event);
            // Rank 0 passes it on to every other member.
            if rank == 0 {
                for (q, s) in lock(links).iter_mut().enumerate() {
                    if q != peer {
                        if let Some(s) = s {
                            let _ = send(s, &forward);
                        }
                    }
                }
            }
        }
    }
}

/// Whether `s` has a message or has closed, within a poll.
fn readable(s: &TcpStream) -> bool {
    let mut b = [0u8; 1];
    match s.peek(&mut b) {
        Ok(_) => true, // data, or 0 bytes: closed
        Err(e) => !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
