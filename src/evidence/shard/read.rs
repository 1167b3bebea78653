//! Reading shards: consumes a shard's bytes (or its file) and produces a
//! verified [`Shard`], decoding every format version from 1 (older bodies
//! converted to today's records). Refuses a wrong magic, an unknown version,
//! truncation, trailing bytes, a digest mismatch, lengths over `core::limits`
//! and an undecodable body. Use [`Shard::read`] or [`Shard::decode`]; the
//! streaming join walks the events with [`collectives_region`] and [`decode_collective_event`].
//! Collective events are read by hand (`super::fast`) and by serde only
//! where the hand reader is unsure, so results and errors are bincode's.
use super::{bincode_cfg, Shard, MAGIC, SHARD_FORMAT_VERSION, TRAILER};
use super::{
    CollectiveEvent, CollectiveKind, ComputeEvent, DeviceWait, FillRecord, KernelEvent, ReplayTiming, ShardBody,
    ShardHeader, TokenEvent, TraceDtype,
};
use crate::core::limits;
use crate::core::refusal::{self, Code};
use crate::core::workload::Phase;
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::Path;

/// A collective event as formats 1 to 5 encoded it (no root, no peer).
#[derive(Serialize, Deserialize)]
struct CollectiveEventV5 {
    phase: Phase,
    kind: CollectiveKind,
    group: u32,
    seq: u64,
    bytes: u64,
    dtype: TraceDtype,
    token: Option<u32>,
    layer: Option<u32>,
    iter: Option<u32>,
    warmup: bool,
    host_issue_ns: u64,
    host_return_ns: u64,
    wait_start_ns: u64,
    wait_end_ns: u64,
    device_start_ns: Option<u64>,
    device_end_ns: Option<u64>,
    injected_delay_ns: Option<u64>,
    replay: Option<ReplayTiming>,
    fill: Option<FillRecord>,
    checked: bool,
}

impl From<CollectiveEventV5> for CollectiveEvent {
    fn from(e: CollectiveEventV5) -> Self {
        CollectiveEvent {
            phase: e.phase,
            kind: e.kind,
            group: e.group,
            seq: e.seq,
            bytes: e.bytes,
            dtype: e.dtype,
            token: e.token,
            layer: e.layer,
            iter: e.iter,
            warmup: e.warmup,
            host_issue_ns: e.host_issue_ns,
            host_return_ns: e.host_return_ns,
            wait_start_ns: e.wait_start_ns,
            wait_end_ns: e.wait_end_ns,
            device_start_ns: e.device_start_ns,
            device_end_ns: e.device_end_ns,
            injected_delay_ns: e.injected_delay_ns,
            replay: e.replay,
            fill: e.fill,
            checked: e.checked,
            root: None,
            peer: None,
        }
    }
}

/// Format-3 to 5 body, read for compatibility.
#[derive(Serialize, Deserialize)]
struct ShardBodyV5 {
    collectives: Vec<CollectiveEventV5>,
    compute: Vec<ComputeEvent>,
    tokens: Vec<TokenEvent>,
    kernels: Vec<KernelEvent>,
    kernel_names: Vec<String>,
    device_waits: Vec<DeviceWait>,
}

/// What follows the collectives in a body of format 3 or later (whose
/// collectives contain no string or sequence, so bincode's decode limit
/// counts the same claims whether they are decoded with the rest or not).
#[derive(Deserialize)]
struct BodyRest {
    compute: Vec<ComputeEvent>,
    tokens: Vec<TokenEvent>,
    kernels: Vec<KernelEvent>,
    kernel_names: Vec<String>,
    device_waits: Vec<DeviceWait>,
}

/// Format-2 body, read for compatibility.
#[derive(Serialize, Deserialize)]
struct ShardBodyV2 {
    collectives: Vec<CollectiveEventV5>,
    compute: Vec<ComputeEvent>,
    tokens: Vec<TokenEvent>,
    kernels: Vec<KernelEvent>,
    kernel_names: Vec<String>,
}

/// Format-1 body, read for compatibility.
#[derive(Serialize, Deserialize)]
struct ShardBodyV1 {
    collectives: Vec<CollectiveEventV5>,
    compute: Vec<ComputeEvent>,
    tokens: Vec<TokenEvent>,
}

/// Decoding configuration with a limit of `N` claimed bytes: bincode checks
/// every length prefix (and the in-memory size of what it decodes) against it
/// before allocating.
fn bincode_decode_cfg<const N: usize>(
) -> bincode::config::Configuration<bincode::config::LittleEndian, bincode::config::Varint, bincode::config::Limit<N>> {
    bincode::config::standard().with_limit::<N>()
}

