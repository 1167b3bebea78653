//! CPU backend: MPI all-reduce of host buffers, CPU matrix products,
//! `CLOCK_MONOTONIC` timings (SPEC §1).
//!
//! The collective is `MPI_Iallreduce` followed by `MPI_Wait`, called through
//! rsmpi's raw FFI so the request can outlive the issuing call: issue and wait
//! placement in the phases is therefore real. Whether the reduction progresses
//! while the host computes depends on the MPI library (OpenMPI progresses
//! mostly inside MPI calls); the shards record what happened, not what was
//! hoped. The configuration space on CPU is OpenMPI's `coll_tuned` all-reduce
//! algorithm (`OMPI_MCA_coll_tuned_use_dynamic_rules=1`,
//! `OMPI_MCA_coll_tuned_allreduce_algorithm=N`), recorded in the identity.
use super::{contribution, Backend, DeviceInterval, PassTimings};
use crate::shard::{BackendKind, DeviceIdentity, Unmeasured};
use crate::workload::GemmShape;
use anyhow::{bail, Result};
use mpi::ffi;
use mpi::raw::AsRaw;
use mpi::topology::{Communicator, SimpleCommunicator};
use std::os::raw::{c_int, c_void};

/// CPU backend state of one rank.
pub struct CpuBackend {
    comm: SimpleCommunicator,
    world_size: u32,
    send: Vec<f32>,
    recv: Vec<f32>,
    pending: Option<(ffi::MPI_Request, u64)>,
    issued_in_pass: usize,
    gemm: GemmShape,
    a: Vec<f32>,
    b: Vec<f32>,
    c: Vec<f32>,
    mem_src: Vec<u8>,
    mem_dst: Vec<u8>,
    /// A wait longer than this fails the job (a stopped or dead peer), if set.
    timeout: Option<std::time::Duration>,
}

impl Drop for CpuBackend {
    /// An early return between `MPI_Iallreduce` and its wait leaves MPI free
    /// to write `recv` (and read `send`) later: if one last `MPI_Test` does
    /// not complete the request, the two buffers are leaked rather than freed
    /// under MPI (the process is ending on an error anyway).
    fn drop(&mut self) {
        if let Some((mut req, _)) = self.pending.take() {
            let mut done: c_int = 0;
            // SAFETY: req came from MPI_Iallreduce and was never completed.
            let rc = unsafe { ffi::MPI_Test(&mut req, &mut done, ffi::RSMPI_STATUS_IGNORE) };
            if rc != 0 || done == 0 {
                std::mem::forget(std::mem::take(&mut self.send));
                std::mem::forget(std::mem::take(&mut self.recv));
            }
        }
    }
}

impl CpuBackend {
    /// Create on a duplicate of `world` (isolating our traffic), with buffers
    /// for `max_bytes`, a `gemm` product and `membound_bytes` copies.
    pub fn new(world: &SimpleCommunicator, max_bytes: u64, gemm: GemmShape, membound_bytes: u64) -> Result<Self> {
        let comm = world.duplicate();
        let rank = comm.rank() as u32;
        let elems = usize::try_from(max_bytes / 4)?;
        if i32::try_from(elems).is_err() {
            bail!("message of {max_bytes} bytes exceeds MPI's int element count");
        }
        let send: Vec<f32> = (0..elems).map(|i| contribution(rank, i)).collect();
        let (m, n, k) = (gemm.m as usize, gemm.n as usize, gemm.k as usize);
        let a: Vec<f32> = (0..m * k).map(|i| ((i % 7) as f32) * 0.25).collect();
        let b: Vec<f32> = (0..k * n).map(|i| ((i % 5) as f32) * 0.5).collect();
        let mb = usize::try_from(membound_bytes)?;
        Ok(Self {
            world_size: comm.size() as u32,
            comm,
            send,
            recv: vec![0.0; elems],
            pending: None,
            issued_in_pass: 0,
            gemm,
            a,
            b,
            c: vec![0.0; m * n],
            mem_src: vec![1u8; mb],
            mem_dst: vec![0u8; mb],
            timeout: None,
        })
    }

    /// Fail a wait that lasts longer than `t` (`--collective-timeout-s`): a
    /// stopped or vanished peer then ends the job with a message instead of
    /// leaving every other rank spinning.
    pub fn with_timeout(mut self, t: std::time::Duration) -> Self {
        self.timeout = Some(t);
        self
    }

    fn gemm_once(&mut self) {
        let (m, n, k) = (self.gemm.m as usize, self.gemm.n as usize, self.gemm.k as usize);
        self.c.iter_mut().for_each(|x| *x = 0.0);
        for i in 0..m {
            let crow = &mut self.c[i * n..(i + 1) * n];
            for p in 0..k {
                let aip = self.a[i * k + p];
                let brow = &self.b[p * n..(p + 1) * n];
                for (cj, bj) in crow.iter_mut().zip(brow) {
                    *cj += aip * bj;
                }
            }
        }
        std::hint::black_box(&self.c);
    }
}

