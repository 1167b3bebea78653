//! One rank's capture: the open file, the block being filled, and the
//! handle tables (communicators, datatypes, ops, requests) that turn the
//! library's handles into stable small ids. Consumes the facts the wrappers
//! hand over after each PMPI call; produces blocks on disk (format in
//! [`crate::format`]). Memory stays bounded: one block buffer
//! ([`BLOCK_BYTES`]), tables as large as the live handles (requests are
//! dropped when completed). A write error stops the capture on this rank
//! (printed once); the application runs on.
use crate::format::*;
use mpi_sys as ffi;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::os::raw::{c_char, c_int};
use std::sync::atomic::AtomicBool;
use std::sync::{atomic, Mutex};

/// The capture of this process, once `MPI_Init` has opened it.
pub(crate) static STATE: Mutex<Option<Capture>> = Mutex::new(None);

/// Set while a signal handler flushes: nothing may allocate or print then.
pub(crate) static IN_SIGNAL: AtomicBool = AtomicBool::new(false);

/// CLOCK_MONOTONIC in ns.
#[inline]
pub(crate) fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec into the valid local `ts`.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64).wrapping_mul(1_000_000_000).wrapping_add(ts.tv_nsec as u64)
}

/// One call's facts, as a wrapper collected them.
#[derive(Default)]
pub(crate) struct Call {
    pub kind: u16,
    pub flags: u16,
    pub comm: Option<ffi::MPI_Comm>,
    pub t_issue: u64,
    pub t_done: u64,
    pub count_send: u64,
    pub count_recv: u64,
    pub dt_send: Option<ffi::MPI_Datatype>,
    pub dt_recv: Option<ffi::MPI_Datatype>,
    pub op: Option<ffi::MPI_Op>,
    /// Root or peer, rank in `comm` (or the raw negative value).
    pub peer: Option<c_int>,
    pub tag: Option<c_int>,
    pub peer2: Option<c_int>,
    pub tag2: Option<c_int>,
    /// A request this call created (its handle after the call).
    pub new_request: Option<ffi::MPI_Request>,
    /// The request id this call waited on or tested.
    pub request_id: u64,
    pub ret: c_int,
    pub n: u32,
    /// A v-call's per-member send counts, where significant.
    pub send_counts: Option<Vec<u32>>,
    /// A v-call's per-member receive counts, where significant.
    pub recv_counts: Option<Vec<u32>>,
}

/// A completion, found by a wait or test call.
pub(crate) struct Done {
    pub request_id: u64,
    pub source: Option<c_int>,
    pub tag: Option<c_int>,
    pub index: u32,
}

pub(crate) struct Capture {
    file: File,
    buf: Vec<u8>,
    nrec: u32,
    blocks: u64,
    records: u64,
    chain: Sha256,
    /// communicator handle → id (dropped when freed)
    comms: HashMap<usize, u32>,
    /// communicator id → members as world ranks (kept: a request may outlive its communicator)
    members: HashMap<u32, Vec<u32>>,
    next_comm: u32,
    /// membership → how many communicators with it were seen
    ordinals: HashMap<Vec<u32>, u32>,
    dtypes: HashMap<usize, u16>,
    ops: HashMap<usize, u16>,
    /// live request handle → (id, communicator id)
    requests: HashMap<usize, (u64, u32)>,
    next_request: u64,
    failed: bool,
}

impl Capture {
    /// Open `path` (never an existing file) and write the header.
    pub(crate) fn create(path: &std::path::Path, header_json: &[u8]) -> std::io::Result<Self> {
        let mut file = std::fs::OpenOptions::new().write(true).create_new(true).open(path)?;
        let mut h = Vec::with_capacity(header_json.len() + 48);
        h.extend_from_slice(MAGIC);
        h.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        h.extend_from_slice(&(header_json.len() as u32).to_le_bytes());
        h.extend_from_slice(header_json);
        h.extend_from_slice(&Sha256::digest(header_json));
        file.write_all(&h)?;
        Ok(Capture {
            file,
            buf: Vec::with_capacity(BLOCK_BYTES),
            nrec: 0,
            blocks: 0,
            records: 0,
            chain: Sha256::new(),
            comms: HashMap::new(),
            members: HashMap::new(),
            next_comm: 1,
            ordinals: HashMap::new(),
            dtypes: HashMap::new(),
            ops: HashMap::new(),
            requests: HashMap::new(),
            next_request: 1,
            failed: false,
        })
    }