/// Decode a shard body of format `version` (`name` for messages). bincode's
/// decode limit is 16 times the body's size class (1 MiB, 16 MiB, then
/// [`crate::core::limits::MAX_SHARD_BODY_DECODE_BYTES`]), so no length prefix can
/// make it allocate more; a body over [`crate::core::limits::MAX_SHARD_BODY_BYTES`]
/// is refused. Trailing bytes are refused.
pub fn decode_shard_body(version: u32, body_bytes: &[u8], name: &str) -> Result<ShardBody> {
    if body_bytes.len() > limits::MAX_SHARD_BODY_BYTES {
        return Err(refusal::refuse(
            Code::OverLimit,
            format!(
                "{name}: body of {} bytes is over the limit of {} bytes",
                body_bytes.len(),
                limits::MAX_SHARD_BODY_BYTES
            ),
        ));
    }
    let (body, used) = match body_bytes.len() {
        n if n <= 1 << 20 => decode_body(version, body_bytes, bincode_decode_cfg::<{ 16 << 20 }>(), name)?,
        n if n <= 16 << 20 => decode_body(version, body_bytes, bincode_decode_cfg::<{ 256 << 20 }>(), name)?,
        _ => decode_body(version, body_bytes, bincode_decode_cfg::<{ limits::MAX_SHARD_BODY_DECODE_BYTES }>(), name)?,
    };
    if used != body_bytes.len() {
        crate::refuse!(Code::BadFormat, "{name}: body has {} undecoded trailing bytes", body_bytes.len() - used);
    }
    Ok(body)
}

/// Decode a body of `version` under `cfg` (whose limit bounds every allocation).
fn decode_body<C: bincode::config::Config>(
    version: u32,
    body_bytes: &[u8],
    cfg: C,
    name: &str,
) -> Result<(ShardBody, usize)> {
    // formats 3 on: the collectives read by hand, the rest by serde; where
    // either is unsure, the whole body by serde (its result or its error)
    if version >= 3 {
        if let Some((collectives, at)) = super::fast::collectives(version, body_bytes) {
            if let Ok((rest, used)) = bincode::serde::decode_from_slice::<BodyRest, _>(&body_bytes[at..], cfg) {
                let BodyRest { compute, tokens, kernels, kernel_names, device_waits } = rest;
                return Ok((
                    ShardBody { collectives, compute, tokens, kernels, kernel_names, device_waits },
                    at + used,
                ));
            }
        }
    }
    Ok(match version {
        1 => {
            let (b, used): (ShardBodyV1, usize) =
                bincode::serde::decode_from_slice(body_bytes, cfg).map_err(|e| body_fault(name, e))?;
            (
                ShardBody {
                    collectives: b.collectives.into_iter().map(Into::into).collect(),
                    compute: b.compute,
                    tokens: b.tokens,
                    ..Default::default()
                },
                used,
            )
        }
        2 => {
            let (b, used): (ShardBodyV2, usize) =
                bincode::serde::decode_from_slice(body_bytes, cfg).map_err(|e| body_fault(name, e))?;
            let body = ShardBody {
                collectives: b.collectives.into_iter().map(Into::into).collect(),
                compute: b.compute,
                tokens: b.tokens,
                kernels: b.kernels,
                kernel_names: b.kernel_names,
                ..Default::default()
            };
            (body, used)
        }
        3..=5 => {
            let (b, used): (ShardBodyV5, usize) =
                bincode::serde::decode_from_slice(body_bytes, cfg).map_err(|e| body_fault(name, e))?;
            let body = ShardBody {
                collectives: b.collectives.into_iter().map(Into::into).collect(),
                compute: b.compute,
                tokens: b.tokens,
                kernels: b.kernels,
                kernel_names: b.kernel_names,
                device_waits: b.device_waits,
            };
            (body, used)
        }
        _ => bincode::serde::decode_from_slice(body_bytes, cfg).map_err(|e| body_fault(name, e))?,
    })
}

/// One collective event of a format-`version` body, from the front of
/// `bytes` (the streaming join reads a shard's events one at a time, after
/// the whole shard verified): the event and the bytes it took.
/// The event is written into `e` (whatever it held; on an error, `e` holds
/// nothing meaningful).
pub(crate) fn decode_collective_event(
    version: u32,
    bytes: &[u8],
    e: &mut CollectiveEvent,
) -> std::result::Result<usize, bincode::error::DecodeError> {
    match super::fast::collective_event_into(version, bytes, e) {
        Some(used) => Ok(used),
        None => decode_collective_event_serde(version, bytes).map(|(got, used)| {
            *e = got;
            used
        }),
    }
}

