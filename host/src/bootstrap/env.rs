//! Where a process stands in its job, from the variables its launcher
//! set: torchrun's, then Open MPI's, then Slurm's. A missing or malformed
//! variable is [`Error::Env`], naming it.

use super::id::UniqueId;
use crate::error::{Error, Result};
use std::net::ToSocketAddrs;

/// The rendezvous address (`host:port`) for launchers that set none
/// (mpirun, srun); `MASTER_ADDR` and `MASTER_PORT` serve too.
pub const ROOT_ENV: &str = "RINGREDUCE_ROOT";

/// The launcher whose variables were read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Launcher {
    /// `torchrun` (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`,
    /// `MASTER_ADDR`, `MASTER_PORT`).
    Torchrun,
    /// Open MPI's `mpirun` (`OMPI_COMM_WORLD_RANK`, `_SIZE`,
    /// `_LOCAL_RANK`, `_LOCAL_SIZE`).
    OpenMpi,
    /// Slurm's `srun` (`SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_LOCALID`).
    Slurm,
}

/// One process's place in its job, as its launcher describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    /// Whose variables these are.
    pub launcher: Launcher,
    /// This process's rank, `0..world`.
    pub rank: usize,
    /// Processes in the job.
    pub world: usize,
    /// Its rank among the processes of its host: the device it drives.
    pub local_rank: usize,
    /// Processes on its host, where the launcher says.
    pub local_world: Option<usize>,
    /// Rank 0's rendezvous address, `host:port`.
    pub root: String,
    /// What tells this job from another on the same address: the
    /// launcher's job id where it has one.
    pub job_key: String,
}

impl Launch {
    /// From this process's environment.
    pub fn from_env() -> Result<Self> {
        Self::from_vars(|k| std::env::var(k).ok())
    }

