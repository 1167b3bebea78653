use super::*;
use crate::evidence::commtrace::{self, CommTrace};
use crate::evidence::shard::{self, CollectiveKind};

/// The calls of a schedule as (prepared index, kind, group, root) where
/// prepared, bytes, dtype, and the gap before each.
type Entry = (Option<(usize, CollectiveKind, u32, Option<u32>)>, u64, TraceDtype, u64);

fn entries(s: &Schedule) -> Vec<Entry> {
    let mut gap = 0;
    let mut out = Vec::new();
    for step in &s.steps {
        match step {
            Step::Gap { ns, .. } => gap = *ns,
            Step::Call(c) => {
                let op = match c.target {
                    Target::Prepared { index, .. } => Some((index, c.kind, c.group, c.root)),
                    Target::World { .. } => None,
                };
                out.push((op, c.bytes, c.dtype, gap));
            }
            _ => {}
        }
    }
    out
}
#[test]
fn comm_traces_are_told_from_joined_traces_by_their_first_key() {
    assert!(first_key_is_comm_trace("{\n  \"format_version\": 1,"));
    // compacted with sorted keys (serde_json::Value): the clock comes first
    assert!(first_key_is_comm_trace("{\"clock\":{\"aligned_across_ranks\":false}"));
    assert!(!first_key_is_comm_trace("{\"phase\":\"blocking\",\"kind\":\"all_reduce\"}\n{\"phase\":"));
    assert!(!first_key_is_comm_trace(""));
    assert!(!first_key_is_comm_trace("[1, 2]"));
}

/// A 4-rank trace: tensor-parallel groups of 2 and the world. Rank 0
/// records an all-reduce on its TP group, one on the world and a
/// broadcast from rank 0 on the world, each 1 µs after the previous.
pub(crate) fn four_rank_trace() -> CommTrace {
    use crate::evidence::commtrace::*;
    let groups = vec![
        TraceGroup { name: "0".into(), desc: Some("default_pg".into()), members: vec![0, 1, 2, 3] },
        TraceGroup { name: "tp0".into(), desc: None, members: vec![0, 1] },
        TraceGroup { name: "tp1".into(), desc: None, members: vec![2, 3] },
    ];
    let ranks = (0..4u32)
        .map(|r| {
            let tp = if r < 2 { "tp0" } else { "tp1" };
            let mut colls = vec![
                TraceCollective::plain(CollectiveKind::AllReduce, "allreduce", tp, TraceDtype::Bf16, 8),
                TraceCollective::plain(CollectiveKind::AllReduce, "allreduce", "0", TraceDtype::Bf16, 4),
                TraceCollective::plain(CollectiveKind::Broadcast, "broadcast", "0", TraceDtype::F32, 16),
            ];
            colls[2].root = Some(0);
            for (i, c) in colls.iter_mut().enumerate() {
                (c.host_start_ns, c.host_duration_ns) = (Some(1_000 * (i as u64 + 1)), Some(100));
            }
            RankTrace { rank: r, collectives: colls, trailing_compute: vec![] }
        })
        .collect();
    CommTrace::test(SourceKind::Kineto, groups, ranks, None)
}

#[test]
fn every_kind_runs_on_its_group_and_world_allreduces_stay_on_group_0() {
    let t = four_rank_trace();
    let st = comm_trace_schedule(&t, Path::new("t.json"), "sha".into(), 2, 4, (1, 2), false).unwrap();
    // 3 passes of 3 collectives
    let all = entries(&st);
    assert_eq!(all.len(), 9);
    let e = &all[..3];
    // the TP all-reduce on the trace's group "tp1" (position 2: shard group 3), the world one through the backend
    assert_eq!(e[0].0, Some((0, CollectiveKind::AllReduce, 3, None)));
    assert_eq!(e[1].0, None);
    assert_eq!((e[1].1, e[1].2), (8, shard::TraceDtype::Bf16));
    assert_eq!(e[2].0, Some((1, CollectiveKind::Broadcast, 1, Some(0))));
    assert_eq!((e[2].1, e[2].2), (64, shard::TraceDtype::F32));
    assert_eq!(all[3].0, e[0].0, "every pass runs the same prepared collectives");
    // a token per pass, the first a warm-up; the world all-reduce waited for
    let tokens: Vec<_> = st.steps.iter().filter(|s| matches!(s, Step::Token { .. })).collect();
    assert_eq!(tokens[0], &Step::Token { token: 0, warmup: true });
    assert_eq!(tokens.len(), 3);
    assert_eq!(st.steps.iter().filter(|s| **s == Step::Wait).count(), 3);
    let ops = st.prepared.as_ref().unwrap();
    assert_eq!(ops.colls.len(), 2);
    let groups: Vec<(u32, Vec<u32>, Option<String>)> =
        ops.groups.iter().map(|g| (g.id, g.members.clone(), g.name.clone())).collect();
    assert_eq!(groups, vec![(1, vec![0, 1, 2, 3], Some("0".into())), (3, vec![2, 3], Some("tp1".into()))]);
    let Some((TraceOrigin::Imported { collectives_per_pass, left_out_per_pass, kinds, .. }, _)) = &st.source else {
        panic!("{:?}", st.source)
    };
    assert_eq!((*collectives_per_pass, *left_out_per_pass), (3, 0));
    let counts: Vec<(CollectiveKind, u32, u32, Vec<u64>)> =
        kinds.iter().map(|k| (k.kind, k.run_per_pass, k.left_out_per_pass, k.sizes_bytes.clone())).collect();
    assert_eq!(
        counts,
        vec![(CollectiveKind::AllReduce, 2, 0, vec![8, 16]), (CollectiveKind::Broadcast, 1, 0, vec![64])]
    );
}

