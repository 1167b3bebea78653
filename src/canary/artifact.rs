//! The canary artifact (`canary.json`, format version 2; format 1, without
//! [`Canary::left_out_p2p`], is still read): a compiled, folded form of a
//! communication trace, bound to its source by digest.
//!
//! Produces the artifact written by `canary compile`, `canary reduce` and the
//! baselines of `canary verify`; [`read`] is its one reading entry point.
//! Refuses, naming the file: bytes that are not an artifact, another format
//! version, a recorded `digest` that is not the SHA-256 of its own canonical
//! content, or bytes not exactly those the writer produces (one changed byte
//! anywhere is refused as `DIGEST_MISMATCH`).
use crate::canary::fold::Node;
use crate::core::collective::TraceReduceOp;
use crate::core::refusal::{self, Code};
use crate::core::{fsutil, limits};
use crate::evidence::commtrace::{json_shape, CollectiveKind, JsonShape, TraceDtype, TraceGroup, UnknownField};
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// Current on-disk version of the canary artifact.
pub const CANARY_FORMAT_VERSION: u32 = 2;

/// Largest artifact read (bytes).
pub(crate) const MAX_ARTIFACT_BYTES: u64 = 1 << 30;

/// The most collectives one replay pass of an artifact may issue on one rank
/// (the bound of `rank`'s own phases), and the most its body may expand to at
/// the source's counts: an artifact past either is refused before anything
/// is expanded.
pub const MAX_PASS_COLLECTIVES: u64 = 10_000_000;

/// The most collectives one replay pass may issue over all ranks (what the
/// expansion holds in memory at once).
pub const MAX_PASS_EVENTS: u64 = 50_000_000;

/// How an artifact was made.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "kebab-case")]
pub enum Method {
    /// `canary compile`: folded loops, bounded histograms, fewer iterations.
    Compiled,
    /// `canary compile --lossless`: folded loops with every recorded value, the source's full count.
    Lossless,
    /// Baseline: events drawn uniformly at random.
    RandomSample,
    /// Baseline: the most frequent operation identities, one event each.
    FrequencySample,
    /// Baseline: one representative per cluster of (size, gap).
    ClusterSample,
    /// Baseline: one event per stratum of the gap distribution.
    StratifiedGapSample,
    /// Baseline: the first N events.
    HeadSample,
    /// `canary reduce`: delta debugging on the ranking decision only.
    Reduced,
}

impl Method {
    /// The user-facing name.
    pub fn name(self) -> &'static str {
        match self {
            Method::Compiled => "compiled",
            Method::Lossless => "lossless",
            Method::RandomSample => "random",
            Method::FrequencySample => "frequency",
            Method::ClusterSample => "cluster",
            Method::StratifiedGapSample => "stratified-gap",
            Method::HeadSample => "head",
            Method::Reduced => "reduced",
        }
    }
    /// Whether this is a deliberately simple sample a canary must beat.
    pub fn is_baseline(self) -> bool {
        matches!(
            self,
            Method::RandomSample
                | Method::FrequencySample
                | Method::ClusterSample
                | Method::StratifiedGapSample
                | Method::HeadSample
        )
    }
}

/// The label every reduced artifact carries wherever it appears.
pub(crate) const REDUCED_LABEL: &str = "decision-preserving, not source-verified";

/// What the artifact was made from.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct SourceBinding {
    /// Path as given to `compile`.
    pub path: String,
    /// SHA-256 of the source file's bytes.
    pub file_sha256: String,
    /// SHA-256 of the source's canonical JSON ([`canonical_sha256`]): the
    /// same trace written differently hashes the same.
    pub canonical_sha256: String,
    /// Where the source itself came from (`kineto`, `execution-trace`, `run`, `synthetic`).
    pub origin: String,
    /// Ranks.
    pub world_size: u32,
    /// Collectives per rank, in rank order.
    pub collectives_per_rank: Vec<u64>,
    /// Collectives per kind, all ranks.
    pub collectives_per_kind: BTreeMap<String, u64>,
    /// Bytes of the source file.
    pub file_bytes: u64,
    /// Fields the source does not know, and why (carried over: the artifact knows no more).
    pub unknown: Vec<UnknownField>,
}

