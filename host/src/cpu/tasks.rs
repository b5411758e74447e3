//! The gradient layer's tasks on the CPU execution: each runs on its
//! rank's worker thread, in order with the rank's collectives, as
//! [`CPU_TASK_LANES`] lanes one after another, phase by phase.

use super::buffer::{HostBuffer, UseGuard};
use super::comm::CpuBackend;
use crate::element::RsElement;
use crate::error::Result;
use ringreduce_kernels::grad::abi::{Task, TaskKind};
use ringreduce_kernels::grad::lanes::SeqLanes;
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

impl CpuBackend {
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
        let phases = TaskKind::from_u64(task.kind).map_or(0, |k| k.phases());
        self.submit(
            rank,
            Box::new(move || {
                let _h = holds;
                for p in 0..phases {
                    for lane in 0..CPU_TASK_LANES {
                        // SAFETY: the caller's promise.
                        unsafe { run_phase(&SeqLanes::new(lane, CPU_TASK_LANES), &task, p) };
                    }
                }
            }),
        )
    }
}
