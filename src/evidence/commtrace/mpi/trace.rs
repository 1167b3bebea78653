//! The communication trace of a checked capture ([`to_trace`]). Consumes an [`MpiCapture`]; fits
//! each rank's clock against rank 0's from its ping-pong windows, maps every call (`collective`,
//! `point_to_point`), leaves out for `--for-phases` what the phases cannot run, cuts what not every
//! member recorded or members disagree on (`cut`), and produces a [`CommTrace`] with its `mpi`
//! section ([`MpiSummary`]): every call by kind, what is left out and why. Refuses, as every
//! importer does, ranks, groups or collectives that disagree.
use super::collective::{collective_of, group_name};
use super::cut::{cut_to_common_prefix, leave_out_uneven};
use super::folder::MpiCapture;
use super::point_to_point::p2p_of;
use super::rank_capture::CAPTURE_FORMAT_VERSION;
use super::MpiSummary;
use crate::core::clock::{fit_rank_model, ClockModel};
use crate::evidence::commtrace::{check, exec, number_sequences, ClockDomain, CommTrace, RankTrace, SourceKind};
use crate::evidence::commtrace::{TraceClock, TraceGroup, TraceSource, UnknownField, COMM_TRACE_MPI_FORMAT_VERSION};
use anyhow::Result;
use std::collections::BTreeMap;

/// Build the trace: every collective, per rank in call order.
pub fn to_trace(cap: &MpiCapture) -> Result<CommTrace> {
    to_trace_with(cap, false)
}

