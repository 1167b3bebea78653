//! The capture file one rank writes (`rank-NNNNN.mpicap`, format version 2),
//! little-endian throughout.
//! `commcanary import mpi` reads it (`src/evidence/commtrace/mpi/rank_capture.rs` in the
//! main package keeps the reader and these numbers in step; the header names
//! the call kinds, so a reader maps kind numbers by name).
//!
//! ```text
//! header:  "CCMPICAP" | version u32 | json_len u32 | JSON | SHA-256(JSON)
//! block*:  "CCBLOCK\0" | seq u64 | records u32 | payload_len u32 | payload | SHA-256(seq..payload)
//! trailer: "CCTRAIL\0" | blocks u64 | records u64 | SHA-256(every block's digest, in order)
//! record:  type u8 | 0 u8 | payload_len u16 | payload
//! ```
//! Records and an unfinished rank: docs/METHODS.md, "MPI capture import".

/// Version of this layout (the header's `format_version` and the u32 after the magic).
pub const FORMAT_VERSION: u32 = 2;
/// First bytes of the file.
pub const MAGIC: &[u8; 8] = b"CCMPICAP";
/// First bytes of a block.
pub const BLOCK_MAGIC: &[u8; 8] = b"CCBLOCK\0";
/// First bytes of the trailer.
pub const TRAILER_MAGIC: &[u8; 8] = b"CCTRAIL\0";
/// Payload bytes of one block at most: what a rank killed mid-run can lose.
pub const BLOCK_BYTES: usize = 64 * 1024;

/// One MPI call (see [`call_off`]).
pub const REC_CALL: u8 = 1;
/// A request completed: request id u64, time ns u64, source i32 (world rank,
/// or the raw negative value), tag i32, index in the call's array u32, flags u32
/// (bit 0: source and tag unknown, e.g. a Fortran caller's status).
pub const REC_DONE: u8 = 2;
/// A datatype's first sight: id u16, size in bytes i32, name (rest).
pub const REC_DTYPE: u8 = 3;
/// A reduction op's first sight: id u16, name (rest).
pub const REC_OP: u8 = 4;
/// A communicator's first sight: id u32, intercommunicator u8, ordinal u32
/// (how many communicators with these members this rank saw before), members u32 each (world ranks).
pub const REC_COMM: u8 = 5;
/// A communicator freed: id u32, time ns u64.
pub const REC_COMM_FREE: u8 = 6;
/// `MPI_Abort` called: error code i32, time ns u64.
pub const REC_ABORT: u8 = 7;
/// A clock window against rank 0 (0 at `MPI_Init`, 1 at `MPI_Finalize`):
/// window u8, then per ping-pong exchange this rank's send time u64, rank
/// 0's time when it answered u64, this rank's receive time u64 (none on rank 0).
pub const REC_CLOCK: u8 = 8;
/// A v-call's per-member counts (version 2), right after its [`REC_CALL`]:
/// side u8 (0 send, 1 receive), then one u32 count per member of the
/// communicator in rank order. Only where the array is significant (a
/// gather-v's receive counts at its root, a scatter-v's send counts at its
/// root); none for a communicator too large for one record.
pub const REC_COUNTS: u8 = 9;
/// [`REC_COUNTS`] side: send counts.
pub const COUNTS_SEND: u8 = 0;
/// [`REC_COUNTS`] side: receive counts.
pub const COUNTS_RECV: u8 = 1;
/// Ping-pong exchanges per window and rank.
pub const CLOCK_SAMPLES: usize = 16;

/// Bytes of a [`REC_CALL`] payload.
pub const CALL_LEN: usize = 80;

/// Offsets inside a [`REC_CALL`] payload.
pub mod call_off {
    /// u16: index into the header's `calls`.
    pub const KIND: usize = 0;
    /// u16: bit 0 Fortran caller, bit 1 the call returned an error.
    pub const FLAGS: usize = 2;
    /// u32: communicator id (0 = none, e.g. a wait).
    pub const COMM: usize = 4;
    /// u64: CLOCK_MONOTONIC ns on entry.
    pub const T_ISSUE: usize = 8;
    /// u64: CLOCK_MONOTONIC ns on return.
    pub const T_DONE: usize = 16;
    /// u64: elements sent (v-variants: summed over the members).
    pub const COUNT_SEND: usize = 24;
    /// u64: elements received (as above).
    pub const COUNT_RECV: usize = 32;
    /// u16: datatype id of the send side (0 = none).
    pub const DT_SEND: usize = 40;
    /// u16: datatype id of the receive side (0 = none).
    pub const DT_RECV: usize = 42;
    /// u16: reduction op id (0 = none).
    pub const OP: usize = 44;
    /// i32: root or peer (send side) as a world rank, or the raw negative value; [`super::NONE`] if none.
    pub const PEER: usize = 48;
    /// i32: tag (send side); [`super::NONE`] if none.
    pub const TAG: usize = 52;
    /// u64: request id this call created, or the one it waited on or tested (0 = none).
    pub const REQUEST: usize = 56;
    /// i32: the value the library returned.
    pub const RET: usize = 64;
    /// u32: length of the request array (wait/test families).
    pub const N: usize = 68;
    /// i32: receive side's source (Sendrecv; Probe's match), as `PEER`.
    pub const PEER2: usize = 72;
    /// i32: receive side's tag, as `TAG`.
    pub const TAG2: usize = 76;
}

/// A field the call does not have.
pub const NONE: i32 = i32::MIN;

/// Flag: called from Fortran.
pub const FLAG_FORTRAN: u16 = 1;
/// Flag: the library returned an error.
pub const FLAG_ERROR: u16 = 2;

/// Every call kind the library records, by number (the header lists them).
pub const CALLS: &[&str] = &[
    "Allreduce",
    "Iallreduce",
    "Reduce",
    "Ireduce",
    "Bcast",
    "Ibcast",
    "Allgather",
    "Iallgather",
    "Allgatherv",
    "Iallgatherv",
    "Gather",
    "Igather",
    "Gatherv",
    "Igatherv",
    "Scatter",
    "Iscatter",
    "Scatterv",
    "Iscatterv",
    "Alltoall",
    "Ialltoall",
    "Alltoallv",
    "Ialltoallv",
    "Reduce_scatter",
    "Ireduce_scatter",
    "Reduce_scatter_block",
    "Ireduce_scatter_block",
    "Barrier",
    "Ibarrier",
    "Scan",
    "Iscan",
    "Exscan",
    "Iexscan",
    "Send",
    "Ssend",
    "Bsend",
    "Rsend",
    "Isend",
    "Issend",
    "Ibsend",
    "Irsend",
    "Recv",
    "Irecv",
    "Sendrecv",
    "Sendrecv_replace",
    "Probe",
    "Iprobe",
    "Wait",
    "Waitall",
    "Waitany",
    "Waitsome",
    "Test",
    "Testall",
    "Testany",
    "Testsome",
    "Comm_split",
    "Comm_split_type",
    "Comm_dup",
    "Comm_create",
    "Comm_free",
];

/// The number of a call kind (a compile-time lookup: a misspelt name fails the build).
pub const fn kind(name: &str) -> u16 {
    let mut i = 0;
    while i < CALLS.len() {
        if eq(CALLS[i].as_bytes(), name.as_bytes()) {
            return i as u16;
        }
        i += 1;
    }
    panic!("not a call kind of format::CALLS")
}

const fn eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}