    fn fail(&mut self, what: &str, e: std::io::Error) {
        if !self.failed && !IN_SIGNAL.load(atomic::Ordering::Relaxed) {
            eprintln!(
                "commcanary-capture: {what}: {e}; this rank's capture stops here (its file keeps the blocks written)"
            );
        }
        self.failed = true;
    }

    /// Append one record; a full block goes to the file first.
    fn record(&mut self, ty: u8, payload: &[u8]) {
        if self.failed {
            return;
        }
        let len = payload.len().min(BLOCK_BYTES - 4);
        if self.buf.len() + 4 + len > BLOCK_BYTES {
            self.flush_block();
        }
        self.buf.push(ty);
        self.buf.push(0);
        self.buf.extend_from_slice(&(len as u16).to_le_bytes());
        self.buf.extend_from_slice(&payload[..len]);
        self.nrec += 1;
        self.records += 1;
    }

    /// Write the block being filled (if any) with its digest.
    pub(crate) fn flush_block(&mut self) {
        if self.failed || self.nrec == 0 {
            return;
        }
        // no allocation here: a signal handler may call this (`crate::on_signal`)
        let mut head = [0u8; 24];
        head[..8].copy_from_slice(BLOCK_MAGIC);
        head[8..16].copy_from_slice(&self.blocks.to_le_bytes());
        head[16..20].copy_from_slice(&self.nrec.to_le_bytes());
        head[20..24].copy_from_slice(&(self.buf.len() as u32).to_le_bytes());
        let mut d = Sha256::new();
        d.update(&head[8..]);
        d.update(&self.buf);
        let digest = d.finalize();
        self.chain.update(digest);
        let r = self
            .file
            .write_all(&head)
            .and_then(|_| self.file.write_all(&self.buf))
            .and_then(|_| self.file.write_all(&digest));
        if let Err(e) = r {
            self.fail("writing a block", e);
        }
        self.blocks += 1;
        self.buf.clear();
        self.nrec = 0;
    }

    /// The last block and the trailer: the capture is complete.
    pub(crate) fn finish(&mut self) {
        self.flush_block();
        if self.failed {
            return;
        }
        let mut t = Vec::with_capacity(56);
        t.extend_from_slice(TRAILER_MAGIC);
        t.extend_from_slice(&self.blocks.to_le_bytes());
        t.extend_from_slice(&self.records.to_le_bytes());
        t.extend_from_slice(&self.chain.clone().finalize());
        if let Err(e) = self.file.write_all(&t).and_then(|_| self.file.sync_all()) {
            self.fail("writing the trailer", e);
        }
        self.failed = true; // nothing after the trailer
    }

    /// A clock window's samples (see `crate::pingpong`).
    pub(crate) fn clock_window(&mut self, window: u8, samples: &[[u64; 3]]) {
        let mut p = Vec::with_capacity(1 + 24 * samples.len());
        p.push(window);
        for s in samples {
            for t in s {
                p.extend_from_slice(&t.to_le_bytes());
            }
        }
        self.record(REC_CLOCK, &p);
    }

    pub(crate) fn abort(&mut self, code: c_int) {
        let mut p = Vec::with_capacity(12);
        p.extend_from_slice(&code.to_le_bytes());
        p.extend_from_slice(&now_ns().to_le_bytes());
        self.record(REC_ABORT, &p);
        self.flush_block();
        let _ = self.file.sync_all();
    }

    /// The id of a communicator, recording its members at first sight.
    fn comm_id(&mut self, comm: ffi::MPI_Comm) -> u32 {
        let key = comm.0 as usize;
        if let Some(id) = self.comms.get(&key) {
            return *id;
        }
        let (members, inter) = comm_members(comm);
        let id = self.next_comm;
        self.next_comm += 1;
        let ordinal = {
            let o = self.ordinals.entry(members.clone()).or_insert(0);
            *o += 1;
            *o - 1
        };
        let mut p = Vec::with_capacity(9 + 4 * members.len());
        p.extend_from_slice(&id.to_le_bytes());
        p.push(inter as u8);
        p.extend_from_slice(&ordinal.to_le_bytes());
        for m in &members {
            p.extend_from_slice(&m.to_le_bytes());
        }
        self.record(REC_COMM, &p);
        self.comms.insert(key, id);
        self.members.insert(id, members);
        id
    }