/// [`to_trace`]; with `for_phases` only the collectives the phases run
/// (`rank --trace`, campaigns, `canary verify`: not gather, scatter, the
/// scans, the v-variants of all-gather and reduce-scatter, logical and
/// bitwise reductions), the others left out with the reason (`import mpi --for-phases`).
pub fn to_trace_with(cap: &MpiCapture, for_phases: bool) -> Result<CommTrace> {
    let world = cap.ranks[0].header.world_size;
    let mut groups: BTreeMap<String, TraceGroup> = BTreeMap::new();
    let mut ranks = Vec::new();
    let mut summary = MpiSummary {
        run_id: cap.ranks[0].header.run_id.clone(),
        incomplete: cap.ranks.iter().filter_map(|r| r.incomplete.clone()).collect(),
        ..Default::default()
    };
    let reference = &cap.ranks[0].header.kernel_clock;
    for r in &cap.ranks {
        let m = if r.header.world_rank == 0 {
            Ok(ClockModel::reference())
        } else if r.clock_windows.iter().any(Vec::is_empty) {
            Err(format!(
                "rank {} recorded no {} clock window",
                r.header.world_rank,
                if r.clock_windows[0].is_empty() { "MPI_Init" } else { "MPI_Finalize" }
            ))
        } else {
            let not_same = match (&r.header.kernel_clock, reference) {
                (Some(a), Some(b)) if a == b => None,
                _ => Some(format!(
                    "rank {} does not read rank 0's kernel clock (boot id and time namespace differ or are unknown)",
                    r.header.world_rank
                )),
            };
            fit_rank_model(&r.clock_windows[0], &r.clock_windows[1], not_same)
                .map(|f| f.model)
                .map_err(|e| format!("rank {}: clock fit: {e}", r.header.world_rank))
        };
        match m {
            Ok(m) => summary.clock_models.push(Some(m)),
            Err(why) => {
                summary.clock_models.push(None);
                summary.clock_unaligned.get_or_insert(why);
            }
        }
    }
    let models: Option<Vec<ClockModel>> = summary.clock_models.iter().copied().collect();
    for (k, r) in cap.ranks.iter().enumerate() {
        let model = models.as_ref().map(|m| &m[k]);
        let mut colls = Vec::new();
        let mut coll_calls = Vec::new();
        let (mut completions, mut nonblocking) = (Vec::new(), Vec::new());
        let mut p2p = Vec::new();
        let mut left: BTreeMap<String, u64> = BTreeMap::new();
        for (i, c) in r.calls.iter().enumerate() {
            let name = r.kind_name(c).to_string();
            let ops = p2p_of(r, i as u64, c, model);
            // a communicator only point-to-point operations use is a group too: the replay runs them on it
            if let (false, Some((members, ordinal))) = (ops.is_empty(), r.comms.get(&c.comm)) {
                let gname = group_name(members, *ordinal);
                groups.entry(gname.clone()).or_insert_with(|| TraceGroup {
                    name: gname,
                    desc: Some(format!("MPI communicator of {} ranks", members.len())),
                    members: members.clone(),
                });
            }
            p2p.extend(ops);
            let kept = collective_of(r, c, model, &mut groups)?.and_then(|t| {
                match exec::phases_cannot_run(&t, false).filter(|_| for_phases) {
                    Some(why) => Err(format!("left out for the phases (--for-phases): {why}")),
                    None => Ok(t),
                }
            });
            match kept {
                Ok(t) => {
                    colls.push(t);
                    coll_calls.push(i as u64);
                    nonblocking.push(c.request != 0);
                    completions.push(if c.request != 0 { r.done.get(&c.request).map(|d| d.call) } else { None });
                }
                Err(reason) => {
                    *left.entry(name.clone()).or_insert(0) += 1;
                    summary.left_out_reasons.entry(name).or_insert(reason);
                }
            }
        }
        number_sequences(&mut colls);
        summary.collective_calls.push(coll_calls);
        summary.collective_completions.push(completions);
        summary.collective_nonblocking.push(nonblocking);
        summary.p2p.push(p2p);
        summary.calls.push(r.calls_by_kind());
        summary.left_out.push(left);
        ranks.push(RankTrace { rank: r.header.world_rank, collectives: colls, trailing_compute: Vec::new() });
    }
    let mut groups: Vec<TraceGroup> = groups.into_values().collect();
    groups.sort_by(|a, b| a.name.cmp(&b.name));
    if !summary.incomplete.is_empty() {
        cut_to_common_prefix(&groups, &mut ranks, &mut summary);
    }
    let names: Vec<String> = cap.ranks.iter().map(|r| r.file.path.clone()).collect();
    check::check_ranks(world, &ranks.iter().map(|r| r.rank).collect::<Vec<_>>(), &names)?;
    check::check_groups(&groups, world)?;
    check::check_consistency(&groups, &ranks, &names)?;
    let mut t = CommTrace {
        format_version: COMM_TRACE_MPI_FORMAT_VERSION,
        source: TraceSource {
            kind: SourceKind::MpiCapture,
            schema: Some(format!("mpicap {CAPTURE_FORMAT_VERSION} ({})", cap.ranks[0].header.tool)),
            nccl_version: None,
            files: cap.ranks.iter().map(|r| r.file.clone()).collect(),
        },
        world_size: world,
        clock: TraceClock {
            domain: ClockDomain::HostPerRank,
            aligned_across_ranks: models.is_some(),
            note: match &models {
                Some(m) => format!(
                    "CLOCK_MONOTONIC in ns as the capture library read it on entry to each call, mapped onto rank 0's \
                        clock by each rank's model fitted from ping-pong windows at MPI_Init and MPI_Finalize \
                            (mpi.clock_models); largest error bound {:.0} ns",
                    m.iter().map(|m| m.bound_ns).fold(0.0, f64::max)
                ),
                None => format!(
                    "each rank's own CLOCK_MONOTONIC in ns, as the capture library read it on entry to each call; not \
                        aligned across ranks: {}",
                    summary.clock_unaligned.as_deref().unwrap_or("no clock model")
                ),
            },
        },
        unknown: vec![
            UnknownField { field: "device".into(), reason: "an MPI capture records host calls only".into() },
            UnknownField { field: "stream".into(), reason: "an MPI capture records host calls only".into() },
            UnknownField {
                field: "compute_before".into(),
                reason:
                    "the capture records no compute operations; the gap between calls is the host time between them"
                        .into(),
            },
        ],
        groups,
        ranks,
        mpi: Some(summary),
    };
    if for_phases {
        leave_out_uneven(&mut t);
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{allreduce_block, done, file, write_dir};
    use super::super::read_dir;
    use super::*;
    use crate::evidence::commtrace::{CollectiveKind, Limits, TraceDtype};

    #[test]
    fn a_whole_capture_imports_with_its_times_and_a_nonblocking_completion() {
        let mut blk = allreduce_block(1, 7);
        blk.push(done(7, 400));
        let d =
            write_dir(&[(0, file(0, 2, "r", std::slice::from_ref(&blk), true)), (1, file(1, 2, "r", &[blk], true))]);
        let cap = read_dir(d.path(), false, &Limits::default()).unwrap();
        let t = to_trace(&cap).unwrap();
        let c = &t.ranks[1].collectives[0];
        assert_eq!(
            (c.kind, c.dtype, c.in_elems, c.source_name.as_str()),
            (CollectiveKind::AllReduce, TraceDtype::F64, 4, "MPI_Iallreduce")
        );
        // posted at 100, completed by the wait that returned at 400
        assert_eq!((c.host_start_ns, c.host_duration_ns), (Some(100), Some(300)));
        assert_eq!(t.mpi.as_ref().unwrap().calls[0]["Iallreduce"], 1);
        // the written trace reads back (format version 2)
        let back = CommTrace::from_slice(&serde_json::to_vec(&t).unwrap()).unwrap();
        assert_eq!(back, t);
    }
}
