//! One rank's library call of a collective ([`Call`]), the one shape every
//! backend's arm per kind takes: the kind, element counts in the call's
//! datatype, the root and peers as ranks of the communicator it runs on, and
//! an all-to-all's per-peer splits.
//!
//! Made by the own path ([`super::own::OwnOp::call`]: a world collective of
//! a sweep or a phase) and by the trace executors
//! ([`super::trace_share::TraceShare::call`]: one recorded collective on its
//! group). Consumed by the cpu backend's `mpi_call` (MPI calls, blocking or
//! nonblocking) and the cuda backend's `nccl_calls` (NCCL calls). Adding a
//! kind is its row in [`crate::core::collective::KINDS`] and one arm in each
//! of those two functions; sizes, roots, rings and checks come from the row.
use crate::core::collective::CollectiveKind;

/// An all-to-all's per-peer counts and displacements, in elements of the
/// call's datatype, indexed by communicator rank (MPI's `MPI_Alltoallv`
/// arguments).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Splits {
    /// Elements sent to each peer.
    pub send_counts: Vec<usize>,
    /// Where each peer's elements start in the send buffer.
    pub send_at: Vec<usize>,
    /// Elements received from each peer.
    pub recv_counts: Vec<usize>,
    /// Where each peer's elements land in the receive buffer.
    pub recv_at: Vec<usize>,
}

/// One rank's share of one collective, as its library call counts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Call<'a> {
    /// The kind.
    pub kind: CollectiveKind,
    /// Elements of the send buffer the call reads (all-reduce, reduce,
    /// broadcast: the buffer; reduce-scatter and all-to-all: the whole
    /// input; all-gather: this rank's block; a send: the message).
    pub send_elems: usize,
    /// Elements of the receive buffer a receive fills.
    pub recv_elems: usize,
    /// Elements per member: the all-gather's input, the reduce-scatter's
    /// output, an even all-to-all's split.
    pub block_elems: usize,
    /// The root of a rooted kind, as a rank of the communicator.
    pub root: Option<u32>,
    /// Where a point-to-point kind sends, as a rank of the communicator.
    pub send_to: Option<u32>,
    /// Where a point-to-point kind receives from.
    pub recv_from: Option<u32>,
    /// An all-to-all's uneven splits; `None`: `block_elems` to and from every member.
    pub splits: Option<&'a Splits>,
    /// Members of the communicator.
    pub group_size: u32,
}

impl Call<'_> {
    /// The root, or 0 for a kind without one (never read by such a kind's call).
    pub fn root_or_0(&self) -> u32 {
        self.root.unwrap_or(0)
    }
}
