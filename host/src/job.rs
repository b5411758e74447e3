//! What the processes of one job agree on at the rendezvous, besides who
//! they are: each rank's [`Offer`] (the settings every rank must share,
//! and where its memory is), checked against rank 0's so that every rank
//! fails alike, and the [`Table`] a backend joins from. The steps
//! themselves are the front end's (`front/job.rs`).

use crate::bootstrap::Identity;
use crate::config::CommConfig;
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};

/// What a rank offers its peers at the rendezvous.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Offer {
    /// Which backend the rank runs: the CPU execution and a GPU do not
    /// mix.
    pub backend: String,
    /// Channels its memory holds (the job runs with the fewest any rank
    /// has).
    pub channels: u32,
    /// Staging bytes per channel.
    pub staging_bytes: u64,
    /// Bytes of each direct staging half (0: none).
    pub direct_half: u64,
    /// The configured ring order, if any.
    pub ring: Option<Vec<u32>>,
    /// The algorithm asked for (by the config or the environment).
    pub algorithm: Option<String>,
    /// Where its memory is, for the peers to map (a shared-memory name, a
    /// device's IPC handle): the backend's business.
    pub handle: Vec<u8>,
    /// Blocks of the collective kernels that fit at once on its device
    /// (0 for the CPU execution): every rank works out from every rank's
    /// what the job's channels fit.
    pub resident_blocks: u64,
}

impl Offer {
    /// The settings of `config` that every rank must share, for a backend
    /// named `backend` with `channels` channels of `staging_bytes`.
    pub fn new(
        backend: &str,
        config: &CommConfig,
        channels: usize,
        staging_bytes: u64,
        direct_half: u64,
        handle: Vec<u8>,
    ) -> Self {
        Offer {
            backend: backend.to_string(),
            channels: channels as u32,
            staging_bytes,
            direct_half,
            ring: config.ring_order.clone(),
            algorithm: config.effective_algorithm().ok().map(|a| format!("{a:?}")),
            handle,
            resident_blocks: 0,
        }
    }

    /// The bytes that travel in [`Identity::exports`].
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        postcard::to_stdvec(self).map_err(|e| Error::Bootstrap(format!("encoding an offer: {e}")))
    }
}

/// A job's ranks as one rank joins them: who each is, and what each
/// offered, checked.
#[derive(Debug, Clone)]
pub struct Table {
    /// This rank.
    pub rank: usize,
    /// Every rank's identity, by rank.
    pub ids: Vec<Identity>,
    /// Every rank's offer, by rank.
    pub offers: Vec<Offer>,
    /// Channels the job runs with: the fewest any rank has.
    pub channels: usize,
}

impl Table {
    /// Every rank's identity and offer checked against rank 0's: one host,
    /// one backend, the same settings. Every rank checks the same table,
    /// so every rank returns the same error.
    pub fn check(rank: usize, ids: Vec<Identity>) -> Result<Table> {
        let offers = ids
            .iter()
            .map(|i| {
                postcard::from_bytes::<Offer>(&i.exports).map_err(|e| {
                    Error::Rendezvous(format!("rank {}'s offer is unreadable: {e}", i.rank))
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let (host0, o0) = (&ids[0].host, &offers[0]);
        for (r, (id, o)) in ids.iter().zip(&offers).enumerate().skip(1) {
            if id.host != *host0 {
                return Err(Error::OtherHost {
                    rank: r,
                    theirs: id.host.clone(),
                    ours: host0.clone(),
                });
            }
            let differs = |what: &'static str, theirs: String, ours: String| {
                (theirs != ours).then_some(Error::JobMismatch {
                    rank: r,
                    what,
                    theirs,
                    ours,
                })
            };
            let checks = [
                differs("the backend", o.backend.clone(), o0.backend.clone()),
                differs(
                    "staging bytes per channel",
                    o.staging_bytes.to_string(),
                    o0.staging_bytes.to_string(),
                ),
                differs(
                    "direct staging bytes",
                    o.direct_half.to_string(),
                    o0.direct_half.to_string(),
                ),
                differs(
                    "the ring order",
                    format!("{:?}", o.ring),
                    format!("{:?}", o0.ring),
                ),
                differs(
                    "the algorithm",
                    format!("{:?}", o.algorithm),
                    format!("{:?}", o0.algorithm),
                ),
            ];
            if let Some(e) = checks.into_iter().flatten().next() {
                return Err(e);
            }
        }
        let channels = offers
            .iter()
            .map(|o| o.channels as usize)
            .min()
            .unwrap_or(1);
        Ok(Table {
            rank,
            ids,
            offers,
            channels,
        })
    }

    /// Ranks in the job.
    pub fn world(&self) -> usize {
        self.ids.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(rank: u32, host: &str, offer: &Offer) -> Identity {
        Identity {
            rank,
            host: host.into(),
            pid: 100 + rank,
            device: [0; 16],
            exports: offer.to_bytes().unwrap(),
        }
    }

    fn offer(channels: usize, staging: u64) -> Offer {
        Offer::new(
            "cpu",
            &CommConfig::default(),
            channels,
            staging,
            1 << 20,
            vec![],
        )
    }

    /// The fewest channels win; another host, another backend or another
    /// setting is a typed error naming the rank.
    #[test]
    fn table_agrees_or_names_the_rank() {
        let ids = |o1: &Offer, host1: &str| vec![id(0, "a", &offer(4, 4096)), id(1, host1, o1)];
        let t = Table::check(1, ids(&offer(2, 4096), "a")).unwrap();
        assert_eq!((t.channels, t.world(), t.rank), (2, 2, 1));
        assert!(matches!(
            Table::check(0, ids(&offer(4, 4096), "b")),
            Err(Error::OtherHost { rank: 1, .. })
        ));
        assert!(matches!(
            Table::check(0, ids(&offer(4, 8192), "a")),
            Err(Error::JobMismatch {
                rank: 1,
                what: "staging bytes per channel",
                ..
            })
        ));
        let mut gpu = offer(4, 4096);
        gpu.backend = "gpu".into();
        assert!(matches!(
            Table::check(0, ids(&gpu, "a")),
            Err(Error::JobMismatch {
                what: "the backend",
                ..
            })
        ));
        let mut garbage = id(1, "a", &offer(4, 4096));
        garbage.exports = vec![0xff; 3];
        assert!(matches!(
            Table::check(0, vec![id(0, "a", &offer(4, 4096)), garbage]),
            Err(Error::Rendezvous(_))
        ));
    }
}
