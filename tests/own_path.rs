//! Every kind of the collective table through the CPU backend's own path
//! (`Backend::issue`, `wait`, `check_last`): world collectives under real
//! mpirun on 3 ranks (odd, so that a ring and a split are not symmetric),
//! f32 and bf16, each rank's result checked against what every rank's
//! contributions make of it, and a spoiled result failing its check. The
//! CUDA backend's walk is `gpu_cuda.rs::cuda_own_path_runs_every_kind_of_the_table_checked`.
mod common;
use commcanary::backend::{cpu::CpuBackend, BackendPlan};
use commcanary::evidence::shard::Dtype;
use common::*;
use mpi::topology::Communicator;

/// One rank's side, run by [`every_kind_of_the_table_runs_on_the_cpu_backends_own_path`]
/// under mpirun (a no-op when run alone).
#[test]
#[ignore = "one rank's side: the outer test runs it under mpirun"]
fn own_path_rank() {
    if std::env::var(OWN_PATH_INNER).is_err() {
        return;
    }
    let universe = mpi::initialize().expect("MPI initialises once");
    let world = universe.world();
    let (n, rank) = (world.size() as u32, world.rank() as u32);
    for dtype in [Dtype::F32, Dtype::Bf16] {
        let plan = BackendPlan { max_bytes: 1 << 16, dtype, gemms: vec![], weight_sets: 1, membound_bytes: 0 };
        let mut b = CpuBackend::new(&world, &plan).unwrap();
        for l in own_path_walk(&mut b, n, rank, dtype) {
            println!("own-path rank={rank} {l}");
        }
    }
}

#[test]
fn every_kind_of_the_table_runs_on_the_cpu_backends_own_path() {
    let exe = std::env::current_exe().unwrap();
    let o = std::process::Command::new("mpirun")
        .args(["--oversubscribe", "-n", "3"])
        .arg(&exe)
        .args(["--exact", "own_path_rank", "--ignored", "--nocapture", "--test-threads", "1"])
        .env(OWN_PATH_INNER, "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("OMPI_MCA_rmaps_base_oversubscribe", "1")
        .output()
        .expect("mpirun must be installed (scripts/setup.sh installs it)");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&o.stderr));
    assert_own_path_walks(&stdout, 3, &[Dtype::F32, Dtype::Bf16]);
}
