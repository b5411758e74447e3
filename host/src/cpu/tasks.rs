//! The gradient layer's tasks on the CPU execution: each runs on its
//! rank's worker thread, in order with the rank's collectives, as
//! [`CPU_TASK_LANES`] lanes one after another, phase by phase.

use super::buffer::{HostBuffer, UseGuard};
use super::comm::CpuCommunicator;
use crate::element::RsElement;
use crate::error::Result;
use ringreduce_kernels::abi::{Task, TaskKind};
use ringreduce_kernels::device::{Lanes, SeqHist};
use ringreduce_kernels::grad::run_phase;

/// Lanes of a CPU task: odd, so that every split leaves a tail, and more
/// than one, so that the tile offsets and copy groups are exercised.
pub const CPU_TASK_LANES: u64 = 3;

/// A buffer in use by a queued task (see [`HostBuffer`]'s accessors).
pub struct Hold(#[allow(dead_code)] UseGuard);

impl Hold {
    /// Marks `buf` in use until the hold is dropped.
    pub fn of<T: RsElement>(buf: &HostBuffer<T>) -> Hold {
        Hold(buf.as_view().mem.begin_use())
    }
}

struct CpuLanes {
    lane: u64,
    hist: SeqHist,
}

// SAFETY: the lanes run one after another on one thread, each its own
// block, so each flush adds its counts alone.
unsafe impl Lanes for CpuLanes {
    fn lane(&self) -> u64 {
        self.lane
    }
    fn lanes(&self) -> u64 {
        CPU_TASK_LANES
    }
    unsafe fn hist_begin(&self) {
        self.hist.begin();
    }
    unsafe fn hist_count(&self, bin: u32) {
        self.hist.count(bin);
    }
    unsafe fn hist_flush(&self, global: *mut u32) {
        self.hist.flush(global);
    }
}

impl CpuCommunicator {
    /// Queues `task` on rank `rank`'s worker, keeping `holds` until it ran.
    ///
    /// # Safety
    /// As for [`GradBackend::run_task`](crate::grad::GradBackend::run_task).
    pub(crate) unsafe fn run_task_job(
        &self,
        rank: usize,
        task: Task,
        holds: Vec<Hold>,
    ) -> Result<()> {
        self.check_broken()?;
        let phases = TaskKind::from_u64(task.kind).map_or(0, |k| k.phases());
        self.submit(
            rank,
            Box::new(move || {
                let _h = holds;
                for p in 0..phases {
                    for lane in 0..CPU_TASK_LANES {
                        // SAFETY: the caller's promise.
                        unsafe {
                            run_phase(
                                &CpuLanes {
                                    lane,
                                    hist: SeqHist::default(),
                                },
                                &task,
                                p,
                            )
                        };
                    }
                }
            }),
        )
    }
}
