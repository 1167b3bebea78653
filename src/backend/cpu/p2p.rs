//! The cpu backend's replay of an MPI capture's point-to-point operations
//! (`mpi.p2p`): consumes one rank's [`P2pPlan`] and the communicators of
//! the trace executor; runs its steps in recorded call order on MPI
//! (`MPI_Isend`/`MPI_Irecv` where the application posted nonblocking
//! operations, `MPI_Waitall` on them at the call that completed them,
//! `MPI_Send`, `MPI_Recv` and `MPI_Sendrecv` where it blocked), each with
//! its recorded bytes (`MPI_BYTE`) on its communicator, peer and tag, so that
//! MPI matches them as it matched the application's; with `--check`,
//! checks every receive's length and bytes against the send it matched. Refuses a message past MPI's `int` count.
use crate::backend::mpi_deadline;
use crate::core::limits;
use crate::evidence::commtrace::p2p::{P2pPlan, P2pStep, ANY_SOURCE, ANY_TAG, PROC_NULL};
use anyhow::{bail, Context, Result};
use mpi::ffi;

/// Byte `j` of the message operation `op` of `sender` carries.
fn pattern(sender: u32, op: usize, j: usize) -> u8 {
    ((sender as usize).wrapping_mul(131).wrapping_add(op.wrapping_mul(31)).wrapping_add(j) % 251) as u8
}

/// One rank's point-to-point program, prepared.
pub struct CpuP2p {
    rank: u32,
    plan: P2pPlan,
    comms: Vec<ffi::MPI_Comm>,
    bufs: Vec<Vec<u8>>,
    reqs: Vec<ffi::MPI_Request>,
    got: Vec<Option<u64>>,
    next: usize,
    /// How long a wait on nonblocking operations may last before the replay
    /// fails with `COLLECTIVE_TIMEOUT` (`--collective-timeout-s`).
    pub limit: std::time::Duration,
}

fn mpi_int(n: u64, what: &str) -> Result<i32> {
    i32::try_from(n).with_context(|| format!("{what}: {n} bytes is past MPI's int count"))
}

impl CpuP2p {
    /// Prepare `plan` (this rank's): every buffer made and every send filled
    /// before the replay; `comm` gives a trace group's communicator.
    pub fn new(rank: u32, plan: P2pPlan, comm: &dyn Fn(&str) -> Result<ffi::MPI_Comm>) -> Result<Self> {
        let mut comms = Vec::with_capacity(plan.ops.len());
        let mut bufs = Vec::with_capacity(plan.ops.len());
        for (i, o) in plan.ops.iter().enumerate() {
            mpi_int(o.bytes, &format!("rank {rank}, point-to-point operation {i}"))?;
            comms.push(comm(&o.group).with_context(|| format!("rank {rank}, point-to-point operation {i}"))?);
            bufs.push(if o.send {
                (0..o.bytes as usize).map(|j| pattern(rank, i, j)).collect()
            } else {
                vec![0u8; o.bytes as usize]
            });
        }
        // SAFETY: reading an immutable handle constant that rsmpi's C shim initialises before MPI_Init returns.
        let null = unsafe { ffi::RSMPI_REQUEST_NULL };
        let n = plan.ops.len();
        let limit = std::time::Duration::from_secs_f64(limits::DEFAULT_COLLECTIVE_TIMEOUT_S);
        Ok(Self { rank, plan, comms, bufs, reqs: vec![null; n], got: vec![None; n], next: 0, limit })
    }

    /// Run step `k`, which must be the next (the phases run the steps one
    /// by one, each paced by its recorded gap).
    pub fn run_step(&mut self, k: usize) -> Result<()> {
        if k != self.next {
            bail!("internal: rank {}: point-to-point step {k} asked for, step {} is next", self.rank, self.next);
        }
        let (call, step) = self
            .plan
            .steps
            .get(k)
            .cloned()
            .with_context(|| format!("internal: rank {}: no point-to-point step {k}", self.rank))?;
        self.step(&step).with_context(|| format!("rank {}, point-to-point step {k} (call {call})", self.rank))?;
        self.next += 1;
        Ok(())
    }