/// One operation identity on one rank: phase, kind, bytes, dtype, group with
/// its ordered members, root or peer, stream.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Identity {
    /// Phase of the source run, where the source is a CommCanary run.
    pub phase: Option<String>,
    /// Kind.
    pub kind: CollectiveKind,
    /// The name the source recorded.
    pub source_name: String,
    /// Element type.
    pub dtype: TraceDtype,
    /// Input elements.
    pub in_elems: u64,
    /// Output elements.
    pub out_elems: u64,
    /// All-to-all splits sent.
    pub in_split_elems: Option<Vec<u64>>,
    /// All-to-all splits received.
    pub out_split_elems: Option<Vec<u64>>,
    /// Group name (its ordered members are in the artifact's `groups`).
    pub group: String,
    /// Root's global rank.
    pub root: Option<u32>,
    /// Peer's global rank.
    pub peer: Option<u32>,
    /// Device stream.
    pub stream: Option<u64>,
    /// The recorded reduction where not a sum (an MPI capture's); absent otherwise, and in artifacts made before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op: Option<TraceReduceOp>,
}

impl Identity {
    /// Input bytes.
    pub fn in_bytes(&self) -> u64 {
        self.in_elems.saturating_mul(self.dtype.size_bytes())
    }
}

/// A bounded histogram of one field: (representative value, count) per
/// non-empty bucket of an HdrHistogram at `significant_digits` (Tene,
/// HdrHistogram: every value within 10^-digits relative of its bucket's).
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct Histogram {
    /// Buckets in increasing value order: (value ns, count).
    pub buckets: Vec<(u64, u64)>,
}

impl Histogram {
    /// Values recorded.
    pub fn count(&self) -> u64 {
        self.buckets.iter().map(|b| b.1).sum()
    }
    /// The value at quantile `q` in [0, 1] (nearest rank on the bucket counts).
    pub fn quantile(&self, q: f64) -> Option<u64> {
        let n = self.count();
        if n == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * n as f64).ceil() as u64).clamp(1, n);
        let mut seen = 0;
        for &(v, c) in &self.buckets {
            seen += c;
            if seen >= rank {
                return Some(v);
            }
        }
        self.buckets.last().map(|b| b.0)
    }
    /// Mean of the bucket values.
    pub fn mean(&self) -> Option<f64> {
        let n = self.count();
        (n > 0).then(|| self.buckets.iter().map(|&(v, c)| v as f64 * c as f64).sum::<f64>() / n as f64)
    }
}

/// A field's values in one slot on one rank: a histogram, or every value in order (lossless).
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "snake_case")]
pub enum Values {
    /// Bounded histogram under the declared error budget.
    Histogram(Histogram),
    /// Every recorded value, in occurrence order.
    Exact(Vec<u64>),
    /// The source does not know this field here.
    Unknown,
}

impl Values {
    /// How many values it stands for (`None` when unknown).
    pub fn count(&self) -> Option<u64> {
        match self {
            Values::Histogram(h) => Some(h.count()),
            Values::Exact(v) => Some(v.len() as u64),
            Values::Unknown => None,
        }
    }
}

/// One rank's part of a slot.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct RankSlot {
    /// World rank.
    pub rank: u32,
    /// Index into the artifact's `identities`.
    pub identity: u32,
    /// Gap before the collective (previous collective's end to this one's start), ns.
    pub gap_ns: Values,
    /// Recorded compute in that gap (sum of kernel durations), ns.
    pub compute_ns: Values,
    /// The collective's own span (device interval where recorded, else host operator), ns.
    pub span_ns: Values,
}

/// One leaf of the folded body: the same operation position on every rank.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Slot {
    /// Source occurrences folded into this slot (per rank).
    pub occurrences: u64,
    /// Per rank, in rank order.
    pub ranks: Vec<RankSlot>,
}

/// The declared error budget of each stored field.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ErrorBudget {
    /// Significant decimal digits of every histogram (2: every value within 1% of its bucket).
    pub significant_digits: u8,
    /// The largest relative error of a stored gap, compute or span value, in parts per million
    /// (integers only: the artifact's digest must survive a JSON round trip).
    pub max_relative_error_ppm: u64,
}

