//! [`UniqueId`]: what rank 0 makes and every other rank receives out of
//! band, as NCCL's `ncclUniqueId`: where rank 0 listens, and a job number
//! that tells one job's ranks from another's on the same port.

use crate::error::{Error, Result};
use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, ToSocketAddrs};
use std::str::FromStr;
use std::sync::{Mutex, OnceLock};

/// Bytes of [`UniqueId::to_bytes`].
pub const UNIQUE_ID_BYTES: usize = 32;

/// The first byte of an id's bytes: the format's version.
const ID_FORMAT: u8 = 1;

/// The prefix of an id's text form.
const TEXT_PREFIX: &str = "ringreduce1-";

/// Where rank 0 listens when [`UniqueId::new`] makes an id: an address
/// (`host:port`, `ip:port` or `:port`); default every interface, a free
/// port.
pub const LISTEN_ENV: &str = "RINGREDUCE_BOOTSTRAP_LISTEN";

/// The address other ranks reach rank 0 at, when the one
/// [`UniqueId::new`] finds is not it (several interfaces, NAT): an IP.
pub const ADVERTISE_ENV: &str = "RINGREDUCE_BOOTSTRAP_ADVERTISE";

/// A job's rendezvous: rank 0's address and the job's number. Made once by
/// rank 0 ([`UniqueId::new`]), passed to every other rank out of band (a
/// file, MPI, the environment) as bytes or text, then given to every
/// rank's `init_rank`.
///
/// ```
/// use ringreduce::bootstrap::UniqueId;
/// let id = UniqueId::new()?;
/// let text = id.to_string(); // "ringreduce1-…", for a file or a variable
/// assert_eq!(text.parse::<UniqueId>()?, id);
/// assert_eq!(UniqueId::from_bytes(&id.to_bytes())?, id);
/// # Ok::<(), ringreduce::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UniqueId {
    root: SocketAddr,
    job: u64,
}

/// Listeners that [`UniqueId::new`] opened, by job, for rank 0's
/// rendezvous to take: binding at `new` means the port is ours before the
/// id leaves the process.
fn listeners() -> &'static Mutex<HashMap<u64, TcpListener>> {
    static L: OnceLock<Mutex<HashMap<u64, TcpListener>>> = OnceLock::new();
    L.get_or_init(Default::default)
}

impl UniqueId {
    /// A new job's id, on rank 0: binds a listener now (see
    /// [`LISTEN_ENV`]) and names the address other ranks reach it at (see
    /// [`ADVERTISE_ENV`]).
    pub fn new() -> Result<Self> {
        let listen = match std::env::var(LISTEN_ENV) {
            Ok(a) => parse_listen(&a)?,
            Err(_) => SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)),
        };
        let listener = TcpListener::bind(listen)
            .map_err(|e| Error::Bootstrap(format!("cannot listen on {listen}: {e}")))?;
        let bound = listener
            .local_addr()
            .map_err(|e| Error::Bootstrap(format!("the listener's address: {e}")))?;
        let ip = match std::env::var(ADVERTISE_ENV) {
            Ok(s) => s.trim().parse::<IpAddr>().map_err(|_| Error::Env {
                var: ADVERTISE_ENV,
                problem: format!("{s:?} is not an IP address"),
            })?,
            Err(_) if bound.ip().is_unspecified() => this_host_ip(),
            Err(_) => bound.ip(),
        };
        let id = UniqueId {
            root: SocketAddr::new(ip, bound.port()),
            job: fresh_job(),
        };
        lock(listeners()).insert(id.job, listener);
        Ok(id)
    }

    /// The id of a job whose rank 0 listens at `root`, numbered `job`:
    /// for launchers that give every rank the address (torchrun's
    /// `MASTER_ADDR` and `MASTER_PORT`), where every rank derives the same
    /// number from the job's own identity.
    pub fn at(root: SocketAddr, job: u64) -> Self {
        UniqueId { root, job }
    }

    /// Where rank 0 listens.
    pub fn root(&self) -> SocketAddr {
        self.root
    }

    /// The job's number.
    pub fn job(&self) -> u64 {
        self.job
    }

    /// The listener [`UniqueId::new`] opened for this id in this process,
    /// if any (rank 0's, taken once).
    pub(crate) fn take_listener(&self) -> Option<TcpListener> {
        lock(listeners()).remove(&self.job)
    }

    /// The id as [`UNIQUE_ID_BYTES`] bytes: format, job, address family,
    /// IP (16 bytes, IPv4 mapped), port.
    pub fn to_bytes(&self) -> [u8; UNIQUE_ID_BYTES] {
        let mut b = [0u8; UNIQUE_ID_BYTES];
        b[0] = ID_FORMAT;
        b[1..9].copy_from_slice(&self.job.to_le_bytes());
        let (family, ip) = match self.root.ip() {
            IpAddr::V4(v4) => (4u8, v4.to_ipv6_mapped().octets()),
            IpAddr::V6(v6) => (6u8, v6.octets()),
        };
        b[9] = family;
        b[10..26].copy_from_slice(&ip);
        b[26..28].copy_from_slice(&self.root.port().to_le_bytes());
        b
    }

    /// The id of [`to_bytes`](Self::to_bytes); [`Error::BadUniqueId`] for
    /// anything else.
    pub fn from_bytes(b: &[u8]) -> Result<Self> {
        let bad = |why: &str| Error::BadUniqueId(why.to_string());
        if b.len() != UNIQUE_ID_BYTES {
            return Err(bad(&format!("{} bytes, not {UNIQUE_ID_BYTES}", b.len())));
        }
        if b[0] != ID_FORMAT {
            return Err(bad(&format!("format {}, not {ID_FORMAT}", b[0])));
        }
        if b[28..].iter().any(|&x| x != 0) {
            return Err(bad("trailing bytes are not zero"));
        }
        let job = u64::from_le_bytes(b[1..9].try_into().expect("8 bytes"));
        let octets: [u8; 16] = b[10..26].try_into().expect("16 bytes");
        let v6 = Ipv6Addr::from(octets);
        let ip = match b[9] {
            4 => IpAddr::V4(
                v6.to_ipv4_mapped()
                    .ok_or_else(|| bad("an IPv4 id with no IPv4 address"))?,
            ),
            6 => IpAddr::V6(v6),
            f => return Err(bad(&format!("address family {f}"))),
        };
        let port = u16::from_le_bytes([b[26], b[27]]);
        if port == 0 {
            return Err(bad("port 0"));
        }
        Ok(UniqueId {
            root: SocketAddr::new(ip, port),
            job,
        })
    }
}

