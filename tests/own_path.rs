//! Every kind of the collective table through the CPU backend's own path
//! (`Backend::enqueue`, `wait`, `check`): world collectives under real
//! mpirun on 3 ranks (odd, so that a ring and a split are not symmetric),
//! f32 and bf16, each rank's result checked against what every rank's
//! contributions make of it, and a spoiled result failing its check. The
//! CUDA backend's walk is `gpu_cuda.rs::cuda_own_path_runs_every_kind_of_the_table_checked`.
mod common;
use commcanary::backend::cpu::CpuBackend;
use common::*;

/// One rank's side, run by [`every_kind_of_the_table_runs_on_the_cpu_backends_own_path`]
/// under mpirun (a no-op when run alone).
#[test]
#[ignore = "one rank's side: the outer test runs it under mpirun"]
fn own_path_rank() {
    own_path_inner(|world, plan| CpuBackend::new(world, &plan).unwrap());
}

#[test]
fn every_kind_of_the_table_runs_on_the_cpu_backends_own_path() {
    own_path_mpirun("own_path_rank", 3);
}