/// How many iterations the canary replays, and why.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ReplayPlan {
    /// Iterations of the main loop replayed per pass.
    pub iterations: u64,
    /// Iterations of the main loop in the source.
    pub source_iterations: u64,
    /// The rule that set `iterations`, in words.
    pub rule: String,
    /// Collectives one replay pass issues per rank.
    pub collectives_per_pass: Vec<u64>,
    /// Seed of the stratified draws that expand the histograms.
    pub seed: u64,
}

/// One approximation the artifact makes of its source.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Approximation {
    /// What is approximated.
    pub what: String,
    /// How, and its bound where it has one.
    pub detail: String,
}

/// Sizes (integers only: the artifact's digest must survive a JSON round trip;
/// the ratios, each with its direction, are methods).
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Sizes {
    /// Collectives in the source, all ranks.
    pub source_events: u64,
    /// Operations the artifact stores (slots x ranks).
    pub artifact_events: u64,
    /// Collectives one canary replay pass issues, all ranks.
    pub replayed_events: u64,
}

/// A compiled canary.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Canary {
    /// On-disk format version ([`CANARY_FORMAT_VERSION`]).
    pub format_version: u32,
    /// How it was made.
    pub method: Method,
    /// The label it carries (`decision-preserving, not source-verified` for reduced artifacts).
    pub label: String,
    /// The source it was made from.
    pub source: SourceBinding,
    /// Process groups, as in the source.
    pub groups: Vec<TraceGroup>,
    /// Operation identities.
    pub identities: Vec<Identity>,
    /// The folded body (leaves index `slots`).
    pub body: Vec<Node>,
    /// Index path of the main loop in `body` (the loop whose count the replay sets), if any.
    pub main_loop: Option<Vec<u32>>,
    /// Leaves.
    pub slots: Vec<Slot>,
    /// Error budget of the stored values.
    pub budget: ErrorBudget,
    /// Iterations replayed.
    pub replay: ReplayPlan,
    /// Every approximation made.
    pub approximations: Vec<Approximation>,
    /// Sizes and ratios.
    pub sizes: Sizes,
    /// An MPI capture's point-to-point operations (`mpi.p2p`), which the
    /// canary does not replay (its folding keeps collectives only): counted,
    /// never silently dropped (format 2; absent before and where the source
    /// has none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub left_out_p2p: Option<LeftOutP2p>,
    /// SHA-256 of this document's canonical JSON with `digest` empty.
    pub digest: String,
}

/// The point-to-point traffic of the source a canary leaves out.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct LeftOutP2p {
    /// Per rank (in rank order): the source's point-to-point operations (a `Sendrecv` is two).
    pub operations_per_rank: Vec<u64>,
    /// Per rank: the bytes those operations sent.
    pub bytes_sent_per_rank: Vec<u64>,
    /// What leaving them out means for the canary's pick.
    pub consequence: String,
}

impl LeftOutP2p {
    /// The one-line statement `canary compile` and `canary verify` print.
    pub fn line(&self) -> String {
        format!(
            "left out: point-to-point: {} operations, {} bytes sent over all ranks ({} per rank at most) are not \
                replayed by the canary: {}",
            self.operations_per_rank.iter().sum::<u64>(),
            self.bytes_sent_per_rank.iter().sum::<u64>(),
            self.operations_per_rank.iter().max().copied().unwrap_or(0),
            self.consequence
        )
    }
}

/// SHA-256 of a value's canonical JSON: compact, fields in the type's
/// declaration order, maps in key order (every map here is a `BTreeMap`), so
/// the same content written with other whitespace or key order hashes the same
/// once read back into the type.
pub fn canonical_sha256<T: Serialize>(v: &T) -> Result<String> {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    serde_json::to_writer(&mut h, v).context("canonical form")?;
    Ok(hex::encode(h.finalize()))
}

impl Canary {
    /// The digest this artifact should carry.
    pub fn compute_digest(&self) -> Result<String> {
        let mut c = self.clone();
        c.digest.clear();
        canonical_sha256(&c)
    }
    /// Set `digest`.
    pub fn seal(mut self) -> Result<Self> {
        self.digest = self.compute_digest()?;
        Ok(self)
    }
    /// Write it (atomically, never replacing).
    pub fn write(&self, path: &Path) -> Result<()> {
        let bytes = serde_json::to_vec_pretty(self)?;
        fsutil::write_new_atomic(path, &bytes)
    }
    /// Whether it was made by `reduce` (and must say so).
    pub fn is_reduced(&self) -> bool {
        self.method == Method::Reduced
    }
}

