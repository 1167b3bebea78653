//! Collectives cut from a built trace, on every member alike, with their call, completion and
//! nonblocking entries in the `mpi` section. Consumes the trace; for an incomplete capture keeps,
//! per group, the collectives every member recorded (the cut said in `mpi.incomplete`); for
//! `--for-phases` leaves out those whose members disagree on what a shard records of them (counted
//! in `mpi.left_out` with the reason) and numbers the rest again. Refuses nothing.
use super::MpiSummary;
use crate::evidence::commtrace::{exec, number_sequences, CommTrace, RankTrace, TraceGroup};

/// `--for-phases`: leave out, on every member alike, the collectives whose
/// members disagree on what a shard records of them
/// ([`exec::uneven_members`]: an all-to-all-v of uneven totals),
/// counted by name with the reason; the rest are numbered again.
pub(super) fn leave_out_uneven(t: &mut CommTrace) {
    let uneven = exec::uneven_members(t);
    let CommTrace { ranks, mpi: Some(summary), .. } = t else { return };
    for (k, r) in ranks.iter_mut().enumerate() {
        let mask: Vec<bool> = (0..r.collectives.len()).map(|i| !uneven.contains_key(&(r.rank, i))).collect();
        if mask.iter().all(|&b| b) {
            continue;
        }
        for (i, c) in r.collectives.iter().enumerate().filter(|&(i, _)| !mask[i]) {
            let name = c.source_name.strip_prefix("MPI_").unwrap_or(&c.source_name).to_string();
            *summary.left_out[k].entry(name.clone()).or_insert(0) += 1;
            let why = format!("left out for the phases (--for-phases): {}", uneven[&(r.rank, i)]);
            summary.left_out_reasons.entry(name).or_insert(why);
        }
        retain_masked(r, summary, k, &mask);
        number_sequences(&mut r.collectives);
    }
}

/// Keep rank `k`'s collectives where `mask` says, with their call, completion and nonblocking entries.
fn retain_masked(r: &mut RankTrace, summary: &mut MpiSummary, k: usize, mask: &[bool]) {
    let mut m = mask.iter();
    r.collectives.retain(|_| *m.next().unwrap_or(&true));
    let mut m = mask.iter();
    summary.collective_calls[k].retain(|_| *m.next().unwrap_or(&true));
    let mut m = mask.iter();
    summary.collective_completions[k].retain(|_| *m.next().unwrap_or(&true));
    let mut m = mask.iter();
    summary.collective_nonblocking[k].retain(|_| *m.next().unwrap_or(&true));
}

/// An incomplete capture: ranks stopped at different points, so each
/// group keeps the collectives every member recorded (the first k on each,
/// k the fewest any member has); what is cut is said in `incomplete`.
pub(super) fn cut_to_common_prefix(groups: &[TraceGroup], ranks: &mut [RankTrace], summary: &mut MpiSummary) {
    for g in groups {
        let have = |r: &RankTrace| r.collectives.iter().filter(|c| c.group == g.name).count();
        let keep = ranks.iter().filter(|r| g.members.contains(&r.rank)).map(have).min().unwrap_or(0);
        for (k, r) in ranks.iter_mut().enumerate().filter(|(_, r)| g.members.contains(&r.rank)) {
            let had = have(r);
            if had > keep {
                let mut seen = 0usize;
                let mask: Vec<bool> = r
                    .collectives
                    .iter()
                    .map(|c| {
                        if c.group != g.name {
                            return true;
                        }
                        seen += 1;
                        seen <= keep
                    })
                    .collect();
                retain_masked(r, summary, k, &mask);
                summary.incomplete.push(format!(
                    "rank {}: the last {} collectives on group {:?} are cut (another member recorded only {keep})",
                    r.rank,
                    had - keep,
                    g.name
                ));
            }
        }
    }
}