impl fmt::Display for UniqueId {
    /// `ringreduce1-` and the bytes in hex.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(TEXT_PREFIX)?;
        self.to_bytes()
            .iter()
            .try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl FromStr for UniqueId {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let hex = s
            .trim()
            .strip_prefix(TEXT_PREFIX)
            .ok_or_else(|| Error::BadUniqueId(format!("does not start with {TEXT_PREFIX}")))?;
        if hex.len() != 2 * UNIQUE_ID_BYTES || !hex.is_ascii() {
            return Err(Error::BadUniqueId(format!(
                "{} characters after the prefix, not {}",
                hex.len(),
                2 * UNIQUE_ID_BYTES
            )));
        }
        let bytes = (0..UNIQUE_ID_BYTES)
            .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16))
            .collect::<std::result::Result<Vec<u8>, _>>()
            .map_err(|_| Error::BadUniqueId("not hexadecimal".into()))?;
        UniqueId::from_bytes(&bytes)
    }
}

/// A listening address from [`LISTEN_ENV`]: `host:port`, `ip:port`, or
/// `:port` for every interface.
fn parse_listen(s: &str) -> Result<SocketAddr> {
    let bad = |problem: String| Error::Env {
        var: LISTEN_ENV,
        problem,
    };
    let s = s.trim();
    if let Some(port) = s.strip_prefix(':') {
        let port = port
            .parse::<u16>()
            .map_err(|_| bad(format!("{port:?} is not a port")))?;
        return Ok(SocketAddr::from((Ipv4Addr::UNSPECIFIED, port)));
    }
    s.to_socket_addrs()
        .map_err(|e| bad(format!("{s:?}: {e}")))?
        .next()
        .ok_or_else(|| bad(format!("{s:?} names no address")))
}

/// This host's address as other hosts would reach it: the first
/// non-loopback address its name resolves to, else loopback (one host).
fn this_host_ip() -> IpAddr {
    let name = super::identity::host_name();
    (name.as_str(), 0)
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.find(|a| !a.ip().is_loopback()).map(|a| a.ip()))
        .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST))
}

/// A job number no other job is likely to have: the clock, the process
/// and a counter, mixed.
fn fresh_job() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    h.write_u64(COUNT.fetch_add(1, Ordering::Relaxed));
    h.finish()
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_survive_bytes_and_text_and_bad_ones_are_typed_errors() {
        for root in ["10.1.2.3:29500", "[fe80::1]:1234", "127.0.0.1:1"] {
            let id = UniqueId::at(root.parse().unwrap(), 0xdead_beef_1234_5678);
            assert_eq!(UniqueId::from_bytes(&id.to_bytes()).unwrap(), id);
            assert_eq!(id.to_string().parse::<UniqueId>().unwrap(), id);
        }
        let id = UniqueId::at("10.1.2.3:29500".parse().unwrap(), 7);
        let mut b = id.to_bytes();
        let bad = |b: &[u8]| matches!(UniqueId::from_bytes(b), Err(Error::BadUniqueId(_)));
        assert!(bad(&b[..31]));
        b[0] = 9;
        assert!(bad(&b));
        let mut b = id.to_bytes();
        b[9] = 5;
        assert!(bad(&b));
        let mut b = id.to_bytes();
        b[26] = 0;
        b[27] = 0;
        assert!(bad(&b), "port 0");
        let mut b = id.to_bytes();
        b[31] = 1;
        assert!(bad(&b));
        for s in [
            "",
            "ringreduce1-",
            "nccl-00",
            &format!("{id}0"),
            &id.to_string().replace('0', "g"),
        ] {
            assert!(
                matches!(s.parse::<UniqueId>(), Err(Error::BadUniqueId(_))),
                "{s:?}"
            );
        }
    }

    #[test]
    fn a_new_id_listens_and_differs_from_the_last() {
        let (a, b) = (UniqueId::new().unwrap(), UniqueId::new().unwrap());
        assert_ne!(a.job(), b.job());
        assert_ne!(a.root().port(), 0);
        let l = a.take_listener().expect("the listener new() opened");
        assert_eq!(l.local_addr().unwrap().port(), a.root().port());
        assert!(a.take_listener().is_none(), "taken once");
        drop(b.take_listener());
    }
}