    /// Between the warm-up and the timed pass: clear what was received and the counters.
    pub fn reset(&mut self) {
        for (o, b) in self.plan.ops.iter().zip(&mut self.bufs) {
            if !o.send {
                b.iter_mut().for_each(|x| *x = 0);
            }
        }
        self.got.iter_mut().for_each(|g| *g = None);
        self.next = 0;
    }

    fn peer_tag(&self, i: usize) -> (i32, i32) {
        let o = &self.plan.ops[i];
        // SAFETY: reading immutable constants that rsmpi's C shim initialises before MPI_Init returns.
        let (any_source, any_tag, proc_null) =
            unsafe { (ffi::RSMPI_ANY_SOURCE, ffi::RSMPI_ANY_TAG, ffi::RSMPI_PROC_NULL) };
        let peer = match o.peer {
            ANY_SOURCE => any_source,
            PROC_NULL => proc_null,
            p => p,
        };
        (peer, if o.tag == ANY_TAG { any_tag } else { o.tag })
    }

    fn received(&mut self, i: usize, status: &ffi::MPI_Status) -> Result<()> {
        let mut n: i32 = 0;
        // SAFETY: a status MPI filled for a completed receive, an int to write the count into.
        let rc = unsafe { ffi::MPI_Get_count(status, ffi::RSMPI_UINT8_T, &mut n) };
        if rc != 0 {
            bail!("MPI_Get_count failed (MPI error {rc})");
        }
        self.got[i] = Some(u64::try_from(n).unwrap_or(0));
        Ok(())
    }