    /// The variables torchrun sets for rank `rank` of `world` processes
    /// on one host meeting at `port` on loopback: what [`from_env`]
    /// reads, for a program that starts its own ranks as torchrun would
    /// (the bench's `--procs`, the tests' jobs).
    ///
    /// [`from_env`]: Self::from_env
    pub fn torchrun_vars(rank: usize, world: usize, port: u16) -> [(&'static str, String); 6] {
        [
            ("RANK", rank.to_string()),
            ("WORLD_SIZE", world.to_string()),
            ("LOCAL_RANK", rank.to_string()),
            ("LOCAL_WORLD_SIZE", world.to_string()),
            ("MASTER_ADDR", "127.0.0.1".to_string()),
            ("MASTER_PORT", port.to_string()),
        ]
    }

    /// From the variables `get` returns (the environment, or a test's).
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let num = |var: &'static str| -> Result<Option<usize>> {
            match get(var) {
                None => Ok(None),
                Some(s) => s.trim().parse::<usize>().map(Some).map_err(|_| Error::Env {
                    var,
                    problem: format!("{s:?} is not a whole number"),
                }),
            }
        };
        let need = |var: &'static str| -> Result<usize> {
            num(var)?.ok_or(Error::Env {
                var,
                problem: "not set".into(),
            })
        };
        let (launcher, rank_var, world_var) = if get("RANK").is_some() {
            (Launcher::Torchrun, "RANK", "WORLD_SIZE")
        } else if get("OMPI_COMM_WORLD_RANK").is_some() {
            (
                Launcher::OpenMpi,
                "OMPI_COMM_WORLD_RANK",
                "OMPI_COMM_WORLD_SIZE",
            )
        } else if get("SLURM_PROCID").is_some() {
            (Launcher::Slurm, "SLURM_PROCID", "SLURM_NTASKS")
        } else {
            return Err(Error::NoLauncher);
        };
        let (rank, world) = (need(rank_var)?, need(world_var)?);
        if world == 0 {
            return Err(Error::Env {
                var: world_var,
                problem: "is 0".into(),
            });
        }
        if rank >= world {
            return Err(Error::Env {
                var: rank_var,
                problem: format!("{rank} is not below {world_var} {world}"),
            });
        }
        let (local_rank, local_world, job_key) = match launcher {
            Launcher::Torchrun => (
                num("LOCAL_RANK")?.unwrap_or(0),
                num("LOCAL_WORLD_SIZE")?,
                get("TORCHELASTIC_RUN_ID").unwrap_or_default(),
            ),
            Launcher::OpenMpi => (
                num("OMPI_COMM_WORLD_LOCAL_RANK")?.unwrap_or(0),
                num("OMPI_COMM_WORLD_LOCAL_SIZE")?,
                get("OMPI_MCA_ess_base_jobid").unwrap_or_default(),
            ),
            Launcher::Slurm => (
                num("SLURM_LOCALID")?.unwrap_or(0),
                None,
                format!(
                    "{}.{}",
                    get("SLURM_JOB_ID").unwrap_or_default(),
                    get("SLURM_STEP_ID").unwrap_or_default()
                ),
            ),
        };
        if let Some(lw) = local_world {
            if local_rank >= lw {
                return Err(Error::Env {
                    var: match launcher {
                        Launcher::OpenMpi => "OMPI_COMM_WORLD_LOCAL_RANK",
                        _ => "LOCAL_RANK",
                    },
                    problem: format!("{local_rank} is not below the {lw} processes of its host"),
                });
            }
        }
        let root = root_address(&get, launcher)?;
        Ok(Launch {
            launcher,
            rank,
            world,
            local_rank,
            local_world,
            root,
            job_key,
        })
    }

    /// The job's [`UniqueId`]: rank 0's address resolved, and a job number
    /// every rank derives alike from the launch. The world size is not part
    /// of it, so that a rank started with another one reaches rank 0 and is
    /// told `WorldMismatch`, not taken for another job.
    pub fn unique_id(&self) -> Result<UniqueId> {
        let addr = self
            .root
            .to_socket_addrs()
            .map_err(|e| Error::Bootstrap(format!("cannot resolve {}: {e}", self.root)))?
            .next()
            .ok_or_else(|| Error::Bootstrap(format!("{} names no address", self.root)))?;
        let key = format!("{:?}/{}/{}", self.launcher, self.root, self.job_key);
        Ok(UniqueId::at(addr, fnv1a(key.as_bytes())))
    }
}

/// Set to `True` by torchrun for its workers when its agent serves the
/// job's store at `MASTER_ADDR:MASTER_PORT`: that port is then taken.
pub const AGENT_STORE_ENV: &str = "TORCHELASTIC_USE_AGENT_STORE";

/// [`ROOT_ENV`] where set (it overrides the launcher), else
/// `MASTER_ADDR:MASTER_PORT`, or the port after it where torchrun's agent
/// serves its own store on `MASTER_PORT` ([`AGENT_STORE_ENV`]); torchrun
/// always sets `MASTER_*`, the other launchers need one of the two.
fn root_address(get: &impl Fn(&str) -> Option<String>, launcher: Launcher) -> Result<String> {
    let root = get(ROOT_ENV).filter(|r| !r.trim().is_empty());
    match (get("MASTER_ADDR"), get("MASTER_PORT"), root) {
        (_, _, Some(r)) => {
            let ok = r.trim().rsplit_once(':').is_some_and(|(h, p)| {
                !h.is_empty() && p.parse::<u16>().is_ok_and(|p| p != 0)
            });
            if ok {
                Ok(r.trim().to_string())
            } else {
                Err(Error::Env {
                    var: ROOT_ENV,
                    problem: format!("{r:?} is not host:port"),
                })
            }
        }
        (Some(a), Some(p), None) => {
            let port = p.trim().parse::<u16>().ok().filter(|&p| p != 0).ok_or(Error::Env {
                var: "MASTER_PORT",
                problem: format!("{p:?} is not a port"),
            })?;
            let agent = get(AGENT_STORE_ENV).is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
            let port = if agent {
                port.checked_add(1).ok_or(Error::Env {
                    var: "MASTER_PORT",
                    problem: format!(
                        "{port} is torchrun's store, and no port follows it for ours: set {ROOT_ENV}"
                    ),
                })?
            } else {
                port
            };
            let host = a.trim();
            if host.is_empty() {
                return Err(Error::Env {
                    var: "MASTER_ADDR",
                    problem: "is empty".into(),
                });
            }
            Ok(if host.contains(':') && !host.starts_with('[') {
                format!("[{host}]:{port}")
            } else {
                format!("{host}:{port}")
            })
        }
        (Some(_), None, None) => Err(Error::Env {
            var: "MASTER_PORT",
            problem: "not set, though MASTER_ADDR is".into(),
        }),
        (None, Some(_), None) => Err(Error::Env {
            var: "MASTER_ADDR",
            problem: "not set, though MASTER_PORT is".into(),
        }),
        (None, None, None) => Err(Error::Env {
            var: "MASTER_ADDR",
            problem: format!(
                "{launcher:?} gives no rendezvous address: set MASTER_ADDR and MASTER_PORT, or {ROOT_ENV}"
            ),
        }),
    }
}

