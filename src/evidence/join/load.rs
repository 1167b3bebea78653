//! From a run directory to a verified, joined run. Consumes `run.json` and
//! one shard per rank, each checked against it (hash, run, rank, digest).
//! Refuses a missing directory or `run.json`, a foreign, unlisted, stale,
//! duplicated or missing shard and, where measurements are required,
//! synthetic shards. Use [`join_dir`] to hold the run in memory, and
//! [`join_summary_streaming`] or [`join_dir_streaming`] to hold neither.
use super::cursor::{Cursor, Key, StreamReader};
use super::matching::{check_groups, index_rank, match_events, merge, rank_extract, RankCtx, RankExtract};
use super::summary::{JoinSummary, SummaryBuilder};
use super::{JoinedCollective, JoinedRun};
use crate::core::limits::{self, FileStamp};
use crate::core::par;
use crate::core::refusal::Code;
use crate::evidence::run::{read_run_record, RunRecord, RUN_FILE};
use crate::evidence::shard::{
    collectives_region, peek_header, shard_file_name, CollectiveEvent, Shard, ShardHeader, TokenEvent,
};
use crate::evidence::stalls::{self, Stall};
use crate::refuse;
use anyhow::{Context, Result};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The run record of `dir` and its shard files, sorted (refusing a missing
/// directory or `run.json`).
fn run_and_files(dir: &Path) -> Result<(RunRecord, Vec<PathBuf>)> {
    if !dir.is_dir() {
        refuse!(Code::NoSuchInput, "{}: no such run directory", dir.display());
    }
    let run_path = dir.join(RUN_FILE);
    if !run_path.exists() {
        // an --out root (rank --out DIR writes DIR/<run-id>/): name the runs in it
        let mut runs: Vec<String> = std::fs::read_dir(dir)
            .map(|rd| {
                rd.filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| p.join(RUN_FILE).is_file())
                    .map(|p| p.display().to_string())
                    .collect()
            })
            .unwrap_or_default();
        let has_shards = std::fs::read_dir(dir)
            .is_ok_and(|mut rd| rd.any(|e| e.is_ok_and(|e| e.path().extension().is_some_and(|x| x == "shard"))));
        if !runs.is_empty() && !has_shards {
            runs.sort();
            refuse!(
                Code::NoSuchInput,
                "{} is not a run but holds {} run(s) (rank --out writes OUT/<run-id>/); join one of them: {}",
                dir.display(),
                runs.len(),
                runs.join(", ")
            );
        }
        refuse!(
            Code::NoSuchInput,
            "{}: missing; rank 0 writes it after every shard is on disk, so the run is incomplete",
            run_path.display()
        );
    }
    let run = read_run_record(&run_path)?;
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("listing {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "shard"))
        .collect();
    files.sort();
    Ok((run, files))
}

/// Load and verify every shard of `dir`, then join.
pub fn join_dir(dir: &Path) -> Result<JoinedRun> {
    let (run, files) = run_and_files(dir)?;
    let mut by_rank: BTreeMap<u32, (PathBuf, Shard)> = BTreeMap::new();
    for f in files {
        let bytes = limits::read_bounded(&f, limits::MAX_SHARD_BYTES)?;
        let (shard, digest) = Shard::decode_with_digest(&bytes, &f.display().to_string())?;
        check_against_run(&f, &shard, &digest, &run)?;
        let h = &shard.header;
        if let Some((prev, _)) = by_rank.get(&h.rank) {
            refuse!(
                Code::DuplicateRank,
                "duplicate shards for rank {}: {} and {}",
                h.rank,
                prev.display(),
                f.display()
            );
        }
        by_rank.insert(h.rank, (f, shard));
    }
    for r in 0..run.world_size {
        if !by_rank.contains_key(&r) {
            refuse!(Code::MissingRank, "rank {r} shard missing: expected {} in {}", shard_file_name(r), dir.display());
        }
    }
    let shards: Vec<Shard> = by_rank.into_values().map(|(_, s)| s).collect();
    let collectives = match_events(&shards)?;
    Ok(JoinedRun { run, shards, collectives })
}

/// A rank's decoded events and their sorted index.
type DecodedRank = (Vec<CollectiveEvent>, Vec<(Key, usize)>);

/// What the first pass of the streaming join keeps of one shard.
struct Scanned {
    path: PathBuf,
    header: ShardHeader,
    digest: String,
    tokens: Vec<TokenEvent>,
    stalls: Vec<Stall>,
    extract: RankExtract,
    version: u32,
    events_at: usize,
    events: u64,
    /// The file as pass 1 verified it, and whether that stamp proves nothing.
    stamp: (FileStamp, bool),
    /// Its events' faults, or how the merge reads them: `None` streams them
    /// from the file (recorded in key order), else they are kept decoded.
    order: Result<Option<DecodedRank>>,
}

/// A run joined by [`join_dir_streaming`]: the record and every rank's header and tokens.
pub struct StreamedRun {
    /// The run record.
    pub run: RunRecord,
    /// Headers by rank.
    pub headers: Vec<ShardHeader>,
    /// Token events by rank.
    pub tokens: Vec<Vec<TokenEvent>>,
    /// Stalls by rank ([`crate::evidence::stalls`]).
    pub stalls: Vec<Vec<Stall>>,
}

/// What the merge of the streaming join works on.
struct Engine {
    groups: BTreeMap<u32, Vec<u32>>,
    ctx: RankCtx,
    cursors: Vec<Cursor<'static>>,
}

/// [`join_dir`] without holding the run in memory: the same checks and
/// refusals (in the same order), the same joined collectives handed to
/// `emit` in the same order (two passes: docs/METHODS.md, "Join internals").
pub fn join_dir_streaming(
    dir: &Path,
    threads: usize,
    emit: &mut dyn FnMut(JoinedCollective) -> Result<()>,
) -> Result<StreamedRun> {
    let (run, mut e) = prepare_streaming(dir, threads)?;
    merge(&mut e.cursors, &e.groups, &e.ctx, emit)?;
    Ok(run)
}

/// Pass 1 of [`join_dir_streaming`], and the cursors of pass 2.
fn prepare_streaming(dir: &Path, threads: usize) -> Result<(StreamedRun, Engine)> {
    let (run, files) = run_and_files(dir)?;
    // the groups as the headers declare them, read ahead of the checks (a hint
    // to index events against while each shard is decoded; checked below)
    let peeked: Vec<Option<ShardHeader>> = par::map(&files, threads, &|f: &PathBuf| peek_header(f));
    let mut hint: Vec<&ShardHeader> = peeked.iter().flatten().collect();
    hint.sort_by_key(|h| h.rank);
    let hint_groups = check_groups(&hint).ok();
    drop(peeked);
    let scanned: Vec<Result<Scanned>> =
        par::map(&files, threads, &|f: &PathBuf| scan_shard(f, &run, hint_groups.as_ref()));
    let mut by_rank: BTreeMap<u32, Scanned> = BTreeMap::new();
    for s in scanned {
        let s = s?;
        if let Some(prev) = by_rank.get(&s.header.rank) {
            refuse!(
                Code::DuplicateRank,
                "duplicate shards for rank {}: {} and {}",
                s.header.rank,
                prev.path.display(),
                s.path.display()
            );
        }
        by_rank.insert(s.header.rank, s);
    }
    for r in 0..run.world_size {
        if !by_rank.contains_key(&r) {
            refuse!(Code::MissingRank, "rank {r} shard missing: expected {} in {}", shard_file_name(r), dir.display());
        }
    }
    let scanned: Vec<Scanned> = by_rank.into_values().collect();
    let headers: Vec<&ShardHeader> = scanned.iter().map(|s| &s.header).collect();
    let groups = check_groups(&headers)?;
    if hint_groups.as_ref() != Some(&groups) {
        refuse!(
            Code::Stale,
            "{}: a shard's header changed while join read it (its process groups read differently twice)",
            dir.display()
        );
    }
    let mut ctx = RankCtx::with_capacity(scanned.len());
    let mut cursors: Vec<Option<Cursor<'static>>> = Vec::with_capacity(scanned.len());
    let mut heads = Vec::with_capacity(scanned.len());
    let mut tokens = Vec::with_capacity(scanned.len());
    let mut stalls = Vec::with_capacity(scanned.len());
    let mut streamed: Vec<(PathBuf, u32, u32, usize, u64, super::cursor::Verified)> = Vec::new();
    for s in scanned {
        let rank = s.header.rank;
        match s.order? {
            Some((events, index)) => {
                cursors.push(Some(Cursor::Indexed { events: std::borrow::Cow::Owned(events), index, pos: 0 }))
            }
            None => {
                cursors.push(None);
                let verified = super::cursor::Verified { digest: s.digest, stamp: s.stamp.0, racy: s.stamp.1 };
                streamed.push((s.path, rank, s.version, s.events_at, s.events, verified));
            }
        }
        ctx.push(s.extract);
        heads.push(s.header);
        tokens.push(s.tokens);
        stalls.push(s.stalls);
    }
    // the streamed shards, opened again (each reads its first buffer)
    let opened = par::map(&streamed, threads, &|(p, rank, version, at, n, verified)| {
        StreamReader::open(p, *rank, *version, *at, *n, verified.clone())
    });
    for ((_, rank, ..), s) in streamed.iter().zip(opened) {
        cursors[*rank as usize] = Some(Cursor::Stream(Box::new(s?)));
    }
    let cursors = cursors.into_iter().map(|c| c.expect("every rank has a cursor")).collect();
    Ok((StreamedRun { run, headers: heads, tokens, stalls }, Engine { groups, ctx, cursors }))
}

/// Pass 1 of the streaming join on one shard file: read, verify and decode
/// it, check it against the run record, and index its events against the
/// process groups the headers declared (`hint`).
fn scan_shard(f: &Path, run: &RunRecord, hint: Option<&BTreeMap<u32, Vec<u32>>>) -> Result<Scanned> {
    let (bytes, stamp, racy) = limits::read_bounded_stamped(f, limits::MAX_SHARD_BYTES)?;
    let name = f.display().to_string();
    let (shard, digest) = Shard::decode_with_digest(&bytes, &name)?;
    check_against_run(f, &shard, &digest, run)?;
    let (events_at, events) = collectives_region(&bytes, &name)?;
    drop(bytes);
    let extract = rank_extract(&shard);
    let Shard { header, body } = shard;
    let stalls = stalls::of_rank(header.rank, &body.collectives);
    let order = match hint {
        None => Err(anyhow::anyhow!("process groups unknown")), // the group check refuses first
        Some(groups) => index_rank(header.rank, &body.collectives, groups).map(|index| {
            let in_order = index.iter().enumerate().all(|(i, x)| x.1 == i);
            (!in_order).then_some((body.collectives, index))
        }),
    };
    Ok(Scanned {
        path: f.to_path_buf(),
        version: header.format_version,
        header,
        digest,
        tokens: body.tokens,
        stalls,
        extract,
        events_at,
        events,
        stamp: (stamp, racy),
        order,
    })
}

/// A verified shard against the run record: same run, a rank that fits,
/// listed, and the bytes run.json recorded.
fn check_against_run(f: &Path, shard: &Shard, digest: &str, run: &RunRecord) -> Result<()> {
    let h = &shard.header;
    if h.run_id != run.run_id {
        refuse!(Code::ForeignShard, "{}: belongs to run {}, not {}", f.display(), h.run_id, run.run_id);
    }
    if h.world_size != run.world_size || h.rank >= run.world_size {
        refuse!(
            Code::ForeignShard,
            "{}: rank {} of {} does not fit run {} of {} ranks",
            f.display(),
            h.rank,
            h.world_size,
            run.run_id,
            run.world_size
        );
    }
    let Some(want) = run.shards.iter().find(|s| s.rank == h.rank) else {
        refuse!(Code::UnlistedRank, "{}: rank {} is not listed in run.json", f.display(), h.rank);
    };
    if want.sha256 != digest {
        refuse!(
            Code::Stale,
            "{}: rank {} shard differs from the one run.json recorded (sha256 {} vs {}): stale or replaced",
            f.display(),
            h.rank,
            digest,
            want.sha256
        );
    }
    Ok(())
}

/// The streaming join of `dir` and its summary; each joined collective is
/// also written to `events_out` (one JSON line each, as [`join_dir`]'s
/// caller writes them) where given, summarised on this thread as the merge makes it.
pub fn join_summary_streaming(
    dir: &Path,
    threads: usize,
    events_out: Option<&mut dyn std::io::Write>,
) -> Result<JoinSummary> {
    let (run, mut engine) = prepare_streaming(dir, threads)?;
    let mut b = SummaryBuilder::new(&run.run, run.headers.iter().collect());
    for t in &run.tokens {
        b.add_tokens(t);
    }
    for st in &run.stalls {
        b.add_stalls(st);
    }
    let mut out = events_out;
    let e = &mut engine;
    merge(&mut e.cursors, &e.groups, &e.ctx, &mut |c| {
        if let Some(w) = out.as_deref_mut() {
            serde_json::to_writer(&mut *w, &c)?;
            w.write_all(b"\n")?;
        }
        b.add(&c);
        Ok(())
    })?;
    Ok(b.finish())
}

/// Refuse a joined run whose shards are synthetic (`synth-shards`) where a
/// measurement is required; `what` names the stage.
pub fn refuse_synthetic(headers: &[&ShardHeader], run_id: &str, what: &str) -> Result<()> {
    if let Some(h) = headers.iter().find(|h| h.synthetic.is_some()) {
        let m = h.synthetic.as_ref().expect("found");
        refuse!(
            Code::Synthetic,
            "run {run_id}: rank {} shard is synthetic (generated by {}, seed {}), not a measurement; {what} takes \
                measured runs only",
            h.rank,
            m.generator,
            m.seed
        );
    }
    Ok(())
}

impl JoinedRun {
    /// [`refuse_synthetic`] of this run.
    pub fn refuse_synthetic(&self, what: &str) -> Result<()> {
        let headers: Vec<&ShardHeader> = self.shards.iter().map(|s| &s.header).collect();
        refuse_synthetic(&headers, &self.run.run_id, what)
    }
}