#[test]
fn allreduce_only_leaves_the_other_kinds_out_and_refuses_sub_groups() {
    let mut t = four_rank_trace();
    let e = comm_trace_schedule(&t, Path::new("t.json"), "sha".into(), 0, 4, (0, 1), true).unwrap_err().to_string();
    assert!(e.starts_with("refused[BAD_INPUT]") && e.contains("group \"tp0\""), "{e}");
    for r in &mut t.ranks {
        r.collectives.remove(0);
    }
    let st = comm_trace_schedule(&t, Path::new("t.json"), "sha".into(), 0, 4, (0, 1), true).unwrap();
    assert!(st.prepared.is_none() && entries(&st).iter().all(|e| e.0.is_none()));
    let Some((TraceOrigin::Imported { collectives_per_pass, left_out_per_pass, kinds, .. }, _)) = &st.source else {
        panic!()
    };
    assert_eq!((*collectives_per_pass, *left_out_per_pass), (1, 1));
    assert_eq!(
        kinds.iter().map(|k| (k.kind, k.run_per_pass, k.left_out_per_pass)).collect::<Vec<_>>(),
        vec![(CollectiveKind::AllReduce, 1, 0), (CollectiveKind::Broadcast, 0, 1)]
    );
    // a world all-reduce of another dtype than f32/bf16: refused with --trace-allreduce-only ...
    use crate::evidence::commtrace::TraceDtype;
    t.ranks.iter_mut().for_each(|r| r.collectives[0].dtype = TraceDtype::F64);
    let e = comm_trace_schedule(&t, Path::new("t.json"), "sha".into(), 0, 4, (0, 1), true).unwrap_err().to_string();
    assert!(e.starts_with("refused[BAD_INPUT]") && e.contains("all-reduce #") && e.contains("f64 is not a run"), "{e}");
    // ... run in its own dtype through the trace executor with every kind (shard group 1: the world's trace group)
    t.ranks.iter_mut().for_each(|r| r.collectives[1].dtype = TraceDtype::I8);
    let st = comm_trace_schedule(&t, Path::new("t.json"), "sha".into(), 0, 4, (0, 1), false).unwrap();
    let got: Vec<_> = entries(&st).iter().map(|e| (e.0.map(|o| (o.1, o.2)), e.2, e.1)).collect();
    assert_eq!(
        got,
        vec![
            (Some((CollectiveKind::AllReduce, 1)), TraceDtype::F64, 32),
            (Some((CollectiveKind::Broadcast, 1)), TraceDtype::I8, 16)
        ]
    );
}