    /// A communicator just created: its members recorded now.
    pub(crate) fn note_comm(&mut self, comm: ffi::MPI_Comm) {
        self.comm_id(comm);
    }

    /// A communicator about to be freed: its id goes (the handle may come back as another communicator).
    pub(crate) fn comm_freed(&mut self, comm: ffi::MPI_Comm, t_ns: u64) {
        if let Some(id) = self.comms.remove(&(comm.0 as usize)) {
            let mut p = Vec::with_capacity(12);
            p.extend_from_slice(&id.to_le_bytes());
            p.extend_from_slice(&t_ns.to_le_bytes());
            self.record(REC_COMM_FREE, &p);
        }
    }

    /// A rank of `comm` as a world rank (negative values, MPI_ANY_SOURCE and MPI_PROC_NULL, stay as they are).
    fn world_rank(&mut self, comm: ffi::MPI_Comm, r: c_int) -> i32 {
        let id = self.comm_id(comm);
        self.world_rank_of(id, r)
    }

    /// As [`Self::world_rank`], by communicator id.
    fn world_rank_of(&self, comm_id: u32, r: c_int) -> i32 {
        if r < 0 {
            return r;
        }
        match self.members.get(&comm_id) {
            Some(m) => m.get(r as usize).map(|&w| w as i32).unwrap_or(r),
            None => r,
        }
    }

    fn dtype_id(&mut self, dt: ffi::MPI_Datatype) -> u16 {
        let key = dt.0 as usize;
        if let Some(id) = self.dtypes.get(&key) {
            return *id;
        }
        let id = (self.dtypes.len() + 1).min(u16::MAX as usize) as u16;
        let mut size: c_int = -1;
        let mut name = [0 as c_char; ffi::MPI_MAX_OBJECT_NAME as usize + 1];
        let mut len: c_int = 0;
        // SAFETY: the handle came from the application's own call; both outputs are valid locals
        // (`name` holds MPI_MAX_OBJECT_NAME characters and a terminator).
        unsafe {
            ffi::PMPI_Type_size(dt, &mut size);
            ffi::PMPI_Type_get_name(dt, name.as_mut_ptr(), &mut len);
        }
        let len = (len.max(0) as usize).min(ffi::MPI_MAX_OBJECT_NAME as usize);
        let mut p = Vec::with_capacity(6 + len);
        p.extend_from_slice(&id.to_le_bytes());
        p.extend_from_slice(&size.to_le_bytes());
        p.extend(name[..len].iter().map(|&c| c as u8));
        self.record(REC_DTYPE, &p);
        if id < u16::MAX {
            self.dtypes.insert(key, id);
        }
        id
    }

    fn op_id(&mut self, op: ffi::MPI_Op) -> u16 {
        let key = op.0 as usize;
        if let Some(id) = self.ops.get(&key) {
            return *id;
        }
        let id = (self.ops.len() + 1).min(u16::MAX as usize) as u16;
        let name = op_name(op);
        let mut p = Vec::with_capacity(2 + name.len());
        p.extend_from_slice(&id.to_le_bytes());
        p.extend_from_slice(name.as_bytes());
        self.record(REC_OP, &p);
        if id < u16::MAX {
            self.ops.insert(key, id);
        }
        id
    }

    /// A request completed and freed by the library: its handle may be reused.
    pub(crate) fn request_gone(&mut self, r: ffi::MPI_Request) {
        self.requests.remove(&(r.0 as usize));
    }