/// What an artifact's body expands to, computed from the body itself (never
/// from what the artifact says of itself).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Ranks.
    pub world: u64,
    /// Collectives one replay pass issues per rank (main loop at `replay.iterations`).
    pub per_pass: u64,
    /// Collectives the body expands to per rank at its stored counts.
    pub at_counts: u64,
    /// Slots stored.
    pub slots: u64,
}

impl Shape {
    /// Operations stored, all ranks.
    pub fn artifact_events(&self) -> u64 {
        self.slots * self.world
    }
    /// Collectives one pass replays, all ranks.
    pub fn replayed_events(&self) -> u64 {
        self.per_pass * self.world
    }
}

/// Collectives `nodes` expand to, `None` past `max` (or on overflow); loops
/// nested deeper than `depth_left` are refused the same way.
fn expanded_checked(
    nodes: &[Node],
    main: Option<(usize, u64)>,
    nslots: usize,
    max: u64,
    depth_left: u32,
) -> Result<Option<u64>> {
    let mut total = 0u64;
    for (i, n) in nodes.iter().enumerate() {
        let add = match n {
            Node::Op(s) => {
                if *s as usize >= nslots {
                    crate::refuse!(Code::BadStructure, "the body names slot {s}; the artifact has {nslots} slots");
                }
                1
            }
            Node::Loop { count, body } => {
                if depth_left == 0 {
                    crate::refuse!(Code::OverLimit, "loops nested more than 64 deep");
                }
                let k = match main {
                    Some((m, it)) if m == i => it,
                    _ => *count,
                };
                let Some(inner) = expanded_checked(body, None, nslots, max, depth_left - 1)? else { return Ok(None) };
                match k.checked_mul(inner) {
                    Some(v) => v,
                    None => return Ok(None),
                }
            }
        };
        total = match total.checked_add(add) {
            Some(t) if t <= max => t,
            _ => return Ok(None),
        };
    }
    Ok(Some(total))
}