/// A 2-rank MPI trace, each rank: Irecv (call 0, at 100, completed by
/// call 2 at 150), Send (call 1, 110 to 120), an all-reduce (call 3, 200
/// to 250), a Sendrecv (call 4, 300 to 320), all with the other rank.
#[test]
fn replay_walk_prepares_every_call_and_paces_only_the_timed_pass() {
    let t = mpi_trace();
    let walk = |pace| {
        let w = TraceWalk::Replay { op: Some(ReduceOp::Max), pace };
        walk_comm_trace(&t, Path::new("t.json"), "sha".into(), (0, 2), (1, 1), &w).unwrap()
    };
    let paced_steps = |steps: &[Step]| {
        let gaps = steps.iter().filter(|s| matches!(s, Step::Gap { .. })).count();
        (gaps, steps.iter().filter(|s| matches!(s, Step::P2p { gap_ns, .. } if *gap_ns > 0)).count())
    };
    let st = walk(ReplayPace::Gaps);
    // the world all-reduce of f64 the phases would prepare anyway: here with --op, the trace recording none
    let calls: Vec<_> = st.calls().collect();
    assert_eq!(calls.len(), 2);
    assert!(calls.iter().all(|c| c.target == Target::Prepared { index: 0, op: ReduceOp::Max }));
    // the warm-up pass runs back to back, then every rank meets before the timed pass
    let settle = st.steps.iter().position(|s| *s == Step::Settle).unwrap();
    assert_eq!(st.steps[settle + 1], Step::Token { token: 1, warmup: false });
    assert_eq!(paced_steps(&st.steps[..settle]), (0, 0));
    // the timed pass: the collective's gap from the step before it (the wait that saw the receive
    // complete at 150), the steps paced
    let (gaps, steps) = paced_steps(&st.steps[settle..]);
    assert_eq!(gaps, 1);
    assert!(steps > 0);
    assert!(st.steps[settle..].contains(&Step::Gap { ns: 200 - 150, compute_ns: Some(0) }), "{:?}", st.steps);
    // back to back: nothing paced, the same calls
    let none = walk(ReplayPace::None);
    assert_eq!(paced_steps(&none.steps), (0, 0));
    assert_eq!(none.calls().count(), 2);
    // given gaps (the recorded compute): the collectives paced, the steps not
    assert_eq!(paced_steps(&walk(ReplayPace::Given(vec![5])).steps), (1, 0));
    assert!(walk(ReplayPace::Given(vec![5])).steps.contains(&Step::Gap { ns: 5, compute_ns: Some(0) }));
}

/// A rank whose every call is a world all-reduce prepares the groups
/// with a rank that has a call on a group of its own (making their
/// communicators is collective over the world); with only world
/// all-reduces anywhere, nobody prepares.
#[test]
fn every_rank_prepares_where_one_has_a_prepared_call() {
    use crate::evidence::commtrace::{CollectiveKind as K, TraceGroup};
    let mut t = mpi_trace();
    t.mpi = None;
    t.groups.push(TraceGroup { name: "solo".into(), desc: None, members: vec![0] });
    t.ranks.iter_mut().for_each(|r| r.collectives[0].dtype = TraceDtype::F32);
    let only_world = t.clone();
    let mut solo = t.ranks[0].collectives[0].clone();
    (solo.kind, solo.group, solo.host_start_ns) = (K::Broadcast, "solo".into(), Some(300));
    t.ranks[0].collectives.push(solo);
    let walk = |t: &CommTrace, rank| comm_trace_schedule(t, Path::new("t"), "sha".into(), rank, 2, (0, 1), false);
    let p1 = walk(&t, 1).unwrap().prepared.expect("rank 1 prepares with rank 0");
    assert!(p1.colls.is_empty() && p1.p2p.is_none());
    assert_eq!(walk(&t, 0).unwrap().prepared.unwrap().colls.len(), 1);
    assert!((0..2).all(|r| walk(&only_world, r).unwrap().prepared.is_none()));
}

pub(crate) fn mpi_trace() -> CommTrace {
    use crate::evidence::commtrace::mpi::{MpiP2p, MpiSummary};
    use crate::evidence::commtrace::*;
    let op = |call, name, dir, peer, elems, request, post_ns, complete_ns, done| MpiP2p {
        post_ns,
        complete_ns: Some(complete_ns),
        ..MpiP2p::test((call, name, dir, peer, 0, elems, request, done))
    };
    let side = |peer| {
        vec![
            op(0, "Irecv", "recv", peer, 64, Some(7), 100, 150, Some(2)),
            op(1, "Send", "send", peer, 40, None, 110, 120, None),
            op(4, "Sendrecv", "send", peer, 8, None, 300, 320, None),
            op(4, "Sendrecv", "recv", peer, 8, None, 300, 320, None),
        ]
    };
    let ranks = (0..2u32)
        .map(|r| {
            let mut c = TraceCollective::plain(CollectiveKind::AllReduce, "Allreduce", "w", TraceDtype::F64, 1);
            (c.host_start_ns, c.host_duration_ns) = (Some(200), Some(50));
            RankTrace { rank: r, collectives: vec![c], trailing_compute: vec![] }
        })
        .collect();
    let mut mpi = MpiSummary::test(vec![side(1), side(0)]);
    (mpi.collective_calls, mpi.collective_completions) = (vec![vec![3]; 2], vec![vec![None]; 2]);
    mpi.collective_nonblocking = vec![vec![false]; 2];
    let groups = vec![TraceGroup { name: "w".into(), desc: None, members: vec![0, 1] }];
    CommTrace::test(SourceKind::MpiCapture, groups, ranks, Some(mpi))
}