    pub(crate) fn call(&mut self, c: &Call) {
        if self.failed {
            return;
        }
        let comm = c.comm.map(|m| self.comm_id(m)).unwrap_or(0);
        let world = |s: &mut Self, r: Option<c_int>| match (c.comm, r) {
            (_, None) => NONE,
            (Some(m), Some(r)) => s.world_rank(m, r),
            (None, Some(r)) => r,
        };
        let peer = world(self, c.peer);
        let peer2 = world(self, c.peer2);
        let dt_send = c.dt_send.map(|d| self.dtype_id(d)).unwrap_or(0);
        let dt_recv = c.dt_recv.map(|d| self.dtype_id(d)).unwrap_or(0);
        let op = c.op.map(|o| self.op_id(o)).unwrap_or(0);
        let request = match c.new_request {
            Some(r) if !r.0.is_null() => {
                let id = self.next_request;
                self.next_request += 1;
                self.requests.insert(r.0 as usize, (id, comm));
                id
            }
            _ => c.request_id,
        };
        let mut p = [0u8; CALL_LEN];
        let put = |p: &mut [u8; CALL_LEN], off: usize, b: &[u8]| p[off..off + b.len()].copy_from_slice(b);
        put(&mut p, call_off::KIND, &c.kind.to_le_bytes());
        put(&mut p, call_off::FLAGS, &(c.flags | if c.ret != 0 { FLAG_ERROR } else { 0 }).to_le_bytes());
        put(&mut p, call_off::COMM, &comm.to_le_bytes());
        put(&mut p, call_off::T_ISSUE, &c.t_issue.to_le_bytes());
        put(&mut p, call_off::T_DONE, &c.t_done.to_le_bytes());
        put(&mut p, call_off::COUNT_SEND, &c.count_send.to_le_bytes());
        put(&mut p, call_off::COUNT_RECV, &c.count_recv.to_le_bytes());
        put(&mut p, call_off::DT_SEND, &dt_send.to_le_bytes());
        put(&mut p, call_off::DT_RECV, &dt_recv.to_le_bytes());
        put(&mut p, call_off::OP, &op.to_le_bytes());
        put(&mut p, call_off::PEER, &peer.to_le_bytes());
        put(&mut p, call_off::TAG, &c.tag.unwrap_or(NONE).to_le_bytes());
        put(&mut p, call_off::REQUEST, &request.to_le_bytes());
        put(&mut p, call_off::RET, &c.ret.to_le_bytes());
        put(&mut p, call_off::N, &c.n.to_le_bytes());
        put(&mut p, call_off::PEER2, &peer2.to_le_bytes());
        put(&mut p, call_off::TAG2, &c.tag2.unwrap_or(NONE).to_le_bytes());
        self.record(REC_CALL, &p);
        for (side, counts) in [(COUNTS_SEND, &c.send_counts), (COUNTS_RECV, &c.recv_counts)] {
            let Some(counts) = counts else { continue };
            // a communicator too large for one record leaves the call without its counts (the reader says so)
            if 1 + 4 * counts.len() > BLOCK_BYTES - 4 {
                continue;
            }
            let mut q = Vec::with_capacity(1 + 4 * counts.len());
            q.push(side);
            for k in counts {
                q.extend_from_slice(&k.to_le_bytes());
            }
            self.record(REC_COUNTS, &q);
        }
    }

    /// A completion found by the call just recorded: `comm_id` (the request's, from
    /// [`Self::request`]) resolves the source to a world rank.
    pub(crate) fn done(&mut self, d: &Done, t_ns: u64, comm_id: u32) {
        if self.failed {
            return;
        }
        let (source, flags) = match d.source {
            Some(s) => (self.world_rank_of(comm_id, s), 0u32),
            None => (NONE, 1),
        };
        let mut p = [0u8; 32];
        p[0..8].copy_from_slice(&d.request_id.to_le_bytes());
        p[8..16].copy_from_slice(&t_ns.to_le_bytes());
        p[16..20].copy_from_slice(&source.to_le_bytes());
        p[20..24].copy_from_slice(&d.tag.unwrap_or(NONE).to_le_bytes());
        p[24..28].copy_from_slice(&d.index.to_le_bytes());
        p[28..32].copy_from_slice(&flags.to_le_bytes());
        self.record(REC_DONE, &p);
    }

    /// A live request's id and its communicator's id ((0, 0) when the library
    /// handed it out unseen, e.g. a persistent one).
    pub(crate) fn request(&self, r: ffi::MPI_Request) -> (u64, u32) {
        self.requests.get(&(r.0 as usize)).copied().unwrap_or((0, 0))
    }
}

/// Members of `comm` as world ranks (its local group for an intercommunicator), and whether it is one.
fn comm_members(comm: ffi::MPI_Comm) -> (Vec<u32>, bool) {
    let mut size: c_int = 0;
    let mut inter: c_int = 0;
    let mut group = ffi::MPI_Group(std::ptr::null_mut());
    let mut world_group = ffi::MPI_Group(std::ptr::null_mut());
    // SAFETY: `comm` is a handle the application passed to a call that
    // succeeded; every output is a valid local; the groups are freed below.
    unsafe {
        ffi::PMPI_Comm_test_inter(comm, &mut inter);
        ffi::PMPI_Comm_size(comm, &mut size);
        ffi::PMPI_Comm_group(comm, &mut group);
        ffi::PMPI_Comm_group(ffi::RSMPI_COMM_WORLD, &mut world_group);
    }
    let n = size.max(0) as usize;
    let local: Vec<c_int> = (0..n as c_int).collect();
    let mut world = vec![0 as c_int; n];
    // SAFETY: both arrays hold `n` ranks; the groups were made above.
    unsafe {
        ffi::PMPI_Group_translate_ranks(group, n as c_int, local.as_ptr(), world_group, world.as_mut_ptr());
        ffi::PMPI_Group_free(&mut group);
        ffi::PMPI_Group_free(&mut world_group);
    }
    (world.into_iter().map(|w| w.max(0) as u32).collect(), inter != 0)
}

