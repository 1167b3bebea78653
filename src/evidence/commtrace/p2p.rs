//! The point-to-point program of one rank of an imported MPI trace
//! (`mpi.p2p`), as `replay-trace` replays it: consumes the trace and a rank;
//! produces its steps in recorded call order ([`P2pPlan`]: nonblocking posts,
//! blocking sends and receives, `Sendrecv` pairs, and the completing wait of
//! each nonblocking operation at the call that completed it) and, for every
//! receive, the send it matches under MPI's matching order: per (communicator,
//! source, tag) the k-th receive posted takes the k-th message sent (MPI-3.1
//! §3.5, non-overtaking). A receive posted with a wildcard is replayed with
//! the source and tag it matched where the capture read its status. Refuses
//! an operation on an undescribed communicator, a peer outside it, a receive
//! without its send, a send nobody receives, or a message longer than its
//! receive: replayed, each would deadlock or fail; and, for a backend
//! without a point-to-point replay, a trace that has any.
use super::exec::P2pReport;
use super::mpi::MpiP2p;
use super::CommTrace;
use crate::core::refusal::Code;
use anyhow::Result;
use std::collections::BTreeMap;

/// MPI's wildcard source and tag, and no process, as the capture records them.
pub const ANY_SOURCE: i32 = -1;
/// See [`ANY_SOURCE`].
pub const ANY_TAG: i32 = -1;
/// See [`ANY_SOURCE`].
pub const PROC_NULL: i32 = -2;

/// One step of a rank's point-to-point program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum P2pStep {
    /// Post nonblocking operation `op` (`Isend`, `Irecv`, ...).
    Post(usize),
    /// Blocking send or receive `op`.
    Blocking(usize),
    /// One `Sendrecv` call: its send and its receive.
    SendRecv(usize, usize),
    /// Wait for these nonblocking operations (the call that completed them,
    /// or the end of the pass for those the capture never saw complete).
    Complete(Vec<usize>),
}

/// Who a receive gets its message from, for the check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Matched {
    /// The sender's world rank.
    pub sender: u32,
    /// The sender's operation index in its `mpi.p2p`.
    pub op: usize,
    /// The message's bytes.
    pub bytes: u64,
}

/// One operation as replayed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct P2pOp {
    /// `true`: a send; `false`: a receive.
    pub send: bool,
    /// The communicator's trace group name.
    pub group: String,
    /// The peer's rank in that communicator, or [`ANY_SOURCE`] / [`PROC_NULL`].
    pub peer: i32,
    /// The tag (a receive's as matched where known), or [`ANY_TAG`].
    pub tag: i32,
    /// Bytes sent, or the receive's capacity.
    pub bytes: u64,
    /// A receive's matching send, where the matching is known.
    pub matched: Option<Matched>,
}

/// A rank's point-to-point program.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct P2pPlan {
    /// Operations, in the rank's `mpi.p2p` order.
    pub ops: Vec<P2pOp>,
    /// Steps, each at its call index (`u64::MAX`: the end of the pass), in order.
    pub steps: Vec<(u64, P2pStep)>,
    /// Nonblocking operations the capture never saw complete (completed at the end of the pass).
    pub never_completed: usize,
    /// Receives whose matching send is not known (a wildcard whose status
    /// was not read, and every later receive of the rank): not checked.
    pub unmatched_wildcards: usize,
    /// Nonblocking receives that completed with an empty status (source and
    /// tag MPI's wildcards: cancelled, or completed without a message): not
    /// replayed, since a wildcard receive posted in their place would take
    /// another receive's message.
    pub empty_receives: usize,
}

impl P2pPlan {
    /// What one pass of this program issues; `receives_checked` and
    /// `host_ns` are what the pass checked and measured.
    pub fn report(&self, receives_checked: Option<u64>, host_ns: u64) -> P2pReport {
        let steps = |f: fn(&P2pStep) -> bool| self.steps.iter().filter(|(_, s)| f(s)).count() as u64;
        let sends = || self.ops.iter().filter(|o| o.send);
        P2pReport {
            operations: self.ops.len() as u64,
            sends: sends().count() as u64,
            receives: self.ops.iter().filter(|o| !o.send).count() as u64,
            nonblocking: steps(|s| matches!(s, P2pStep::Post(_))),
            waits: steps(|s| matches!(s, P2pStep::Complete(_))),
            never_completed: self.never_completed as u64,
            bytes_sent: sends().map(|o| o.bytes).sum(),
            receives_checked,
            receives_unmatched: self.unmatched_wildcards as u64,
            receives_empty: self.empty_receives as u64,
            host_ns,
        }
    }
}

/// A matching channel: (communicator, sender, receiver as world ranks, tag).
type Channel = (String, u32, u32, i32);

