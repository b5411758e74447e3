//! Where a part finds its binaries and tools and puts its files: what every
//! kind of part (tests, benches, probes, profiles) shares, below them all.

use super::Status;
use std::path::PathBuf;

/// Where the suite finds its binaries and puts its files.
pub struct Ctx {
    /// Run on the CPU execution at small sizes.
    pub cpu: bool,
    /// The bundle: `ringreduce-bench` and `tests/<name>`.
    pub bin_dir: PathBuf,
    pub out: PathBuf,
    /// Variables every command of the part gets (MPS's folders).
    pub env: Vec<(String, String)>,
}

impl Ctx {
    pub(super) fn test_bin(&self, name: &str) -> PathBuf {
        self.bin_dir.join("tests").join(name)
    }
    pub(super) fn log(&self, name: &str) -> PathBuf {
        self.out.join(format!("{name}.log"))
    }
    /// The same, every command also with `env`.
    pub(super) fn with_env(&self, env: &[(String, String)]) -> Ctx {
        Ctx {
            cpu: self.cpu,
            bin_dir: self.bin_dir.clone(),
            out: self.out.clone(),
            env: self.env.iter().chain(env).cloned().collect(),
        }
    }
}

/// A GPU-only part's CUDA toolkit program `name`, or the part's skipped
/// outcome: on the CPU execution (`who` says what the tool does there, which
/// is nothing), or when the tool is not installed.
pub fn gpu_tool(
    ctx: &Ctx,
    name: &str,
    who: &str,
) -> Result<PathBuf, (Status, String, Vec<String>)> {
    let skip = |why: String| (Status::Skipped, why, vec![]);
    if ctx.cpu {
        return Err(skip(format!("{who}; the CPU execution has none")));
    }
    cuda_tool(name).ok_or_else(|| skip(format!("{name} not found (PATH, /usr/local/cuda/bin)")))
}

/// A CUDA toolkit program: on PATH, else where the toolkit puts it.
pub(super) fn cuda_tool(name: &str) -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(name))
            .find(|f| f.is_file())
    });
    on_path.or_else(|| {
        let f = PathBuf::from("/usr/local/cuda/bin").join(name);
        f.is_file().then_some(f)
    })
}
