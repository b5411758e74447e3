//! How a sweep times a backend's collectives: CUDA events on the GPU
//! communicator's streams (nccl-tests' timing), the host clock on the CPU
//! execution.

use cudarc::driver::{sys, CudaEvent, CudaGraph};
use ringreduce::{
    reference, Collective, Collectives, Communicator, CpuCommunicator, Error, Op, Result, RsElement,
};
use std::time::Instant;

/// A backend whose queued work can be timed.
pub trait Clock: Collectives {
    /// A point in every rank's queue.
    type Mark;
    /// Marks the point after everything queued so far on every rank; work
    /// queued later starts after it.
    fn mark(&self) -> Result<Self::Mark>;
    /// Microseconds between two marks, once the later one is reached.
    fn elapsed_us(&self, from: &Self::Mark, to: &Self::Mark) -> Result<f64>;

    /// Work captured once and replayed (a CUDA graph).
    type Graph;
    /// Captures what `queue` enqueues, instead of running it.
    fn capture(&self, queue: &mut dyn FnMut() -> Result<()>) -> Result<Self::Graph>;
    /// Enqueues one replay of `g`.
    fn replay(&self, g: &Self::Graph) -> Result<()>;

    /// Every rank's output of `c` over `inputs` (by rank; `n` as
    /// `Collective::lengths` takes it), folded as this backend folds:
    /// the sweep's check compares with it.
    fn want<T: RsElement>(
        &self,
        c: Collective,
        n: usize,
        inputs: &[&[T]],
        op: Op,
    ) -> Result<Vec<Vec<T>>> {
        let algorithm = self.algorithm_for::<T>(c, n)?;
        Ok(reference::collective_by(
            c,
            algorithm,
            inputs,
            self.ring_order(),
            op,
        ))
    }
}

impl Clock for Communicator {
    type Mark = CudaEvent;

    /// Joins every rank's stream into rank 0's, records a timing event
    /// there, and makes every other stream wait for it.
    fn mark(&self) -> Result<CudaEvent> {
        let streams = self.streams();
        for s in &streams[1..] {
            streams[0].wait(&s.record_event(None)?)?;
        }
        let e = streams[0].record_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))?;
        for s in &streams[1..] {
            s.wait(&e)?;
        }
        Ok(e)
    }

    fn elapsed_us(&self, from: &CudaEvent, to: &CudaEvent) -> Result<f64> {
        to.synchronize()?;
        Ok(from.elapsed_ms(to)? as f64 * 1e3)
    }

    type Graph = CudaGraph;

    /// Captures on the stream every rank shares (virtual ranks on one GPU,
    /// see `Communicator::streams`).
    fn capture(&self, queue: &mut dyn FnMut() -> Result<()>) -> Result<CudaGraph> {
        let s = &self.streams()[0];
        if self
            .streams()
            .iter()
            .any(|x| x.cu_stream() != s.cu_stream())
        {
            return Err(Error::Driver(
                "graph capture needs every rank on one stream (virtual ranks on one GPU)".into(),
            ));
        }
        ringreduce::gpu::capture(s, queue)
    }

    fn replay(&self, g: &CudaGraph) -> Result<()> {
        Ok(g.launch()?)
    }
}

/// The host clock around the work queued so far: the CPU execution's,
/// a hierarchical rank's collectives and NCCL's (whose `synchronize`
/// polls the stream), with no graph capture (`no_graph` says why).
macro_rules! host_clock {
    ($t:ty, $no_graph:literal $(, $g:ident)? $(; $($more:tt)*)?) => {
        impl<$($g: ringreduce::Backend)?> Clock for $t {
            type Mark = Instant;

            fn mark(&self) -> Result<Instant> {
                self.synchronize()?;
                Ok(Instant::now())
            }

            fn elapsed_us(&self, from: &Instant, to: &Instant) -> Result<f64> {
                Ok(to.duration_since(*from).as_secs_f64() * 1e6)
            }

            type Graph = ();

            fn capture(&self, _: &mut dyn FnMut() -> Result<()>) -> Result<()> {
                Err(Error::Driver($no_graph.into()))
            }

            fn replay(&self, _: &()) -> Result<()> {
                Ok(())
            }

            $($($more)*)?
        }
    };
}

host_clock!(CpuCommunicator, "graph capture needs a GPU");
host_clock!(
    ringreduce::HierComm<B>,
    "graph capture needs the GPU communicator",
    B;
    /// The hierarchical reference: the node's fold, then node order.
    fn want<T: RsElement>(
        &self,
        c: Collective,
        n: usize,
        inputs: &[&[T]],
        op: Op,
    ) -> Result<Vec<Vec<T>>> {
        let intra = self.intra();
        // The counts asked about are those the call itself planned, so
        // none fails here; were one to, its rows would show as wrong.
        let algorithm_for = |c, count| {
            intra
                .algorithm_for::<T>(c, count)
                .unwrap_or(ringreduce::Algorithm::Ring)
        };
        Ok(reference::hierarchical_by(
            c,
            n,
            inputs,
            self.nodes(),
            algorithm_for,
            intra.ring_order(),
            op,
        ))
    }
);
host_clock!(
    ringreduce::NcclCommunicator,
    "graph capture needs the GPU communicator"
);