fn bytes_of(o: &MpiP2p) -> u64 {
    o.elems.saturating_mul(u64::try_from(o.dtype_bytes).unwrap_or(0))
}

/// A nonblocking receive whose completion's status names no source and no
/// tag (MPI's empty status): it received nothing.
fn empty_receive(o: &MpiP2p) -> bool {
    o.direction == "recv" && o.request.is_some() && o.matched == Some((ANY_SOURCE, ANY_TAG))
}

/// The source and tag a receive is replayed with: the matched ones where known.
fn resolved(o: &MpiP2p) -> (i32, i32) {
    match o.matched {
        Some((s, t)) if s >= 0 && t >= 0 => (s, t),
        _ => (o.peer, o.tag),
    }
}

/// Refuse `trace` (read from `path`) where it has point-to-point operations,
/// for a backend without a point-to-point replay (`backend`): before
/// anything runs, never silently replayed without them.
pub fn refuse_on_backend_without_p2p(trace: &CommTrace, path: &std::path::Path, backend: &str) -> Result<()> {
    let n: usize = trace.mpi.as_ref().map_or(0, |m| m.p2p.iter().map(Vec::len).sum());
    if n > 0 {
        crate::refuse!(
            Code::BadArgument,
            "{}: the trace has {n} point-to-point operations (mpi.p2p of an MPI capture), which the {backend} backend \
                does not replay: run with --backend cpu",
            path.display()
        );
    }
    Ok(())
}

