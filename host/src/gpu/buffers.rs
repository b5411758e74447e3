//! How a caller hands one rank's buffers to a GPU collective.

use cudarc::driver::{CudaView, CudaViewMut};

/// One rank's buffers for a GPU collective, with NCCL's shapes for a count
/// of `n` elements:
///
/// | collective | `send` | `recv` | in place |
/// |---|---|---|---|
/// | reduce-scatter | `k * n` | `n` | `recv = send + rank * n` |
/// | all-gather | `n` | `k * n` | `send = recv + rank * n` |
/// | all-reduce | `n` | `n` | `send == recv` |
pub enum Buffers<'a, T> {
    /// Input and output apart.
    OutOfPlace {
        /// The input.
        send: CudaView<'a, T>,
        /// The output.
        recv: CudaViewMut<'a, T>,
    },
    /// One buffer: `k * n` elements for a reduce-scatter (the result lands
    /// in block `rank`) and an all-gather (the input is block `rank`), `n`
    /// for an all-reduce.
    InPlace(CudaViewMut<'a, T>),
}

impl<'a, T> Buffers<'a, T> {
    /// `send` and `recv`, apart.
    pub fn out_of_place(send: CudaView<'a, T>, recv: CudaViewMut<'a, T>) -> Self {
        Buffers::OutOfPlace { send, recv }
    }
    /// One buffer, input and output.
    pub fn in_place(buf: CudaViewMut<'a, T>) -> Self {
        Buffers::InPlace(buf)
    }
}

/// One rank's buffers as raw device addresses, lengths in elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawBuffers {
    /// Device address of the input.
    pub send: u64,
    /// Elements of the input.
    pub send_len: usize,
    /// Device address of the output.
    pub recv: u64,
    /// Elements of the output.
    pub recv_len: usize,
}
