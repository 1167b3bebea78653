//! Summaries of traces and replays for people: consumes a trace's
//! collectives (and a replay's records) and produces the import's per-rank
//! counts ([`render_counts`]) and the comparison of the NCCL kernel family a
//! replay ran with the one the trace recorded ([`compare_kernels`],
//! [`kernel_family`]). Refuses nothing; what is missing is counted.
use super::exec;
use super::{CollectiveKind, CommTrace, TraceCollective, TraceDtype};
use std::collections::BTreeMap;

/// Tokens of an NCCL kernel name that name the algorithm or protocol NCCL
/// chose (NCCL's `NCCL_ALGO` and `NCCL_PROTO` values as they appear in kernel
/// names, e.g. `COLLNET_DIRECT`, `NVLS_TREE`, `LL128`).
const ALGO_PROTO_TOKENS: [&str; 10] =
    ["RING", "TREE", "COLLNET", "DIRECT", "CHAIN", "NVLS", "PAT", "LL", "LL128", "SIMPLE"];

/// The NCCL kernel family of a kernel name, mangled (CUPTI) or demangled (Kineto): the
/// function's identifier without its arguments, algorithm and protocol, e.g.
/// `ncclDevKernel_AllReduce_Sum_bf16` (docs/METHODS.md, "Replay conventions").
pub(crate) fn kernel_family(name: &str) -> String {
    let mangled = name.strip_prefix("_Z").and_then(|rest| {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let len: usize = rest[..digits].parse().ok()?;
        rest.get(digits..digits + len)
    });
    let ident = mangled.unwrap_or_else(|| name.split('(').next().unwrap_or(name));
    ident.split('_').filter(|t| !ALGO_PROTO_TOKENS.contains(t)).collect::<Vec<_>>().join("_")
}

/// How the kernels a replay ran compare with the kernels the trace recorded.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct KernelComparison {
    /// Collectives with a kernel both in the trace and in the replay.
    pub compared: usize,
    /// Of those, the ones whose first kernels have the same family.
    pub same_family: usize,
    /// Collectives whose trace records a kernel but whose replay recorded none.
    pub missing_in_replay: usize,
    /// The first differing collectives: (index, trace family, replay family).
    pub differing: Vec<(u32, String, String)>,
}

/// Compare, collective by collective, the family of the first kernel the
/// replay recorded with the family of the kernel the trace recorded.
/// `None` when the replay recorded no kernels at all.
pub(crate) fn compare_kernels(colls: &[TraceCollective], records: &[exec::ExecRecord]) -> Option<KernelComparison> {
    if records.iter().all(|r| r.kernels.is_none()) {
        return None;
    }
    let mut k = KernelComparison::default();
    for r in records {
        let Some(want) = colls.get(r.index as usize).and_then(|c| c.device.as_ref()).map(|d| kernel_family(&d.kernel))
        else {
            continue;
        };
        match r.kernels.as_ref().and_then(|v| v.first()) {
            None => k.missing_in_replay += 1,
            Some(got) => {
                k.compared += 1;
                let got = kernel_family(got);
                if got == want {
                    k.same_family += 1;
                } else if k.differing.len() < 5 {
                    k.differing.push((r.index, want, got));
                }
            }
        }
    }
    Some(k)
}

/// Collectives per kind on each rank, one line per rank (for the import's report).
pub(crate) fn render_counts(t: &CommTrace) -> String {
    let mut s = String::new();
    for r in &t.ranks {
        let mut by: BTreeMap<(CollectiveKind, String, TraceDtype, u64), u64> = BTreeMap::new();
        for c in &r.collectives {
            *by.entry((c.kind, c.group.clone(), c.dtype, c.in_elems)).or_insert(0) += 1;
        }
        let parts: Vec<String> =
            by.iter().map(|((k, g, d, n), count)| format!("{count} x {} {n} {d} on {g:?}", k.name())).collect();
        s += &format!("rank {}: {}\n", r.rank, parts.join(", "));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::workload::ReduceOp;
    use crate::evidence::commtrace::DeviceSpan;

    #[test]
    fn kernel_families_drop_arguments_algorithm_and_protocol_mangled_or_not() {
        let kineto = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)";
        let cupti = "_Z43ncclDevKernel_AllReduce_Sum_bf16_TREE_LL12824ncclDevKernelArgsStorageILm4096EE";
        assert_eq!(kernel_family(kineto), "ncclDevKernel_AllReduce_Sum_bf16");
        assert_eq!(kernel_family(cupti), "ncclDevKernel_AllReduce_Sum_bf16");
        assert_eq!(
            kernel_family("_Z22ncclDevKernel_SendRecv24ncclDevKernelArgsStorageILm4096EE"),
            "ncclDevKernel_SendRecv"
        );
        assert_eq!(kernel_family("ncclDevKernel_AllGather_COLLNET_DIRECT_SIMPLE(x)"), "ncclDevKernel_AllGather");
        assert_ne!(
            kernel_family("ncclDevKernel_AllReduce_Sum_f32_RING_LL"),
            kernel_family(kineto),
            "the dtype is part of the family"
        );
        // a length past the name's end is not a mangled identifier: the name is kept
        assert_eq!(kernel_family("_Z99short"), "_Z99short");
    }

    #[test]
    fn kernel_comparison_counts_matches_differences_and_missing_kernels() {
        let mut c = TraceCollective::plain(CollectiveKind::AllReduce, "allreduce", "0", TraceDtype::Bf16, 8);
        c.device =
            Some(DeviceSpan { start_ns: 0, end_ns: 1, kernel: "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(x)".into() });
        let colls = vec![c.clone(), c.clone(), c];
        let rec = |i: u32, k: Option<Vec<&str>>| {
            let mut r = exec::ExecRecord::untimed(i as usize, &colls[0], 0, (ReduceOp::Sum, "default"), false, 16);
            r.kernels = k.map(|v| v.into_iter().map(String::from).collect());
            r
        };
        assert_eq!(compare_kernels(&colls, &[rec(0, None)]), None, "nothing recorded: nothing compared");
        let got = compare_kernels(
            &colls,
            &[
                rec(0, Some(vec!["_Z40ncclDevKernel_AllReduce_Sum_bf16_TREE_LL24ncclDevKernelArgsStorageILm4096EE"])),
                rec(1, Some(vec!["ncclDevKernel_AllReduce_Max_bf16_RING_LL"])),
                rec(2, Some(vec![])),
            ],
        )
        .unwrap();
        assert_eq!((got.compared, got.same_family, got.missing_in_replay), (2, 1, 1));
        assert_eq!(
            got.differing,
            vec![(1, "ncclDevKernel_AllReduce_Sum_bf16".to_string(), "ncclDevKernel_AllReduce_Max_bf16".to_string())]
        );
    }
}