/// The name of a predefined reduction, or `user` for one the application made.
fn op_name(op: ffi::MPI_Op) -> &'static str {
    // SAFETY: reading the rsmpi shim's constant handles, initialized at load time.
    let named = unsafe {
        [
            (ffi::RSMPI_SUM, "sum"),
            (ffi::RSMPI_MAX, "max"),
            (ffi::RSMPI_MIN, "min"),
            (ffi::RSMPI_PROD, "prod"),
            (ffi::RSMPI_LAND, "land"),
            (ffi::RSMPI_LOR, "lor"),
            (ffi::RSMPI_LXOR, "lxor"),
            (ffi::RSMPI_BAND, "band"),
            (ffi::RSMPI_BOR, "bor"),
            (ffi::RSMPI_BXOR, "bxor"),
        ]
    };
    named.iter().find(|(h, _)| *h == op).map(|(_, n)| *n).unwrap_or("user")
}

/// Run `f` on the open capture, if any (nothing before `MPI_Init` or after `MPI_Finalize`).
#[inline]
pub(crate) fn with<F: FnOnce(&mut Capture)>(f: F) {
    if let Ok(mut g) = STATE.lock() {
        if let Some(c) = g.as_mut() {
            f(c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u64_at(b: &[u8], o: usize) -> u64 {
        u64::from_le_bytes(b[o..o + 8].try_into().unwrap())
    }

    /// Many calls make several blocks, each digested, in sequence, and a trailer that counts them.
    #[test]
    fn records_stream_in_digested_blocks_and_a_trailer_counts_them() {
        let d = std::env::temp_dir().join(format!("ccap-test-{}", std::process::id()));
        let _ = std::fs::remove_file(&d);
        let mut c = Capture::create(&d, b"{}").unwrap();
        let n = 3 * BLOCK_BYTES / (CALL_LEN + 4) + 7;
        for i in 0..n {
            c.call(&Call { kind: (i % 3) as u16, t_issue: i as u64, t_done: i as u64 + 1, ..Default::default() });
        }
        c.finish();
        // a second capture of the same file is refused, never overwritten
        assert!(Capture::create(&d, b"{}").is_err());
        let b = std::fs::read(&d).unwrap();
        std::fs::remove_file(&d).unwrap();
        assert_eq!(&b[..8], MAGIC);
        let mut pos = 16 + 2 + 32;
        let (mut blocks, mut records, mut chain) = (0u64, 0u64, Sha256::new());
        while &b[pos..pos + 8] == BLOCK_MAGIC {
            assert_eq!(u64_at(&b, pos + 8), blocks, "blocks in sequence");
            let (nrec, len) = (
                u32::from_le_bytes(b[pos + 16..pos + 20].try_into().unwrap()),
                u32::from_le_bytes(b[pos + 20..pos + 24].try_into().unwrap()) as usize,
            );
            assert!(len <= BLOCK_BYTES);
            let digest = Sha256::new().chain_update(&b[pos + 8..pos + 24 + len]).finalize();
            assert_eq!(&b[pos + 24 + len..pos + 56 + len], digest.as_slice());
            chain.update(digest);
            records += u64::from(nrec);
            blocks += 1;
            pos += 56 + len;
        }
        assert!(blocks >= 3, "{blocks} blocks for {n} calls");
        assert_eq!(&b[pos..pos + 8], TRAILER_MAGIC);
        assert_eq!((u64_at(&b, pos + 8), u64_at(&b, pos + 16), records), (blocks, n as u64, n as u64));
        assert_eq!(&b[pos + 24..], chain.finalize().as_slice());
    }

    #[test]
    fn every_kind_name_has_its_number() {
        for (i, k) in CALLS.iter().enumerate() {
            assert_eq!(kind(k) as usize, i);
        }
    }
}
