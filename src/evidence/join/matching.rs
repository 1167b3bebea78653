//! Matching of collectives across ranks by operation identity, never by time.
//! Consumes the ranks' headers and events; produces one [`JoinedCollective`]
//! per operation in key order, its arrival attached. Refuses inconsistent
//! groups, an event outside its rank's groups, a bad send/receive peer, a key
//! recorded twice, an event missing on a member and an identity mismatch.
//! Use [`match_events`] in memory; the streaming join drives [`merge`].
use super::clocks::{attach_arrival, nccl_kernel_starts};
use super::cursor::{key_of, Cursor, Key};
use super::{ArrivalStatus, JoinedCollective, RankTimes};
use crate::core::clock::ClockModel;
use crate::core::refusal::Code;
use crate::core::workload::Phase;
use crate::evidence::shard::{CollectiveEvent, CollectiveKind, Shard, ShardHeader};
use crate::evidence::tuning::TunerChoice;
use crate::refuse;
use anyhow::Result;
use std::collections::btree_map::Entry;
use std::collections::BTreeMap;

/// Process group membership from every rank's header, in rank order: each
/// header is its own rank, every group has members, names ranks of this run
/// once each, and ranks agree on it.
pub(super) fn check_groups(headers: &[&ShardHeader]) -> Result<BTreeMap<u32, Vec<u32>>> {
    let mut groups: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for (i, h) in headers.iter().enumerate() {
        if h.rank as usize != i {
            refuse!(
                Code::BadStructure,
                "shard {i} says it is rank {}: shards must be ranks 0 to {} in order",
                h.rank,
                headers.len().saturating_sub(1)
            );
        }
        for g in &h.groups {
            let mut seen = std::collections::BTreeSet::new();
            if g.members.is_empty() {
                refuse!(Code::BadStructure, "rank {}: group {} has no members", h.rank, g.id);
            }
            for &m in &g.members {
                if m as usize >= headers.len() {
                    refuse!(
                        Code::BadStructure,
                        "rank {}: group {} names rank {m}, outside a world of {} ranks",
                        h.rank,
                        g.id,
                        headers.len()
                    );
                }
                if !seen.insert(m) {
                    refuse!(
                        Code::BadStructure,
                        "rank {}: group {} lists rank {m} more than once ({:?}); each member counts once",
                        h.rank,
                        g.id,
                        g.members
                    );
                }
            }
            match groups.get(&g.id) {
                Some(m) if *m != g.members => {
                    refuse!(
                        Code::GroupMismatch,
                        "group {} membership differs: rank {} says {:?}, another rank says {:?}",
                        g.id,
                        h.rank,
                        g.members,
                        m
                    )
                }
                _ => {
                    groups.insert(g.id, g.members.clone());
                }
            }
        }
    }
    Ok(groups)
}

/// One rank's events indexed by key, sorted (a sorted list walked once by
/// the merge). Refuses, the first fault in recording order first: an event
/// of an undeclared group or of a group the rank is not in, a send or
/// receive without a peer or with a peer outside its group, and a key
/// recorded twice (before any fault of a later event).
pub(super) fn index_rank(
    rank: u32,
    events: &[CollectiveEvent],
    groups: &BTreeMap<u32, Vec<u32>>,
) -> Result<Vec<(Key, usize)>> {
    let mut m: Vec<(Key, usize)> = Vec::with_capacity(events.len());
    let twice = |m: &mut Vec<(Key, usize)>| -> Result<()> {
        m.sort_unstable();
        if let Some(i) = m.windows(2).filter(|w| w[0].0 == w[1].0).map(|w| w[1].1).min() {
            let e = &events[i];
            let (_, _, pair) = m.iter().find(|x| x.1 == i).expect("indexed").0;
            let with = pair.map(|(a, b)| format!(" (rank {a} to rank {b})")).unwrap_or_default();
            refuse!(Code::DuplicateEvent, "rank {rank}: group {} seq {}{with} is recorded twice", e.group, e.seq);
        }
        Ok(())
    };
    // the last group looked up, and whether this rank is in it: a rank's
    // events name few groups, a group may have thousands of members
    let mut last: Option<(u32, &Vec<u32>, bool)> = None;
    for (i, e) in events.iter().enumerate() {
        let (members, member) = match last {
            Some((g, members, member)) if g == e.group => (members, member),
            _ => {
                let Some(members) = groups.get(&e.group) else {
                    twice(&mut m)?;
                    anyhow::bail!("rank {rank}: event group {} seq {} names an undeclared group", e.group, e.seq);
                };
                let member = members.contains(&rank);
                last = Some((e.group, members, member));
                (members, member)
            }
        };
        if !member {
            twice(&mut m)?;
            refuse!(
                Code::GroupMismatch,
                "rank {rank} recorded group {} seq {} but is not a member of group {}",
                e.group,
                e.seq,
                e.group
            );
        }
        match (e.kind, e.peer) {
            (CollectiveKind::Send | CollectiveKind::Recv, None) => {
                twice(&mut m)?;
                refuse!(
                    Code::BadStructure,
                    "rank {rank}: {} on group {} seq {} names no peer",
                    e.kind.name(),
                    e.group,
                    e.seq
                )
            }
            (CollectiveKind::Send | CollectiveKind::Recv, Some(p)) if p == rank || !members.contains(&p) => {
                twice(&mut m)?;
                refuse!(
                    Code::GroupMismatch,
                    "rank {rank}: {} on group {} seq {} names peer {p}, not another member of the group",
                    e.kind.name(),
                    e.group,
                    e.seq
                )
            }
            _ => {}
        }
        m.push((key_of(rank, e), i));
    }
    twice(&mut m)?;
    Ok(m)
}