/// Every rank's point-to-point program of `trace` (empty where it has no `mpi` section).
pub fn plans(trace: &CommTrace) -> Result<Vec<P2pPlan>> {
    let refuse =
        |what: String| -> Result<Vec<P2pPlan>> { crate::refuse!(Code::BadInput, "point-to-point replay: {what}") };
    let Some(m) = &trace.mpi else { return Ok(vec![P2pPlan::default(); trace.ranks.len()]) };
    let n = trace.world_size as usize;
    if m.p2p.len() != n {
        return refuse(format!("mpi.p2p has {} ranks; the trace has {n}", m.p2p.len()));
    }
    // per channel (group, sender, receiver, tag): the sends in order (sender's op index, bytes)
    let mut sent: BTreeMap<Channel, Vec<(usize, u64)>> = BTreeMap::new();
    let mut out: Vec<P2pPlan> = Vec::with_capacity(n);
    for (r, ops) in m.p2p.iter().enumerate() {
        let mut plan = P2pPlan::default();
        let mut completes: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
        let mut sendrecv_send: Option<usize> = None;
        for (i, o) in ops.iter().enumerate() {
            let where_ = || format!("rank {r}'s {} (call {}) to or from {}", o.name, o.call, o.peer);
            let Some(group) = o.group.clone() else {
                return refuse(format!("{} is on a communicator the capture never described", where_()));
            };
            let Some(g) = trace.group(&group) else {
                return refuse(format!("{}: group {group:?} is not in the trace's groups", where_()));
            };
            let send = match o.direction.as_str() {
                "send" => true,
                "recv" => false,
                d => return refuse(format!("{}: direction {d:?} (send or recv)", where_())),
            };
            let (peer_world, tag) = if send { (o.peer, o.tag) } else { resolved(o) };
            let peer = match peer_world {
                PROC_NULL => PROC_NULL,
                ANY_SOURCE if !send => ANY_SOURCE,
                p => match u32::try_from(p).ok().and_then(|p| g.members.iter().position(|&x| x == p)) {
                    Some(local) => local as i32,
                    None => {
                        return refuse(format!(
                            "{}: peer {p} is not a member of group {group:?} {:?}",
                            where_(),
                            g.members
                        ))
                    }
                },
            };
            if tag < 0 && (send || tag != ANY_TAG) {
                return refuse(format!("{}: tag {tag}", where_()));
            }
            if send && peer != PROC_NULL {
                sent.entry((group.clone(), r as u32, peer_world as u32, tag)).or_default().push((i, bytes_of(o)));
            }
            plan.ops.push(P2pOp { send, group, peer, tag, bytes: bytes_of(o), matched: None });
            if empty_receive(o) {
                plan.empty_receives += 1;
                continue;
            }
            if o.request.is_some() {
                plan.steps.push((o.call, P2pStep::Post(i)));
                match o.completed_by_call {
                    Some(c) => completes.entry(c).or_default().push(i),
                    None => {
                        plan.never_completed += 1;
                        completes.entry(u64::MAX).or_default().push(i)
                    }
                }
            } else if o.name.starts_with("Sendrecv") {
                // one call, two entries: its send, then its receive
                match (send, sendrecv_send.take()) {
                    (true, None) => sendrecv_send = Some(i),
                    (false, Some(j)) if ops[j].call == o.call => plan.steps.push((o.call, P2pStep::SendRecv(j, i))),
                    _ => return refuse(format!("{}: a Sendrecv is a send and then a receive of one call", where_())),
                }
            } else {
                plan.steps.push((o.call, P2pStep::Blocking(i)));
            }
        }
        if let Some(j) = sendrecv_send {
            return refuse(format!("rank {r}'s {} (call {}) has no receive", ops[j].name, ops[j].call));
        }
        // completions after every post of the same call (a completing call never posts)
        plan.steps.extend(completes.into_iter().map(|(c, ops)| (c, P2pStep::Complete(ops))));
        plan.steps.sort_by_key(|(c, s)| (*c, matches!(s, P2pStep::Complete(_))));
        out.push(plan);
    }
    // match every receive to its send: per channel, in posting order
    let mut taken: BTreeMap<Channel, usize> = BTreeMap::new();
    for (r, plan) in out.iter_mut().enumerate() {
        let ops = &m.p2p[r];
        let mut wildcard = false;
        for (i, o) in plan.ops.iter_mut().enumerate().filter(|(i, o)| !o.send && !empty_receive(&ops[*i])) {
            let (src, tag) = resolved(&ops[i]);
            if src == PROC_NULL {
                continue;
            }
            if src < 0 || tag < 0 {
                wildcard = true;
                plan.unmatched_wildcards += 1;
                continue;
            }
            let key = (o.group.clone(), src as u32, r as u32, tag);
            let k = taken.entry(key.clone()).or_insert(0);
            let Some(&(sop, bytes)) = sent.get(&key).and_then(|v| v.get(*k)) else {
                if wildcard {
                    // an earlier wildcard receive may have taken it: the matching is not known past it
                    plan.unmatched_wildcards += 1;
                    continue;
                }
                return refuse(format!(
                    "rank {r}'s {} (call {}) from rank {src} tag {tag} on group {:?} has no matching send (rank {src} \
                        sends {} there)",
                    ops[i].name,
                    ops[i].call,
                    o.group,
                    sent.get(&key).map_or(0, Vec::len)
                ));
            };
            *k += 1;
            if bytes > o.bytes {
                return refuse(format!(
                    "rank {r}'s {} (call {}) receives at most {} bytes; its message from rank {src} has {bytes}",
                    ops[i].name, ops[i].call, o.bytes
                ));
            }
            if wildcard {
                // an earlier wildcard receive may have taken another message of this channel
                plan.unmatched_wildcards += 1;
            } else {
                o.matched = Some(Matched { sender: src as u32, op: sop, bytes });
            }
        }
    }
    // every message is received (a send without its receive may never return)
    let wildcards: BTreeMap<u32, usize> =
        out.iter().enumerate().map(|(r, p)| (r as u32, p.unmatched_wildcards)).collect();
    for ((g, s, d, t), v) in &sent {
        let got = taken.get(&(g.clone(), *s, *d, *t)).copied().unwrap_or(0);
        if got < v.len() && wildcards.get(d).copied().unwrap_or(0) == 0 {
            return refuse(format!(
                "rank {s} sends {} messages to rank {d} tag {t} on group {g:?}; rank {d} receives {got} of them",
                v.len()
            ));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::commtrace::mpi::{MpiP2p, MpiSummary, TestOp as Op};
    use crate::evidence::commtrace::*;

    fn trace(ranks: Vec<Vec<Op>>) -> CommTrace {
        let n = ranks.len();
        let p2p = ranks.into_iter().map(|ops| ops.into_iter().map(MpiP2p::test).collect()).collect();
        let ranks = (0..n as u32).map(|rank| RankTrace { rank, collectives: vec![], trailing_compute: vec![] });
        let groups = vec![TraceGroup { name: "w".into(), desc: None, members: (0..n as u32).collect() }];
        CommTrace::test(SourceKind::Kineto, groups, ranks.collect(), Some(MpiSummary::test(p2p)))
    }

    #[test]
    fn a_halo_exchange_keeps_its_posts_waits_and_matching_order() {
        // LAMMPS's exchange: Irecv, Send, Wait (twice, same tag), then a Sendrecv
        let side = |peer| {
            vec![
                (0, "Irecv", "recv", peer, 0, 64, Some(1), Some(2)),
                (1, "Send", "send", peer, 0, 40, None, None),
                (3, "Irecv", "recv", peer, 0, 64, Some(2), Some(5)),
                (4, "Send", "send", peer, 0, 24, None, None),
                (6, "Sendrecv", "send", peer, 7, 8, None, None),
                (6, "Sendrecv", "recv", peer, 7, 8, None, None),
            ]
        };
        let p = plans(&trace(vec![side(1), side(0)])).unwrap();
        assert_eq!(
            p[0].steps,
            vec![
                (0, P2pStep::Post(0)),
                (1, P2pStep::Blocking(1)),
                (2, P2pStep::Complete(vec![0])),
                (3, P2pStep::Post(2)),
                (4, P2pStep::Blocking(3)),
                (5, P2pStep::Complete(vec![2])),
                (6, P2pStep::SendRecv(4, 5))
            ]
        );
        // the k-th receive on (group, source, tag) takes the k-th send: sizes 40 then 24
        let m: Vec<_> = p[0].ops.iter().filter_map(|o| o.matched).map(|m| (m.sender, m.op, m.bytes)).collect();
        assert_eq!(m, vec![(1, 1, 40), (1, 3, 24), (1, 4, 8)]);
        assert_eq!((p[0].never_completed, p[0].unmatched_wildcards), (0, 0));
        // a pass of it: 6 operations (3 sends of 72 bytes), 2 posts, 2 waits
        let r = p[0].report(Some(3), 5);
        let counts = (r.operations, r.sends, r.receives, r.nonblocking, r.waits, r.bytes_sent);
        assert_eq!(counts, (6, 3, 3, 2, 2, 72));
        assert_eq!((r.receives_checked, r.host_ns), (Some(3), 5));
    }

    #[test]
    fn a_backend_without_point_to_point_refuses_a_trace_that_has_it() {
        let t =
            trace(vec![vec![(0, "Send", "send", 1, 3, 8, None, None)], vec![(0, "Recv", "recv", 0, 3, 8, None, None)]]);
        let e = refuse_on_backend_without_p2p(&t, std::path::Path::new("t.json"), "cuda").unwrap_err().to_string();
        assert!(
            e.starts_with("refused[BAD_ARGUMENT]")
                && e.contains("t.json")
                && e.contains("2 point-to-point")
                && e.contains("--backend cpu"),
            "{e}"
        );
        let none = trace(vec![vec![], vec![]]);
        assert!(refuse_on_backend_without_p2p(&none, std::path::Path::new("t.json"), "cuda").is_ok());
    }

    #[test]
    fn what_would_deadlock_or_truncate_is_refused() {
        // a receive without its send
        let e = plans(&trace(vec![vec![(0, "Recv", "recv", 1, 3, 8, None, None)], vec![]])).unwrap_err().to_string();
        assert!(e.starts_with("refused[BAD_INPUT]") && e.contains("no matching send"), "{e}");
        // a send nobody receives
        let e = plans(&trace(vec![vec![(0, "Send", "send", 1, 3, 8, None, None)], vec![]])).unwrap_err().to_string();
        assert!(e.contains("receives 0 of them"), "{e}");
        // a message longer than its receive
        let e = plans(&trace(vec![
            vec![(0, "Send", "send", 1, 3, 9, None, None)],
            vec![(0, "Recv", "recv", 0, 3, 8, None, None)],
        ]))
        .unwrap_err()
        .to_string();
        assert!(e.contains("at most 8 bytes") && e.contains("has 9"), "{e}");
        // a peer outside the communicator
        let e = plans(&trace(vec![vec![(0, "Send", "send", 5, 3, 8, None, None)], vec![]])).unwrap_err().to_string();
        assert!(e.contains("peer 5 is not a member"), "{e}");
        // a receive completed with an empty status (cancelled) is not replayed, and the matching goes on past it
        let mut t = trace(vec![
            vec![(0, "Isend", "send", 1, 3, 8, Some(9), Some(1))],
            vec![
                (0, "Irecv", "recv", ANY_SOURCE, ANY_TAG, 8, Some(5), Some(1)),
                (2, "Recv", "recv", 0, 3, 8, None, None),
            ],
        ]);
        t.mpi.as_mut().unwrap().p2p[1][0].matched = Some((ANY_SOURCE, ANY_TAG));
        let p = plans(&t).unwrap();
        assert_eq!((p[1].empty_receives, p[1].unmatched_wildcards), (1, 0));
        assert_eq!(p[1].steps, vec![(2, P2pStep::Blocking(1))]);
        assert!(p[1].ops[1].matched.is_some());
        // a nonblocking send never completed is waited for at the end of the pass; a wildcard receive is not checked
        let p = plans(&trace(vec![
            vec![(0, "Isend", "send", 1, 3, 8, Some(9), None)],
            vec![(0, "Recv", "recv", ANY_SOURCE, 3, 8, None, None)],
        ]))
        .unwrap();
        assert_eq!(
            (p[0].never_completed, p[0].steps.last().cloned()),
            (1, Some((u64::MAX, P2pStep::Complete(vec![0]))))
        );
        assert_eq!((p[1].unmatched_wildcards, p[1].ops[0].peer, p[1].ops[0].matched), (1, ANY_SOURCE, None));
    }
}