/// 64-bit FNV-1a: a hash every build computes alike.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn launch(vars: &[(&str, &str)]) -> Result<Launch> {
        let m: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Launch::from_vars(|k| m.get(k).cloned())
    }

    #[test]
    fn what_torchrun_vars_writes_is_read_back() {
        let vars = Launch::torchrun_vars(2, 5, 29611);
        let t = Launch::from_vars(|k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone()))
            .unwrap();
        assert_eq!(t.launcher, Launcher::Torchrun);
        assert_eq!(
            (t.rank, t.world, t.local_rank, t.local_world),
            (2, 5, 2, Some(5))
        );
        assert_eq!(t.root, "127.0.0.1:29611");
    }

    #[test]
    fn each_launcher_is_read_in_order() {
        let t = launch(&[
            ("RANK", "3"),
            ("WORLD_SIZE", "8"),
            ("LOCAL_RANK", "1"),
            ("LOCAL_WORLD_SIZE", "2"),
            ("MASTER_ADDR", "node0"),
            ("MASTER_PORT", "29500"),
            // Also under mpirun: torchrun's come first.
            ("OMPI_COMM_WORLD_RANK", "0"),
        ])
        .unwrap();
        assert_eq!(
            (t.launcher, t.rank, t.world, t.local_rank, t.local_world),
            (Launcher::Torchrun, 3, 8, 1, Some(2))
        );
        assert_eq!(t.root, "node0:29500");
        let m = launch(&[
            ("OMPI_COMM_WORLD_RANK", "1"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
            (ROOT_ENV, "10.0.0.1:4000"),
        ])
        .unwrap();
        assert_eq!(
            (m.launcher, m.rank, m.world, m.local_rank),
            (Launcher::OpenMpi, 1, 2, 1)
        );
        assert_eq!(m.root, "10.0.0.1:4000");
        let s = launch(&[
            ("SLURM_PROCID", "5"),
            ("SLURM_NTASKS", "6"),
            ("SLURM_LOCALID", "1"),
            ("SLURM_JOB_ID", "77"),
            ("MASTER_ADDR", "fe80::1"),
            ("MASTER_PORT", "1234"),
        ])
        .unwrap();
        assert_eq!(
            (s.launcher, s.rank, s.world, s.local_rank),
            (Launcher::Slurm, 5, 6, 1)
        );
        assert_eq!(s.root, "[fe80::1]:1234");
        assert_eq!(s.job_key, "77.");
    }

    /// Under torchrun the agent's store holds `MASTER_PORT` (a torchrun
    /// run on the GPU machine, 2026-12-07, failed with "Address already in
    /// use" before this rule): ours takes the next port, and
    /// `RINGREDUCE_ROOT` overrides both.
    #[test]
    fn torchruns_store_port_is_left_to_it() {
        let base = [
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("MASTER_ADDR", "node0"),
            ("MASTER_PORT", "29500"),
        ];
        let with = |more: &[(&'static str, &'static str)]| {
            let v: Vec<(&str, &str)> = base.iter().chain(more).copied().collect();
            launch(&v)
        };
        assert_eq!(with(&[]).unwrap().root, "node0:29500");
        assert_eq!(
            with(&[(AGENT_STORE_ENV, "True")]).unwrap().root,
            "node0:29501"
        );
        assert_eq!(
            with(&[(AGENT_STORE_ENV, "False")]).unwrap().root,
            "node0:29500"
        );
        let both = [(AGENT_STORE_ENV, "True"), (ROOT_ENV, "10.0.0.1:4000")];
        assert_eq!(with(&both).unwrap().root, "10.0.0.1:4000");
        let last = [
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("MASTER_ADDR", "node0"),
            ("MASTER_PORT", "65535"),
            (AGENT_STORE_ENV, "True"),
        ];
        match launch(&last) {
            Err(Error::Env { var, problem }) => {
                assert_eq!(var, "MASTER_PORT");
                assert!(problem.contains(ROOT_ENV), "{problem}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn bad_variables_are_errors_that_name_them() {
        let env = |r: Result<Launch>| match r {
            Err(Error::Env { var, problem }) => format!("{var}: {problem}"),
            other => panic!("{other:?}"),
        };
        assert_eq!(launch(&[]), Err(Error::NoLauncher));
        let base = [("MASTER_ADDR", "h"), ("MASTER_PORT", "1")];
        let with = |extra: &[(&'static str, &'static str)]| {
            let mut v = base.to_vec();
            v.extend_from_slice(extra);
            launch(&v)
        };
        assert!(env(with(&[("RANK", "x"), ("WORLD_SIZE", "2")])).starts_with("RANK: "));
        assert!(env(with(&[("RANK", "0")])).starts_with("WORLD_SIZE: not set"));
        assert!(
            env(with(&[("RANK", "2"), ("WORLD_SIZE", "2")])).starts_with("RANK: 2 is not below")
        );
        assert!(env(with(&[("RANK", "0"), ("WORLD_SIZE", "0")])).starts_with("WORLD_SIZE: is 0"));
        assert!(env(with(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("LOCAL_RANK", "2"),
            ("LOCAL_WORLD_SIZE", "2")
        ]))
        .starts_with("LOCAL_RANK: "));
        let no_root = launch(&[("OMPI_COMM_WORLD_RANK", "0"), ("OMPI_COMM_WORLD_SIZE", "2")]);
        assert!(env(no_root).contains(ROOT_ENV));
        let bad_port = launch(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "1"),
            ("MASTER_ADDR", "h"),
            ("MASTER_PORT", "0"),
        ]);
        assert!(env(bad_port).starts_with("MASTER_PORT: "));
        let half = launch(&[("RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", "h")]);
        assert!(env(half).starts_with("MASTER_PORT: not set"));
        let bad_root = launch(&[
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "1"),
            (ROOT_ENV, "h"),
        ]);
        assert!(env(bad_root).starts_with(&format!("{ROOT_ENV}: ")));
    }

    #[test]
    fn every_rank_of_a_launch_derives_the_same_id() {
        let at = |rank: &'static str| {
            launch(&[
                ("RANK", rank),
                ("WORLD_SIZE", "4"),
                ("MASTER_ADDR", "127.0.0.1"),
                ("MASTER_PORT", "29500"),
                ("TORCHELASTIC_RUN_ID", "abc"),
            ])
            .unwrap()
            .unique_id()
            .unwrap()
        };
        assert_eq!(at("0"), at("3"));
        assert_eq!(at("0").root(), "127.0.0.1:29500".parse().unwrap());
        let other_job = launch(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "4"),
            ("MASTER_ADDR", "127.0.0.1"),
            ("MASTER_PORT", "29500"),
            ("TORCHELASTIC_RUN_ID", "xyz"),
        ])
        .unwrap()
        .unique_id()
        .unwrap();
        assert_ne!(other_job.job(), at("0").job());
    }
}