/// What the join takes from each rank besides its events.
pub(super) struct RankCtx {
    models: Vec<Option<ClockModel>>,
    /// The compute stream's measured stalls by (group, seq).
    waits: Vec<BTreeMap<(u32, u64), u64>>,
    /// Captured tuner choices by group-0 sequence number.
    tuners: Vec<BTreeMap<u64, TunerChoice>>,
    /// The device anchor's error per phase (GPU), added to arrival bounds.
    anchors: Vec<BTreeMap<Phase, u64>>,
    /// The kernel anchor's error per phase.
    kernel_anchors: Vec<BTreeMap<Phase, u64>>,
    /// NCCL kernel starts by (group, seq).
    kernel_starts: Vec<BTreeMap<(u32, u64), u64>>,
}

impl RankCtx {
    pub(super) fn with_capacity(n: usize) -> Self {
        RankCtx {
            models: Vec::with_capacity(n),
            waits: Vec::with_capacity(n),
            tuners: Vec::with_capacity(n),
            anchors: Vec::with_capacity(n),
            kernel_anchors: Vec::with_capacity(n),
            kernel_starts: Vec::with_capacity(n),
        }
    }
    pub(super) fn push(&mut self, r: RankExtract) {
        self.models.push(r.model);
        self.waits.push(r.waits);
        self.tuners.push(r.tuners);
        self.anchors.push(r.anchors);
        self.kernel_anchors.push(r.kernel_anchors);
        self.kernel_starts.push(r.kernel_starts);
    }
}

/// One rank's part of [`RankCtx`].
pub(super) struct RankExtract {
    model: Option<ClockModel>,
    waits: BTreeMap<(u32, u64), u64>,
    tuners: BTreeMap<u64, TunerChoice>,
    anchors: BTreeMap<Phase, u64>,
    kernel_anchors: BTreeMap<Phase, u64>,
    kernel_starts: BTreeMap<(u32, u64), u64>,
}

pub(super) fn rank_extract(s: &Shard) -> RankExtract {
    RankExtract {
        model: s.header.clock.as_ref().map(|c| c.model),
        waits: s.body.device_waits.iter().map(|w| ((w.group, w.seq), w.end_ns.saturating_sub(w.start_ns))).collect(),
        tuners: s.header.tuning.as_ref().map(|t| t.choices.iter().cloned().collect()).unwrap_or_default(),
        anchors: s.header.phases.iter().filter_map(|p| Some((p.phase, p.device_anchor_error_ns?))).collect(),
        kernel_anchors: s
            .header
            .phases
            .iter()
            .filter_map(|p| Some((p.phase, p.kernel_anchor.as_ref()?.error_ns)))
            .collect(),
        kernel_starts: nccl_kernel_starts(s),
    }
}

/// How many ranks ahead the merge asks for a reader's state and next bytes
/// ([`Cursor::prefetch_head`], [`Cursor::prefetch_next`]): far enough for a
/// memory access to complete while the ranks in between are handled.
const PREFETCH_AHEAD: usize = 8;

