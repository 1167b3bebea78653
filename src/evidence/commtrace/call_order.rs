//! What runs between one rank's collectives of an MPI capture, in recorded call order.
//!
//! Consumes the trace's `mpi` lists (each collective's call index, whether it was posted
//! nonblocking and the call that completed it) and the rank's [`P2pPlan`]; produces the
//! [`NonblockingPlan`] and the merged [`Between`] order that `replay-trace` and the trace phases
//! both walk, so the two run one program. Refuses lists that do not hold one entry per collective,
//! call indices out of order and a post completed by a call that is not a later one.
use super::exec::NonblockingReport;
use super::p2p::P2pPlan;
use super::CommTrace;

/// One rank's nonblocking collectives (`MPI_Iallreduce`, ...): which were
/// posted so, and per collective its call index and the call that completed it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NonblockingPlan {
    /// Per collective: posted nonblocking.
    pub posted: Vec<bool>,
    /// Per collective: its index among the rank's captured calls.
    pub calls: Vec<u64>,
    /// Per collective: the call that completed it (`None`: blocking, or never seen complete).
    pub done: Vec<Option<u64>>,
}

impl NonblockingPlan {
    /// Rank `rank`'s nonblocking collectives of `t` (`n` collectives), where
    /// it has any; the error says which list is at fault.
    pub fn of(t: &CommTrace, rank: u32, n: usize) -> Result<Option<Self>, String> {
        let r = rank as usize;
        let Some(m) = t.mpi.as_ref().filter(|m| m.collective_nonblocking.get(r).is_some_and(|v| v.contains(&true)))
        else {
            return Ok(None);
        };
        let posted = &m.collective_nonblocking[r];
        let calls = collective_calls(t, rank, n)?;
        let done = m
            .collective_completions
            .get(r)
            .filter(|v| v.len() == n)
            .ok_or_else(|| format!("mpi.collective_completions does not have one entry per collective ({n})"))?;
        if posted.len() != n {
            return Err(format!("mpi.collective_nonblocking has {} entries for {n} collectives", posted.len()));
        }
        if let Some(i) = (0..n).find(|&i| posted[i] && done[i].is_some_and(|d| d <= calls[i])) {
            return Err(format!(
                "collective {i} (call {}) is completed by call {:?}, not a later one",
                calls[i], done[i]
            ));
        }
        Ok(Some(Self { posted: posted.clone(), calls: calls.to_vec(), done: done.clone() }))
    }

    /// What a pass of these collectives issues: the posts, one wait per
    /// completing call, and one more at the pass's end for those never seen complete.
    pub fn report(&self) -> NonblockingReport {
        let mine = || self.posted.iter().zip(&self.done).filter(|(&p, _)| p).map(|(_, d)| *d);
        let mut calls: Vec<Option<u64>> = mine().collect();
        calls.sort_unstable();
        calls.dedup();
        NonblockingReport {
            posted: mine().count() as u64,
            waits: calls.len() as u64,
            never_completed: mine().filter(Option::is_none).count() as u64,
        }
    }
}

/// Rank `rank`'s call index of each of its `n` collectives, in call order.
pub fn collective_calls(t: &CommTrace, rank: u32, n: usize) -> Result<&[u64], String> {
    let calls = t.mpi.as_ref().and_then(|m| m.collective_calls.get(rank as usize)).map_or(&[][..], Vec::as_slice);
    if calls.len() != n {
        return Err(format!("mpi.collective_calls has {} entries for {n} collectives", calls.len()));
    }
    if !calls.windows(2).all(|w| w[0] < w[1]) {
        return Err("mpi.collective_calls is not in call order".into());
    }
    Ok(calls)
}

/// A step between two collectives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Between {
    /// Point-to-point step `k` of the rank's [`P2pPlan`].
    P2p(usize),
    /// Complete posted collective `i` (the rank's index).
    Complete(usize),
}

/// What runs between rank `rank`'s `n` collectives, in recorded call order:
/// (the position of the collective it precedes, `n` after the last; step).
/// A wait completing point-to-point operations and a post together runs the
/// step first; a post never seen complete completes at the pass's end.
pub fn between(
    t: &CommTrace,
    rank: u32,
    n: usize,
    p2p: Option<&P2pPlan>,
    nb: Option<&NonblockingPlan>,
) -> Result<Vec<(usize, Between)>, String> {
    if p2p.is_none() && nb.is_none() {
        return Ok(Vec::new());
    }
    let calls = collective_calls(t, rank, n)?;
    let at = |call: u64| calls.partition_point(|&x| x < call);
    let mut out: Vec<(usize, (u64, u8), Between)> = Vec::new();
    for (k, &(call, _)) in p2p.iter().flat_map(|p| p.steps.iter()).enumerate() {
        out.push((at(call), (call, 0), Between::P2p(k)));
    }
    if let Some(nb) = nb {
        for (i, d) in nb.done.iter().enumerate().filter(|&(i, _)| nb.posted[i]) {
            let d = d.unwrap_or(u64::MAX);
            out.push((at(d), (d, 1), Between::Complete(i)));
        }
    }
    out.sort_by_key(|&(_, key, _)| key);
    Ok(out.into_iter().map(|(at, _, b)| (at, b)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::commtrace::p2p;
    use crate::evidence::trace::tests::mpi_trace;

    #[test]
    fn posts_complete_after_the_steps_of_their_call_and_waits_count_calls() {
        // collectives at calls 3, 5 and 6, all posted: the first two completed by call 7, which also
        // completes the receive posted at call 0; the third never seen complete
        let mut t = mpi_trace();
        for r in &mut t.ranks {
            r.collectives = vec![r.collectives[0].clone(); 3];
        }
        let m = t.mpi.as_mut().unwrap();
        (m.collective_calls, m.collective_nonblocking) = (vec![vec![3, 5, 6]; 2], vec![vec![true; 3]; 2]);
        m.collective_completions = vec![vec![Some(7), Some(7), None]; 2];
        for side in &mut m.p2p {
            side[0].completed_by_call = Some(7);
        }
        let plan = p2p::plans(&t).unwrap().swap_remove(0);
        let nb = NonblockingPlan::of(&t, 0, 3).unwrap().unwrap();
        use Between::*;
        assert_eq!(
            between(&t, 0, 3, Some(&plan), Some(&nb)).unwrap(),
            [(0, P2p(0)), (0, P2p(1)), (1, P2p(2)), (3, P2p(3)), (3, Complete(0)), (3, Complete(1)), (3, Complete(2))]
        );
        let r = nb.report();
        assert_eq!((r.posted, r.waits, r.never_completed), (3, 2, 1), "one wait at call 7, one at the pass's end");
        // nothing to interleave: no list is read
        assert_eq!(between(&t, 0, 2, None, None).unwrap(), []);
        // calls out of order, and a post its own call completes, are faults of the lists
        t.mpi.as_mut().unwrap().collective_calls = vec![vec![3, 6, 5]; 2];
        assert!(between(&t, 0, 3, Some(&plan), None).unwrap_err().contains("not in call order"));
        let m = t.mpi.as_mut().unwrap();
        (m.collective_calls, m.collective_completions) = (vec![vec![3, 5, 6]; 2], vec![vec![Some(3), None, None]; 2]);
        assert!(NonblockingPlan::of(&t, 0, 3).unwrap_err().contains("collective 0 (call 3) is completed by call"));
    }
}