/// Check an artifact's own consistency before anything is expanded or run:
/// every slot and identity it names exists, each slot holds every rank, the
/// main loop names a loop, its counts multiply without overflow to at most
/// [`MAX_PASS_COLLECTIVES`] per rank, and what it says of itself (replay
/// plan, sizes, budget) is what its body and source binding give. Refused
/// with `BAD_STRUCTURE` (or `OVER_LIMIT` for an expansion past the bound).
pub fn check_consistency(c: &Canary) -> Result<Shape> {
    let world = c.source.world_size as u64;
    if world == 0 || world > limits::MAX_WORLD_SIZE as u64 {
        crate::refuse!(Code::BadStructure, "source.world_size is {world}, outside 1..={}", limits::MAX_WORLD_SIZE);
    }
    if c.source.collectives_per_rank.len() as u64 != world {
        crate::refuse!(
            Code::BadStructure,
            "source.collectives_per_rank lists {} ranks, source.world_size is {world}",
            c.source.collectives_per_rank.len()
        );
    }
    let source_events = c.source.collectives_per_rank.iter().try_fold(0u64, |a, &b| a.checked_add(b));
    if source_events != Some(c.sizes.source_events) {
        crate::refuse!(
            Code::BadStructure,
            "sizes.source_events is {}, but source.collectives_per_rank sums to {}",
            c.sizes.source_events,
            source_events.map_or("more than 2^64".to_string(), |v| v.to_string())
        );
    }
    let ranks0: Vec<u32> = c.slots.first().map(|s| s.ranks.iter().map(|r| r.rank).collect()).unwrap_or_default();
    for (si, slot) in c.slots.iter().enumerate() {
        if slot.ranks.len() as u64 != world {
            crate::refuse!(Code::BadStructure, "slot {si} holds {} ranks; the source has {world}", slot.ranks.len());
        }
        for (ri, rs) in slot.ranks.iter().enumerate() {
            if rs.rank != ranks0[ri] {
                crate::refuse!(
                    Code::BadStructure,
                    "slot {si} place {ri} is rank {}, slot 0 has rank {} there",
                    rs.rank,
                    ranks0[ri]
                );
            }
            if rs.identity as usize >= c.identities.len() {
                crate::refuse!(
                    Code::BadStructure,
                    "slot {si} rank {} names identity {}; the artifact has {}",
                    rs.rank,
                    rs.identity,
                    c.identities.len()
                );
            }
            for (field, v) in [("gap_ns", &rs.gap_ns), ("compute_ns", &rs.compute_ns), ("span_ns", &rs.span_ns)] {
                if let Values::Histogram(h) = v {
                    let n = h.buckets.iter().try_fold(0u64, |a, b| a.checked_add(b.1));
                    if n.is_none() || h.buckets.windows(2).any(|w| w[0].0 >= w[1].0) {
                        crate::refuse!(
                            Code::BadStructure,
                            "slot {si} rank {} {field}: histogram buckets out of order or counts past 2^64",
                            rs.rank
                        );
                    }
                }
            }
        }
    }
    // the main loop: one top-level loop, replayed 1 to its own count times
    let main = match c.main_loop.as_deref() {
        None => {
            if c.replay.iterations != 1 || c.replay.source_iterations != 1 {
                crate::refuse!(
                    Code::BadStructure,
                    "no main loop, yet replay.iterations is {} and replay.source_iterations {} (both must be 1)",
                    c.replay.iterations,
                    c.replay.source_iterations
                );
            }
            None
        }
        Some([m]) => match c.body.get(*m as usize) {
            Some(Node::Loop { count, .. }) => {
                if c.replay.source_iterations != *count {
                    crate::refuse!(
                        Code::BadStructure,
                        "replay.source_iterations is {}, but the main loop's count is {count}",
                        c.replay.source_iterations
                    );
                }
                if c.replay.iterations == 0 || c.replay.iterations > *count {
                    crate::refuse!(
                        Code::BadStructure,
                        "replay.iterations is {}; the main loop runs 1 to {count} times",
                        c.replay.iterations
                    );
                }
                Some((*m as usize, c.replay.iterations))
            }
            _ => crate::refuse!(Code::BadStructure, "main_loop {:?} names no top-level loop of the body", c.main_loop),
        },
        Some(p) => crate::refuse!(Code::BadStructure, "main_loop {p:?} names no top-level loop of the body"),
    };
    let over =
        |what: &str| {
            refusal::refuse(
            Code::OverLimit,
            format!("the body expands to more than {MAX_PASS_COLLECTIVES} collectives per rank {what} (its loop counts \
                multiply past the bound)"),
        )
        };
    let per_pass = expanded_checked(&c.body, main, c.slots.len(), MAX_PASS_COLLECTIVES, 64)?
        .ok_or_else(|| over("per replay pass"))?;
    let at_counts = expanded_checked(&c.body, None, c.slots.len(), MAX_PASS_COLLECTIVES, 64)?
        .ok_or_else(|| over("at its stored counts"))?;
    if per_pass.saturating_mul(world) > MAX_PASS_EVENTS {
        crate::refuse!(
            Code::OverLimit,
            "one replay pass issues {per_pass} collectives on each of {world} ranks, over \
            the limit of {MAX_PASS_EVENTS} in all"
        );
    }
    if c.replay.collectives_per_pass.len() as u64 != world
        || c.replay.collectives_per_pass.iter().any(|&n| n != per_pass)
    {
        crate::refuse!(
            Code::BadStructure,
            "replay.collectives_per_pass is {:?}, but the body replays {per_pass} per rank",
            c.replay.collectives_per_pass
        );
    }
    let shape = Shape { world, per_pass, at_counts, slots: c.slots.len() as u64 };
    if c.sizes.artifact_events != shape.artifact_events() || c.sizes.replayed_events != shape.replayed_events() {
        crate::refuse!(
            Code::BadStructure,
            "sizes say {} events stored and {} replayed per pass; the body has {} and replays {}",
            c.sizes.artifact_events,
            c.sizes.replayed_events,
            shape.artifact_events(),
            shape.replayed_events()
        );
    }
    // a compiled artifact is its source folded: at its counts, the source's length
    if matches!(c.method, Method::Compiled | Method::Lossless)
        && c.source.collectives_per_rank.iter().any(|&n| n != at_counts)
    {
        crate::refuse!(
            Code::BadStructure,
            "the body at its counts has {at_counts} collectives per rank; its source had {:?}",
            c.source.collectives_per_rank
        );
    }
    let b = &c.budget;
    let want_ppm = budget_ppm(c.method, b.significant_digits)?;
    if b.max_relative_error_ppm != want_ppm {
        crate::refuse!(
            Code::BadStructure,
            "budget.max_relative_error_ppm is {}; a {} artifact at {} significant digits has {want_ppm}",
            b.max_relative_error_ppm,
            c.method.name(),
            b.significant_digits
        );
    }
    Ok(shape)
}