/// [`decode_collective_event`] through serde alone.
pub(super) fn decode_collective_event_serde(
    version: u32,
    bytes: &[u8],
) -> std::result::Result<(CollectiveEvent, usize), bincode::error::DecodeError> {
    if version >= 6 {
        bincode::serde::decode_from_slice(bytes, bincode_cfg())
    } else {
        bincode::serde::decode_from_slice::<CollectiveEventV5, _>(bytes, bincode_cfg()).map(|(e, n)| (e.into(), n))
    }
}

/// Where a verified shard's collective events start (a byte offset into the
/// file) and how many there are: every body version begins with them (a
/// varint count, then the events).
pub(crate) fn collectives_region(bytes: &[u8], name: &str) -> Result<(usize, u64)> {
    let bad = || refusal::refuse(Code::BadFormat, format!("{name}: body does not start with its collectives"));
    let hlen = bytes.get(12..20).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes"))).ok_or_else(bad)?;
    let body =
        usize::try_from(hlen).ok().and_then(|h| h.checked_add(28)).filter(|&b| b <= bytes.len()).ok_or_else(bad)?;
    let (count, used): (u64, usize) = bincode::decode_from_slice(&bytes[body..], bincode_cfg()).map_err(|_| bad())?;
    Ok((body + used, count))
}

/// The header of the shard at `path`, read from the front of the file
/// without its body or any check of the trailer; `None` where it does not
/// parse. Only a hint (the streaming join learns the process groups from it
/// before the shards verify); nothing read this way is trusted.
pub(crate) fn peek_header(path: &Path) -> Option<ShardHeader> {
    use std::io::Read;
    let mut f = std::fs::File::open(path).ok()?;
    let mut pre = [0u8; 20];
    f.read_exact(&mut pre).ok()?;
    if &pre[..8] != MAGIC {
        return None;
    }
    let hlen = usize::try_from(u64::from_le_bytes(pre[12..20].try_into().expect("8 bytes"))).ok()?;
    if hlen > limits::MAX_SHARD_HEADER_BYTES {
        return None;
    }
    let mut h = vec![0u8; hlen];
    f.read_exact(&mut h).ok()?;
    serde_json::from_slice(&h).ok()
}

/// A body decode error: a length over the limit (or past the end of the body) is a named refusal.
fn body_fault(name: &str, e: bincode::error::DecodeError) -> anyhow::Error {
    match e {
        bincode::error::DecodeError::LimitExceeded => refusal::refuse(
            Code::OverLimit,
            format!(
                "{name}: body declares lengths over the decode limit (16 times its own size, at most {} bytes)",
                limits::MAX_SHARD_BODY_DECODE_BYTES
            ),
        ),
        e => refusal::refuse(Code::BadFormat, format!("{name}: body does not decode: {e}")),
    }
}

impl Shard {
    /// Decode and verify bytes; `name` is used in error messages.
    pub fn decode(bytes: &[u8], name: &str) -> Result<Self> {
        Self::decode_with_digest(bytes, name).map(|(s, _)| s)
    }