#[test]
fn point_to_point_runs_between_the_collectives_and_its_time_is_not_gap() {
    let t = mpi_trace();
    let st = comm_trace_schedule(&t, Path::new("t.json"), "sha".into(), 0, 2, (0, 2), false).unwrap();
    assert!(st.prepared.as_ref().is_some_and(|p| p.p2p.is_some()), "the trace has point-to-point operations");
    // per pass: Irecv, Send and the wait before the all-reduce, the Sendrecv after it; the first call of the pass
    // has no earlier one, the Send comes 10 after the Irecv's post, the wait at once; the all-reduce's gap runs
    // from the wait's completion (150), not from the pass's start
    let pass: Vec<String> = st.steps[..9]
        .iter()
        .map(|s| match s {
            Step::P2p { index, gap_ns, started } => format!("p{index}:{gap_ns}:{started}"),
            Step::Gap { ns, .. } => format!("gap{ns}"),
            Step::Call(c) => c.kind.name().to_string(),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(
        pass.join(" "),
        "Token { token: 0, warmup: false } p0:0:1 p1:10:1 p2:0:0 gap50 all_reduce p3:50:2 TokenEnd Token { token: \
            1, warmup: false }"
    );
    assert_eq!(entries(&st).iter().map(|e| e.3).collect::<Vec<_>>(), vec![50, 50]);
    let Some((TraceOrigin::Imported { p2p: Some(c), .. }, _)) = &st.source else { panic!("{:?}", st.source) };
    assert_eq!((c.operations_per_pass, c.left_out_per_pass, c.calls_per_pass, c.bytes_sent_per_pass), (4, 0, 4, 48));
    // --trace-allreduce-only leaves them out, counted (its all-reduces are f32)
    let mut f32s = t.clone();
    f32s.ranks.iter_mut().for_each(|r| r.collectives[0].dtype = commtrace::TraceDtype::F32);
    let st = comm_trace_schedule(&f32s, Path::new("t.json"), "sha".into(), 0, 2, (0, 1), true).unwrap();
    let Some((TraceOrigin::Imported { p2p: Some(c), .. }, _)) = &st.source else { panic!("{:?}", st.source) };
    assert!(st.prepared.is_none());
    assert_eq!((c.operations_per_pass, c.left_out_per_pass), (0, 4));
    // a trace whose collective calls disagree with its collectives is refused
    let mut bad = t.clone();
    bad.mpi.as_mut().unwrap().collective_calls[0].push(9);
    let e = comm_trace_schedule(&bad, Path::new("t.json"), "sha".into(), 0, 2, (0, 1), false).unwrap_err().to_string();
    assert!(e.starts_with("refused[BAD_INPUT]") && e.contains("collective_calls has 2 entries for 1"), "{e}");
}

/// Members that disagree on a collective (an all-to-all-v whose members
/// send different totals) are refused on every rank before launch, naming
/// both members; matched by position on the group, not by the file's
/// sequence numbers; equal totals run.
#[test]
fn members_that_disagree_on_a_collective_are_refused_before_launch() {
    use crate::evidence::commtrace::exec::uneven_members;
    let mut t = four_rank_trace();
    for r in &mut t.ranks {
        let mut c = TraceCollective::plain(CollectiveKind::AllToAll, "alltoallv", "0", TraceDtype::F32, 4);
        c.in_split_elems = Some(vec![1; 4]);
        c.out_split_elems = Some(vec![1; 4]);
        (c.host_start_ns, c.host_duration_ns, c.seq) = (Some(9_000), Some(100), 7 * r.rank as u64);
        r.collectives.push(c);
    }
    assert!(uneven_members(&t).is_empty(), "equal totals, whatever sequence numbers the file carries");
    comm_trace_schedule(&t, Path::new("t.json"), "sha".into(), 1, 4, (0, 1), false).unwrap();
    t.ranks[2].collectives[3].in_elems = 6;
    let u = uneven_members(&t);
    assert_eq!(u.keys().copied().collect::<Vec<_>>(), vec![(0, 3), (1, 3), (2, 3), (3, 3)]);
    for rank in 0..4 {
        let e = comm_trace_schedule(&t, Path::new("t.json"), "sha".into(), rank, 4, (0, 1), false).unwrap_err();
        let e = e.to_string();
        assert!(
            e.starts_with("refused[UNSUPPORTED_OPERATION]")
                && e.contains("t.json")
                && e.contains("rank 0 has all_to_all of 16 bytes of f32, rank 2 all_to_all of 24 bytes"),
            "{e}"
        );
    }
    // with --trace-allreduce-only the all-to-all is left out, not refused (the sub-group all-reduce goes first)
    for r in &mut t.ranks {
        r.collectives.remove(0);
    }
    comm_trace_schedule(&t, Path::new("t.json"), "sha".into(), 0, 4, (0, 1), true).unwrap();
}

/// A nonblocking all-reduce (call 3) completed by call 5, after the
/// Sendrecv (call 4): posted, the step, then its completion; one never
/// seen complete is completed at the pass's end; a f32 sum on the world,
/// which the backend's world call would run, is a prepared post instead.
#[test]
fn a_nonblocking_collective_is_posted_and_completed_where_the_application_did() {
    let order = |t: &CommTrace| -> Result<String> {
        let st = comm_trace_schedule(t, Path::new("t.json"), "sha".into(), 0, 2, (0, 1), false)?;
        let s: Vec<String> = st.steps[1..]
            .iter()
            .map(|s| match s {
                Step::P2p { index, .. } => format!("p{index}"),
                Step::Gap { .. } => "gap".into(),
                Step::Call(c) => format!("{}:{:?}", c.kind.name(), c.issue),
                Step::Complete { index } => format!("done{index}"),
                other => format!("{other:?}"),
            })
            .collect();
        Ok(s.join(" "))
    };
    let mut t = mpi_trace();
    assert_eq!(order(&t).unwrap(), "p0 p1 p2 gap all_reduce:HostWait p3 TokenEnd");
    let m = t.mpi.as_mut().unwrap();
    (m.collective_nonblocking, m.collective_completions) = (vec![vec![true]; 2], vec![vec![Some(5)]; 2]);
    assert_eq!(order(&t).unwrap(), "p0 p1 p2 gap all_reduce:Post p3 done0 TokenEnd");
    t.mpi.as_mut().unwrap().collective_completions = vec![vec![None]; 2];
    assert_eq!(order(&t).unwrap(), "p0 p1 p2 gap all_reduce:Post p3 done0 TokenEnd");
    use crate::evidence::commtrace::TraceDtype;
    t.ranks.iter_mut().for_each(|r| r.collectives[0].dtype = TraceDtype::F32);
    let st = comm_trace_schedule(&t, Path::new("t.json"), "sha".into(), 0, 2, (0, 1), false).unwrap();
    assert!(st.calls().all(|c| matches!(c.target, Target::Prepared { .. }) && c.issue == Issue::Post));
    t.mpi.as_mut().unwrap().collective_nonblocking = vec![vec![false]; 2];
    let st = comm_trace_schedule(&t, Path::new("t.json"), "sha".into(), 0, 2, (0, 1), false).unwrap();
    assert!(st.calls().all(|c| matches!(c.target, Target::World { .. })), "waited for: the world call");
    // a post completed by its own call, or lists of the wrong length, are refused naming the file
    let m = t.mpi.as_mut().unwrap();
    (m.collective_nonblocking, m.collective_completions) = (vec![vec![true]; 2], vec![vec![Some(3)]; 2]);
    let e = order(&t).unwrap_err().to_string();
    assert!(e.starts_with("refused[BAD_INPUT]") && e.contains("t.json") && e.contains("not a later one"), "{e}");
    t.mpi.as_mut().unwrap().collective_completions = vec![vec![]; 2];
    let e = order(&t).unwrap_err().to_string();
    assert!(e.contains("one entry per collective"), "{e}");
}

#[test]
fn gaps_are_issue_minus_previous_completion_and_tokens_follow_the_calls() {
    let c = |t| CallStep::world_all_reduce(4, workload::Dtype::F32, Some(t), Some(0), false);
    let steps = world_steps(100, vec![(150, 200, c(0)), (260, 300, c(0)), (300, 310, c(1))]);
    let gaps: Vec<u64> =
        steps.iter().filter_map(|s| if let Step::Gap { ns, .. } = s { Some(*ns) } else { None }).collect();
    assert_eq!(gaps, vec![50, 60, 0]);
    let tokens = steps.iter().filter(|s| matches!(s, Step::Token { .. } | Step::TokenEnd)).count();
    assert_eq!(tokens, 4, "two tokens, each opened and closed");
    assert_eq!(steps.last(), Some(&Step::TokenEnd));
}