/// The error budget the tool's policy gives a method at `digits` significant
/// digits (ppm): `canary compile`'s histograms keep every value within
/// 10^-digits, for 1 to 5 digits; every other method stores exact values.
pub fn budget_ppm(m: Method, digits: u8) -> Result<u64> {
    match (m, digits) {
        (Method::Compiled, 1..=5) => Ok(10u64.pow(6 - digits as u32)),
        (Method::Compiled, d) => {
            crate::refuse!(
                Code::BadStructure,
                "a compiled artifact at {d} significant digits: `canary compile` makes 1 to 5"
            )
        }
        (_, 0) => Ok(0),
        (m, d) => crate::refuse!(
            Code::BadStructure,
            "a {} artifact at {d} significant digits: it stores exact values (0)",
            m.name()
        ),
    }
}

/// Read an artifact and check its format and its own digest.
pub fn read(path: &Path) -> Result<(Canary, Vec<u8>)> {
    const WRITES: &str =
        "a canary artifact is the file `commcanary canary compile TRACE -o FILE` (or `canary reduce`) writes";
    let bytes = limits::read_bounded(path, MAX_ARTIFACT_BYTES).map_err(|e| {
        let missing = e
            .chain()
            .any(|c| c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::NotFound));
        match refusal::code_of(&e) {
            _ if missing => refusal::refuse(
                Code::NoSuchInput,
                format!("canary artifact {}: no such file; {WRITES}", path.display()),
            ),
            Some(_) => e.context(format!("reading canary artifact {}", path.display())),
            None => refusal::refuse(Code::BadInput, format!("reading canary artifact {}: {e:#}", path.display())),
        }
    })?;
    let c = from_slice(&bytes).map_err(|e| match refusal::code_of(&e) {
        Some(Code::UnsupportedVersion) => e.context(format!(
            "canary artifact {}: compile it again from its source trace with this build (`commcanary canary compile`)",
            path.display()
        )),
        Some(_) => e.context(format!("canary artifact {}", path.display())),
        None if json_shape(&bytes) == Some(JsonShape::CommTrace) => refusal::refuse(
            Code::BadFormat,
            format!(
                "{}: a communication trace, not a canary artifact: compile it first (`commcanary canary compile {} -o \
                    OUT.canary.json`)",
                path.display(),
                path.display()
            ),
        ),
        None => refusal::refuse(Code::BadFormat, format!("{}: not a canary artifact: {e:#}; {WRITES}", path.display())),
    })?;
    Ok((c, bytes))
}

/// Decode and check an artifact.
pub fn from_slice(bytes: &[u8]) -> Result<Canary> {
    let v: serde_json::Value = serde_json::from_slice(bytes).context("not JSON")?;
    match v.get("format_version").and_then(|x| x.as_u64()) {
        // format 1 lacks only `left_out_p2p`, read as absent
        Some(n) if (1..=CANARY_FORMAT_VERSION as u64).contains(&n) => {}
        Some(n) => crate::refuse!(
            Code::UnsupportedVersion,
            "canary format version {n} (this build reads 1 to {CANARY_FORMAT_VERSION})"
        ),
        None => anyhow::bail!("no format_version"),
    }
    let c: Canary = serde_json::from_value(v)?;
    let want = c.compute_digest()?;
    if want != c.digest {
        crate::refuse!(
            Code::DigestMismatch,
            "its content hashes to {want}, its recorded digest is {:?}: the artifact was changed after it was written",
            c.digest
        );
    }
    // every byte as the writer wrote it: a change that leaves the content alone (whitespace) is a change too
    if serde_json::to_vec_pretty(&c)? != bytes {
        crate::refuse!(
            Code::DigestMismatch,
            "its content matches its digest, but its bytes are not the ones `canary` wrote: the file was edited"
        );
    }
    // a digest only says the bytes are the writer's: what they say must hold too
    check_consistency(&c)?;
    Ok(c)
}