    fn step(&mut self, step: &P2pStep) -> Result<()> {
        // Every call below passes an operation's own buffer, made in `new`
        // with exactly the count passed and never resized; a nonblocking
        // operation's buffer and request live in `self` until its
        // `MPI_Waitall`, which every pass reaches (`finish_pass`).
        // SAFETY: reading an immutable handle constant that rsmpi's C shim initialises before MPI_Init returns.
        let byte = unsafe { ffi::RSMPI_UINT8_T };
        match *step {
            P2pStep::Post(i) => {
                let (peer, tag) = self.peer_tag(i);
                let n = self.bufs[i].len() as i32;
                let (buf, comm, req) = (self.bufs[i].as_mut_ptr(), self.comms[i], &mut self.reqs[i]);
                let rc = if self.plan.ops[i].send {
                    // SAFETY: buffers, counts and requests as described at the top of `step`; handles from MPI.
                    unsafe { ffi::MPI_Isend(buf.cast_const().cast(), n, byte, peer, tag, comm, req) }
                } else {
                    // SAFETY: buffers, counts and requests as described at the top of `step`; handles from MPI.
                    unsafe { ffi::MPI_Irecv(buf.cast(), n, byte, peer, tag, comm, req) }
                };
                if rc != 0 {
                    bail!(
                        "{} to or from {peer} tag {tag} failed (MPI error {rc})",
                        if self.plan.ops[i].send { "MPI_Isend" } else { "MPI_Irecv" }
                    );
                }
            }
            P2pStep::Blocking(i) => {
                let (peer, tag) = self.peer_tag(i);
                let n = self.bufs[i].len() as i32;
                if self.plan.ops[i].send {
                    // SAFETY: buffers, counts and requests as described at the top of `step`; handles from MPI.
                    let rc = unsafe { ffi::MPI_Send(self.bufs[i].as_ptr().cast(), n, byte, peer, tag, self.comms[i]) };
                    if rc != 0 {
                        bail!("MPI_Send to {peer} tag {tag} failed (MPI error {rc})");
                    }
                } else {
                    // SAFETY: MPI_Status is a plain C struct, for which all zero bytes are a valid value.
                    let mut st: ffi::MPI_Status = unsafe { std::mem::zeroed() };
                    // SAFETY: buffers, counts and requests as described at the top of `step`; handles from MPI.
                    let rc = unsafe {
                        ffi::MPI_Recv(self.bufs[i].as_mut_ptr().cast(), n, byte, peer, tag, self.comms[i], &mut st)
                    };
                    if rc != 0 {
                        bail!("MPI_Recv from {peer} tag {tag} failed (MPI error {rc})");
                    }
                    self.received(i, &st)?;
                }
            }
            P2pStep::SendRecv(a, b) => {
                let ((pa, ta), (pb, tb)) = (self.peer_tag(a), self.peer_tag(b));
                if self.comms[a] != self.comms[b] {
                    bail!("a Sendrecv whose send and receive are on different communicators");
                }
                let (na, nb) = (self.bufs[a].len() as i32, self.bufs[b].len() as i32);
                // SAFETY: MPI_Status is a plain C struct, for which all zero bytes are a valid value.
                let mut st: ffi::MPI_Status = unsafe { std::mem::zeroed() };
                let (send, comm) = (self.bufs[a].as_ptr().cast(), self.comms[a]);
                let recv = self.bufs[b].as_mut_ptr().cast();
                // SAFETY: buffers, counts and requests as described at the top of `step`; handles from MPI.
                let rc = unsafe { ffi::MPI_Sendrecv(send, na, byte, pa, ta, recv, nb, byte, pb, tb, comm, &mut st) };
                if rc != 0 {
                    bail!("MPI_Sendrecv to {pa} tag {ta}, from {pb} tag {tb} failed (MPI error {rc})");
                }
                self.received(b, &st)?;
            }
            P2pStep::Complete(ref ops) => {
                let mut reqs: Vec<ffi::MPI_Request> = ops.iter().map(|&i| self.reqs[i]).collect();
                // SAFETY: MPI_Status is a plain C struct, for which all zero bytes are a valid value.
                let mut sts: Vec<ffi::MPI_Status> = (0..ops.len()).map(|_| unsafe { std::mem::zeroed() }).collect();
                // bounded by `limit`: an operation the application never
                // completed may never complete here either, and a replay must
                // end with a reason, not hang
                let what = format!("wait for {} point-to-point operations (first: operation {})", ops.len(), ops[0]);
                let phase = format!("rank {}'s point-to-point replay, step {}", self.rank, self.next);
                let op = mpi_deadline::Op { what: &what, phase: &phase, peer: None };
                mpi_deadline::poll_all(&mut reqs, &mut sts, self.limit, &op)?;
                for (k, &i) in ops.iter().enumerate() {
                    self.reqs[i] = reqs[k];
                    if !self.plan.ops[i].send {
                        self.received(i, &sts[k])?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Check every matched receive's length and bytes against its send;
    /// returns how many were checked. With `corrupt` (the negative control)
    /// the first byte of each is spoiled first.
    pub fn check(&self, corrupt: bool) -> Result<u64> {
        let mut checked = 0u64;
        for (i, o) in self.plan.ops.iter().enumerate().filter(|(_, o)| !o.send) {
            let Some(m) = o.matched else { continue };
            let got = self.got[i].with_context(|| {
                format!("--check: rank {}, point-to-point operation {i}: never completed", self.rank)
            })?;
            if got != m.bytes {
                bail!(
                    "--check: rank {}, point-to-point receive {i} from rank {}: {got} bytes arrived, its matching \
                        send has {}",
                    self.rank,
                    m.sender,
                    m.bytes
                );
            }
            let byte = |j: usize| if corrupt && j == 0 { self.bufs[i][j].wrapping_add(1) } else { self.bufs[i][j] };
            if let Some(j) = (0..got as usize).find(|&j| byte(j) != pattern(m.sender, m.op, j)) {
                bail!(
                    "--check: rank {}, point-to-point receive {i} from rank {}: byte {j} is {}, its matching send \
                        (operation {}) wrote {}",
                    self.rank,
                    m.sender,
                    byte(j),
                    m.op,
                    pattern(m.sender, m.op, j)
                );
            }
            checked += 1;
        }
        Ok(checked)
    }
}