/// Walk every rank's events in key order, joining each operation across
/// its members (identity checked, times gathered, arrival attached) and
/// handing it to `emit` in ascending key order. The keys come from a map of
/// the ranks' next keys, so memory is one event per rank beyond the cursors.
pub(super) fn merge(
    cursors: &mut [Cursor<'_>],
    groups: &BTreeMap<u32, Vec<u32>>,
    ctx: &RankCtx,
    emit: &mut dyn FnMut(JoinedCollective) -> Result<()>,
) -> Result<()> {
    let mut pending: BTreeMap<Key, Vec<u32>> = BTreeMap::new();
    for (r, c) in cursors.iter().enumerate() {
        if let Some((k, _)) = c.head() {
            pending.entry(k).or_default().push(r as u32);
        }
    }
    let mut here = vec![false; cursors.len()];
    let mut spare: Vec<Vec<u32>> = Vec::new();
    // the ranks whose next key is `staged.0`, gathered outside the map: the
    // ranks of one operation mostly move on to one same next key, and one
    // map lookup per run of them replaces one per rank
    let mut staged: Option<(Key, Vec<u32>)> = None;
    while let Some((key, ranks)) = pending.pop_first() {
        for &r in &ranks {
            here[r as usize] = true;
        }
        let jc = join_key(key, cursors, &here, groups, ctx);
        for &r in &ranks {
            here[r as usize] = false;
        }
        emit(jc?)?;
        for (i, &r) in ranks.iter().enumerate() {
            if let Some(&ahead) = ranks.get(i + PREFETCH_AHEAD) {
                cursors[ahead as usize].prefetch_next();
            }
            let c = &mut cursors[r as usize];
            c.advance()?;
            if let Some((k, _)) = c.head() {
                match &mut staged {
                    Some((sk, v)) if *sk == k => v.push(r),
                    _ => {
                        if let Some((sk, v)) = staged.replace((k, spare.pop().unwrap_or_default())) {
                            unstage(&mut pending, &mut spare, sk, v);
                        }
                        staged.as_mut().expect("just staged").1.push(r);
                    }
                }
            }
        }
        if let Some((sk, v)) = staged.take() {
            unstage(&mut pending, &mut spare, sk, v);
        }
        let mut ranks = ranks;
        ranks.clear();
        spare.push(ranks);
    }
    Ok(())
}

/// Add the staged ranks `v` of `key` to `pending` (after those already there).
fn unstage(pending: &mut BTreeMap<Key, Vec<u32>>, spare: &mut Vec<Vec<u32>>, key: Key, mut v: Vec<u32>) {
    match pending.entry(key) {
        Entry::Vacant(e) => {
            e.insert(v);
        }
        Entry::Occupied(mut e) => {
            e.get_mut().append(&mut v);
            spare.push(v);
        }
    }
}

/// Join the operation `key` from the heads of the cursors of the ranks
/// marked `here` (exactly those whose next event has this key).
fn join_key(
    key: Key,
    cursors: &[Cursor<'_>],
    here: &[bool],
    groups: &BTreeMap<u32, Vec<u32>>,
    ctx: &RankCtx,
) -> Result<JoinedCollective> {
    let (group, seq, pair) = key;
    let members = match pair {
        Some((a, b)) => vec![a, b],
        None => groups[&group].clone(),
    };
    let what = || pair.map(|(a, b)| format!(" (rank {a} to rank {b})")).unwrap_or_default();
    let event = |r: u32| cursors[r as usize].head().expect("a rank marked here has a head").1;
    if members.iter().any(|&r| !here[r as usize]) {
        let present: Vec<u32> = members.iter().copied().filter(|&r| here[r as usize]).collect();
        let missing: Vec<u32> = members.iter().copied().filter(|&r| !here[r as usize]).collect();
        let any = event(present[0]);
        refuse!(
            Code::UnmatchedEvent,
            "unmatched event: group {group} seq {seq}{} ({}, {} bytes) is on ranks {present:?} but missing on ranks \
                {missing:?} ({})",
            what(),
            any.phase,
            any.bytes,
            any.kind.name()
        );
    }
    let first_rank = members[0];
    let first = event(first_rank);
    let mut ranks = Vec::with_capacity(members.len());
    for (k, &r) in members.iter().enumerate() {
        if let Some(&ahead) = members.get(k + PREFETCH_AHEAD) {
            cursors[ahead as usize].prefetch_head();
        }
        let e = event(r);
        // a pair: the sender's send to the receiver and the receiver's receive from the sender
        let kind_agrees = match pair {
            Some(_) => e.kind == if k == 0 { CollectiveKind::Send } else { CollectiveKind::Recv },
            None => e.kind == first.kind,
        };
        if !kind_agrees
            || e.bytes != first.bytes
            || e.dtype != first.dtype
            || e.phase != first.phase
            || e.root != first.root
        {
            let root = |x: Option<u32>| x.map(|r| format!(" root {r}")).unwrap_or_default();
            refuse!(
                Code::IdentityMismatch,
                "identity mismatch at group {group} seq {seq}{}: rank {first_rank} has {}{} {} bytes {} in {}, rank \
                    {r} has {}{} {} bytes {} in {}",
                what(),
                first.kind.name(),
                root(first.root),
                first.bytes,
                first.dtype.name(),
                first.phase,
                e.kind.name(),
                root(e.root),
                e.bytes,
                e.dtype.name(),
                e.phase
            );
        }
        ranks.push(RankTimes {
            rank: r,
            host_issue_ns: e.host_issue_ns,
            host_return_ns: e.host_return_ns,
            wait_start_ns: e.wait_start_ns,
            wait_end_ns: e.wait_end_ns,
            device_start_ns: e.device_start_ns,
            device_end_ns: e.device_end_ns,
            injected_delay_ns: e.injected_delay_ns,
            replay_error_ns: e.replay.map(|t| t.actual_gap_ns as i64 - t.target_gap_ns as i64),
            replay_gap_ns: e.replay.map(|t| t.actual_gap_ns),
            fill_units: e.fill.map(|f| f.units),
            fill_quantization_error_ns: e.fill.map(|f| f.quantization_error_ns),
            device_wait_ns: ctx.waits[r as usize].get(&(group, seq)).copied().filter(|_| pair.is_none()),
            kernel_start_ns: ctx.kernel_starts[r as usize].get(&(group, seq)).copied().filter(|_| pair.is_none()),
        });
    }
    let tuner = members.iter().find_map(|&r| ctx.tuners[r as usize].get(&seq).cloned()).filter(|_| group == 0);
    let mut jc = JoinedCollective {
        phase: first.phase,
        kind: first.kind,
        group,
        members,
        seq,
        bytes: first.bytes,
        dtype: first.dtype,
        root: first.root,
        token: first.token,
        layer: first.layer,
        iter: first.iter,
        warmup: first.warmup,
        ranks,
        arrival_status: ArrivalStatus::UnknownUncalibrated,
        arrival_offsets_us: None,
        arrival_skew_us: None,
        arrival_bound_us: None,
        skew_resolved: None,
        arrival_bounds_us: None,
        arrival_source: None,
        tuner,
    };
    attach_arrival(&mut jc, &ctx.models, &ctx.anchors, &ctx.kernel_anchors);
    Ok(jc)
}

/// Match collective events across shards by operation identity (in memory).
pub(crate) fn match_events(shards: &[Shard]) -> Result<Vec<JoinedCollective>> {
    let headers: Vec<&ShardHeader> = shards.iter().map(|s| &s.header).collect();
    let groups = check_groups(&headers)?;
    let mut ctx = RankCtx::with_capacity(shards.len());
    for s in shards {
        ctx.push(rank_extract(s));
    }
    let mut cursors = Vec::with_capacity(shards.len());
    for s in shards {
        let index = index_rank(s.header.rank, &s.body.collectives, &groups)?;
        cursors.push(Cursor::Indexed { events: std::borrow::Cow::Borrowed(&s.body.collectives[..]), index, pos: 0 });
    }
    let mut out = Vec::new();
    merge(&mut cursors, &groups, &ctx, &mut |c| {
        out.push(c);
        Ok(())
    })?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::shard_with_kernels;
    use super::*;

    /// The sorted per-rank index refuses what the per-event reading did, first fault first.
    #[test]
    fn events_are_matched_in_key_order_and_the_first_fault_in_recording_order_is_refused() {
        let joined = match_events(&[shard_with_kernels(6, 0, false)]).unwrap();
        assert_eq!(joined.iter().map(|c| c.seq).collect::<Vec<_>>(), [0, 1, 2, 3, 4, 5]);
        let refused = |edit: &dyn Fn(&mut Shard)| {
            let mut s = shard_with_kernels(6, 0, false);
            edit(&mut s);
            format!("{:#}", match_events(&[s]).unwrap_err())
        };
        let e = refused(&|s| s.body.collectives[3].seq = 1);
        assert!(e.starts_with("refused[DUPLICATE_EVENT]: rank 0: group 0 seq 1 is recorded twice"), "{e}");
        // seq 1 repeats at the 4th event, seq 0 only at the 6th: seq 1 is named
        let e = refused(&|s| {
            s.body.collectives[3].seq = 1;
            s.body.collectives[5].seq = 0;
        });
        assert!(e.contains("group 0 seq 1 is recorded twice"), "{e}");
        // a repeat before an undeclared group is refused as the repeat, and after it as the group
        let e = refused(&|s| {
            s.body.collectives[2].seq = 0;
            s.body.collectives[4].group = 9;
        });
        assert!(e.contains("group 0 seq 0 is recorded twice"), "{e}");
        let e = refused(&|s| {
            s.body.collectives[1].group = 9;
            s.body.collectives[3].seq = 0;
        });
        assert!(e.contains("event group 9 seq 1 names an undeclared group"), "{e}");
    }
}