impl Backend for CpuBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Cpu
    }

    fn device(&self) -> DeviceIdentity {
        DeviceIdentity {
            backend: BackendKind::Cpu,
            name: crate::identity::cpu_model().unwrap_or_else(|| "unknown CPU".into()),
            facts: vec![
                ("gemm".into(), format!("{}x{}x{} f32 (naive, single thread)", self.gemm.m, self.gemm.n, self.gemm.k)),
                ("collective".into(), "MPI_Iallreduce + MPI_Wait, MPI_FLOAT, MPI_SUM".into()),
            ],
        }
    }

    fn unmeasured(&self) -> Vec<Unmeasured> {
        ["device_start_ns", "device_end_ns"]
            .into_iter()
            .map(|f| Unmeasured {
                field: f.into(),
                reason: "the cpu backend has no device timeline; completion is only known when MPI_Wait returns".into(),
            })
            .collect()
    }

    fn issue_allreduce(&mut self, bytes: u64) -> Result<()> {
        let count = super::issue_count(self.pending.is_some(), bytes, self.send.len())?;
        let mut req: ffi::MPI_Request = unsafe { ffi::RSMPI_REQUEST_NULL };
        // SAFETY: send/recv hold at least `count` f32 and stay alive and
        // untouched until MPI_Wait in wait_allreduce (pending guards reuse).
        let rc = unsafe {
            ffi::MPI_Iallreduce(
                self.send.as_ptr() as *const c_void,
                self.recv.as_mut_ptr() as *mut c_void,
                count as c_int,
                ffi::RSMPI_FLOAT,
                ffi::RSMPI_SUM,
                self.comm.as_raw(),
                &mut req,
            )
        };
        if rc != 0 {
            bail!("MPI_Iallreduce of {bytes} bytes failed with MPI error code {rc}");
        }
        self.pending = Some((req, bytes));
        self.issued_in_pass += 1;
        Ok(())
    }

    fn wait_allreduce(&mut self) -> Result<Option<DeviceInterval>> {
        let Some((mut req, bytes)) = self.pending.take() else {
            bail!("internal: wait without an outstanding all-reduce");
        };
        let Some(limit) = self.timeout else {
            // SAFETY: req came from MPI_Iallreduce and is waited on exactly once.
            let rc = unsafe { ffi::MPI_Wait(&mut req, ffi::RSMPI_STATUS_IGNORE) };
            if rc != 0 {
                bail!("MPI_Wait on an all-reduce of {bytes} bytes failed with MPI error code {rc}");
            }
            return Ok(None);
        };
        // MPI_Test drives progress like MPI_Wait's own loop; the clock is read every 1024 tests
        let t0 = std::time::Instant::now();
        let mut spins: u32 = 0;
        loop {
            let mut done: c_int = 0;
            // SAFETY: req came from MPI_Iallreduce and is not yet complete.
            let rc = unsafe { ffi::MPI_Test(&mut req, &mut done, ffi::RSMPI_STATUS_IGNORE) };
            if rc != 0 {
                bail!("MPI_Test on an all-reduce of {bytes} bytes failed with MPI error code {rc}");
            }
            if done != 0 {
                return Ok(None);
            }
            spins = spins.wrapping_add(1);
            if spins % 1024 == 0 && t0.elapsed() > limit {
                // keep the request pending so Drop keeps its buffers away from MPI
                self.pending = Some((req, bytes));
                bail!("collective timeout: an all-reduce of {bytes} bytes did not complete within {:.1} s (--collective-timeout-s); a peer rank is stopped, dead or far behind", limit.as_secs_f64());
            }
        }
    }

    fn gemm(&mut self, units: u32) -> Result<()> {
        for _ in 0..units {
            self.gemm_once();
        }
        Ok(())
    }

    fn membound(&mut self, units: u32) -> Result<()> {
        for _ in 0..units {
            self.mem_dst.copy_from_slice(&self.mem_src);
            std::hint::black_box(&self.mem_dst);
        }
        Ok(())
    }

    fn synchronize(&mut self) -> Result<()> {
        if self.pending.is_some() {
            self.wait_allreduce()?;
        }
        Ok(())
    }

    fn mark(&mut self) -> Result<Option<usize>> {
        Ok(None)
    }

    fn finish_pass(&mut self) -> Result<PassTimings> {
        let n = std::mem::take(&mut self.issued_in_pass);
        Ok(PassTimings { collectives: vec![None; n], ..Default::default() })
    }

    fn check_last_allreduce(&mut self, bytes: u64) -> Result<super::CheckOutcome> {
        let count = (bytes / 4) as usize;
        Ok(super::verify_sum(&self.recv[..count], self.world_size))
    }

    fn corrupt_last_result(&mut self) {
        if let Some(x) = self.recv.first_mut() {
            *x += 1.0;
        }
    }
}