    /// [`decode`](Self::decode), and the SHA-256 (hex) of all of `bytes`,
    /// the digest `run.json` records: one pass of the hash gives both it and
    /// the trailer's digest of everything before the trailer.
    pub fn decode_with_digest(bytes: &[u8], name: &str) -> Result<(Self, String)> {
        use crate::core::refusal::Code;
        let fault = |code: Code, what: String| refusal::refuse(code, format!("{name}: {what}"));
        if bytes.len() < 8 || &bytes[..8] != MAGIC {
            return Err(fault(Code::BadFormat, "not a CommCanary shard (bad magic)".into()));
        }
        let trailer_len = TRAILER.len() + 32;
        if bytes.len() < 8 + 4 + 8 + 8 + trailer_len {
            return Err(fault(
                Code::Truncated,
                format!("truncated: {} bytes is shorter than an empty shard", bytes.len()),
            ));
        }
        let version = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
        if !(1..=SHARD_FORMAT_VERSION).contains(&version) {
            return Err(fault(
                Code::UnsupportedVersion,
                format!(
                    "format version {version} is not supported (this build reads versions 1 to {SHARD_FORMAT_VERSION})"
                ),
            ));
        }
        let mut pos = 12usize;
        let take_len = |pos: &mut usize| -> Result<usize> {
            let end = *pos + 8;
            let b =
                bytes.get(*pos..end).ok_or_else(|| fault(Code::Truncated, "truncated inside a length field".into()))?;
            *pos = end;
            usize::try_from(u64::from_le_bytes(b.try_into().expect("8 bytes")))
                .map_err(|_| fault(Code::BadFormat, "length field does not fit in memory".into()))
        };
        // one length-prefixed section (the header, then the body): inside the file, under its limit
        let mut take_section = |what: &str, limit: usize| -> Result<std::ops::Range<usize>> {
            let len = take_len(&mut pos)?;
            let end = pos.checked_add(len).filter(|e| *e <= bytes.len()).ok_or_else(|| {
                fault(Code::Truncated, format!("truncated: {what} of {len} bytes runs past the end of the file"))
            })?;
            if len > limit {
                return Err(fault(
                    Code::OverLimit,
                    format!("{what} of {len} bytes is over the limit of {limit} bytes"),
                ));
            }
            let section = pos..end;
            pos = end;
            Ok(section)
        };
        let header_bytes = &bytes[take_section("header", limits::MAX_SHARD_HEADER_BYTES)?];
        let body_bytes = &bytes[take_section("body", limits::MAX_SHARD_BODY_BYTES)?];
        let rest = &bytes[pos..];
        if rest.len() < trailer_len {
            return Err(fault(Code::Truncated, "truncated: the SHA-256 trailer is missing".into()));
        }
        if rest.len() > trailer_len {
            return Err(fault(
                Code::BadFormat,
                format!("{} unexpected bytes after the trailer", rest.len() - trailer_len),
            ));
        }
        if &rest[..8] != TRAILER {
            return Err(fault(Code::BadFormat, "trailer marker is damaged".into()));
        }
        let stored = &rest[8..];
        let mut hasher = Sha256::new();
        hasher.update(&bytes[..pos]);
        let actual = hasher.clone().finalize();
        if stored != actual.as_slice() {
            return Err(fault(
                Code::DigestMismatch,
                format!(
                    "SHA-256 mismatch: trailer says {}, content hashes to {}; the shard was modified or corrupted",
                    hex::encode(stored),
                    hex::encode(actual)
                ),
            ));
        }
        let header: ShardHeader = serde_json::from_slice(header_bytes)
            .map_err(|e| fault(Code::BadFormat, format!("header is not valid: {e}")))?;
        if header.format_version != version {
            return Err(fault(Code::BadFormat, "header format_version disagrees with the preamble".into()));
        }
        let body = decode_shard_body(version, body_bytes, name)?;
        hasher.update(rest);
        Ok((Shard { header, body }, hex::encode(hasher.finalize())))
    }

    /// Read and verify a shard file.
    pub fn read(path: &Path) -> Result<Self> {
        let bytes = limits::read_bounded(path, limits::MAX_SHARD_BYTES)
            .with_context(|| format!("reading shard {}", path.display()))?;
        Self::decode(&bytes, &path.display().to_string())
    }

