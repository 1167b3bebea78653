//! `doctor` on a machine without GPU/NCCL: a report, not a panic; explicit failures exit non-zero.
mod common;
use common::*;

#[test]
fn doctor_reports_without_gpu_and_refuses_a_bogus_explicit_library() {
    let v: serde_json::Value = serde_json::from_str(&ok(&cc(&["doctor", "--json"]))).unwrap();
    assert!(v["mpi_library"].as_str().unwrap_or("").contains("Open MPI"), "{v}");
    assert!(!v["mpi_library"].as_str().unwrap().contains('\0'));
    if v["cuda"].is_null() {
        // no driver library, or a driver with no device this process may use
        // (a GPU node with CUDA_VISIBLE_DEVICES empty): either is named
        let why = v["cuda_unavailable"].as_str().unwrap();
        assert!(why.contains("libcuda") || why.contains("cuInit"), "{v}");
    }
    let o = cc(&["doctor", "--nccl-lib", "/nonexistent/libnccl.so.2"]);
    assert!(!o.status.success());
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("/nonexistent/libnccl.so.2 FAILED"), "{out}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("panicked"), "{err}");
}