    /// True if the bytes start with the shard magic.
    pub fn sniff(bytes: &[u8]) -> bool {
        bytes.len() >= 8 && &bytes[..8] == MAGIC
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::shard::{test_header, SyntheticMark, BLANK_EVENT};

    fn sample() -> Shard {
        let header = test_header("cpu", serde_json::json!([]));
        let tokens = vec![TokenEvent { phase: Phase::Blocking, token: 0, warmup: false, start_ns: 1, end_ns: 2 }];
        Shard { header, body: ShardBody { tokens, ..Default::default() } }
    }

    /// `s` encoded as format `version` with `body` (encoded), re-sealed (the preamble changes after hashing).
    fn old_format(s: &mut Shard, version: u32, body: impl Serialize) -> Vec<u8> {
        s.header.format_version = version;
        let mut bytes = s.encode_with_body(&bincode::serde::encode_to_vec(body, bincode_cfg()).unwrap()).unwrap();
        bytes[8..12].copy_from_slice(&version.to_le_bytes());
        let n = bytes.len() - 40;
        let digest = Sha256::digest(&bytes[..n]);
        bytes[n + 8..].copy_from_slice(&digest);
        bytes
    }

    #[test]
    fn current_format_round_trips() {
        let mut s = sample();
        assert_eq!(Shard::decode(&s.encode().unwrap(), "t").unwrap(), s);
        // every kind, with its root or peer, survives the body
        for (i, kind) in
            [CollectiveKind::AllGather, CollectiveKind::Broadcast, CollectiveKind::Recv].into_iter().enumerate()
        {
            let (root, peer) = match kind {
                CollectiveKind::Broadcast => (Some(0), None),
                CollectiveKind::Recv => (None, Some(0)),
                _ => (None, None),
            };
            s.body.collectives.push(CollectiveEvent {
                phase: Phase::Replay,
                kind,
                group: 1,
                seq: i as u64,
                bytes: 8,
                token: Some(0),
                layer: Some(i as u32),
                host_issue_ns: 1,
                host_return_ns: 2,
                wait_start_ns: 2,
                wait_end_ns: 2,
                root,
                peer,
                ..BLANK_EVENT
            });
        }
        let d = Shard::decode(&s.encode().unwrap(), "t").unwrap();
        assert_eq!(d, s);
        assert_eq!(d.body.collectives[2].peer, Some(0));
    }

    #[test]
    fn the_synthetic_mark_round_trips_and_older_headers_have_none() {
        let mut s = sample();
        s.header.synthetic = Some(SyntheticMark { generator: "g".into(), seed: 3, note: "n".into() });
        assert_eq!(Shard::decode(&s.encode().unwrap(), "t").unwrap().header.synthetic, s.header.synthetic);
        // a format-6 header (no mark) reads as unmarked, and its JSON has no such field
        let mut s = sample();
        s.header.format_version = 6;
        let bytes = s.encode().unwrap();
        let d = Shard::decode(&bytes, "v6").unwrap();
        assert_eq!((d.header.format_version, d.header.synthetic.is_none()), (6, true));
        assert!(!String::from_utf8_lossy(&bytes).contains("synthetic"));
        // the events' region, as the streaming join reads it
        let (at, n) = collectives_region(&bytes, "v6").unwrap();
        assert_eq!(n, 0);
        assert!(at > 20 && at < bytes.len());
    }

    #[test]
    fn older_formats_still_decode_without_the_newer_records() {
        let mut s = sample();
        let tokens = s.body.tokens.clone();
        let v1 = old_format(&mut s, 1, ShardBodyV1 { collectives: vec![], compute: vec![], tokens: tokens.clone() });
        let v2 = ShardBodyV2 { collectives: vec![], compute: vec![], tokens, kernels: vec![], kernel_names: vec![] };
        let v2 = old_format(&mut s, 2, v2);
        for (version, bytes) in [(1, v1), (2, v2)] {
            let d = Shard::decode(&bytes, "old").unwrap();
            assert_eq!(d.header.format_version, version);
            assert_eq!(d.body.tokens, s.body.tokens);
            assert!(d.body.kernels.is_empty() && d.body.device_waits.is_empty());
        }
        // a format-5 body with an all-reduce decodes into today's event, without root or peer
        let v5 = CollectiveEventV5 {
            phase: Phase::Replay,
            kind: CollectiveKind::AllReduce,
            group: 0,
            seq: 7,
            bytes: 64,
            dtype: TraceDtype::Bf16,
            token: Some(1),
            layer: Some(2),
            iter: None,
            warmup: false,
            host_issue_ns: 10,
            host_return_ns: 11,
            wait_start_ns: 12,
            wait_end_ns: 13,
            device_start_ns: None,
            device_end_ns: None,
            injected_delay_ns: None,
            replay: None,
            fill: None,
            checked: true,
        };
        let body = ShardBodyV5 {
            collectives: vec![v5],
            compute: vec![],
            tokens: s.body.tokens.clone(),
            kernels: vec![],
            kernel_names: vec![],
            device_waits: vec![],
        };
        let d = Shard::decode(&old_format(&mut s, 5, body), "v5").unwrap();
        let e = &d.body.collectives[0];
        assert_eq!(
            (e.kind, e.seq, e.bytes, e.dtype, e.root, e.peer, e.checked),
            (CollectiveKind::AllReduce, 7, 64, TraceDtype::Bf16, None, None, true)
        );
        s.header.format_version = 99;
        let mut bytes = s.encode().unwrap();
        bytes[8..12].copy_from_slice(&99u32.to_le_bytes());
        let e = Shard::decode(&bytes, "future").unwrap_err().to_string();
        assert!(e.contains("format version 99 is not supported"), "{e}");
    }
}
