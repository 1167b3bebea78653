//! The body's collective events read without serde, for the join's hot loop.
//! Consumes the front of a body's bytes (bincode 2's standard configuration:
//! little-endian varints, a `u8` tag per `Option`, `u32` varint variant
//! indices, zigzag signed integers; spec:
//! <https://github.com/bincode-org/bincode/blob/trunk/docs/spec.md>) and
//! produces the event and the bytes it took. It yields `None` wherever it is
//! not certain to read exactly as bincode's serde decoding (too few bytes, a
//! tag, varint marker or variant it does not know); the caller then decodes
//! with serde, which gives the same event or bincode's own error. So it
//! refuses nothing itself, and every error message stays bincode's.
use super::{CollectiveEvent, CollectiveKind, FillRecord, ReplayTiming, TraceDtype};
use crate::core::collective;
use crate::core::workload::Phase;

/// A cursor over bytes; every read is `None` at the end or on a form bincode
/// might read differently.
struct Bytes<'a> {
    b: &'a [u8],
    at: usize,
}

impl Bytes<'_> {
    #[inline(always)]
    fn u8(&mut self) -> Option<u8> {
        let x = *self.b.get(self.at)?;
        self.at += 1;
        Some(x)
    }

    #[inline(always)]
    fn le<const N: usize>(&mut self) -> Option<[u8; N]> {
        let x: [u8; N] = self.b.get(self.at..self.at + N)?.try_into().ok()?;
        self.at += N;
        Some(x)
    }

    /// A varint `u64`: one byte up to 250, else a marker (251: u16, 252: u32, 253: u64) and the value.
    #[inline(always)]
    fn u64(&mut self) -> Option<u64> {
        match self.u8()? {
            d @ 0..=250 => Some(u64::from(d)),
            251 => Some(u64::from(u16::from_le_bytes(self.le()?))),
            252 => Some(u64::from(u32::from_le_bytes(self.le()?))),
            253 => Some(u64::from_le_bytes(self.le()?)),
            _ => None,
        }
    }

    /// A varint `u32` (a u64 marker is bincode's error, left to it).
    #[inline(always)]
    fn u32(&mut self) -> Option<u32> {
        match self.u8()? {
            d @ 0..=250 => Some(u32::from(d)),
            251 => Some(u32::from(u16::from_le_bytes(self.le()?))),
            252 => Some(u32::from_le_bytes(self.le()?)),
            _ => None,
        }
    }

    /// A zigzag varint `i64`.
    #[inline(always)]
    fn i64(&mut self) -> Option<i64> {
        let n = self.u64()?;
        Some(if n % 2 == 0 { (n / 2) as i64 } else { !((n / 2) as i64) })
    }

    #[inline(always)]
    fn bool(&mut self) -> Option<bool> {
        match self.u8()? {
            0 => Some(false),
            1 => Some(true),
            _ => None,
        }
    }

    #[inline(always)]
    fn opt<T>(&mut self, f: impl FnOnce(&mut Self) -> Option<T>) -> Option<Option<T>> {
        match self.u8()? {
            0 => Some(None),
            1 => f(self).map(Some),
            _ => None,
        }
    }

    fn phase(&mut self) -> Option<Phase> {
        Phase::all().get(usize::try_from(self.u32()?).ok()?).copied()
    }

    fn kind(&mut self) -> Option<CollectiveKind> {
        // the serde variant index is the declaration order, which the kind
        // table keeps (checked by the tests against serde)
        collective::KINDS.get(usize::try_from(self.u32()?).ok()?).map(|r| r.kind)
    }

    fn dtype(&mut self) -> Option<TraceDtype> {
        // serde's variant order (formats 1 to 7 wrote only f32 = 0 and bf16 = 1)
        TraceDtype::ALL.get(usize::try_from(self.u32()?).ok()?).copied()
    }
}

/// An isolated f32 all-reduce on group 0 of zeros and absences: an event to decode into (its
/// fields are all overwritten), or the rest of one built field by field.
pub(crate) const BLANK: CollectiveEvent = CollectiveEvent {
    phase: Phase::Isolated,
    kind: CollectiveKind::AllReduce,
    group: 0,
    seq: 0,
    bytes: 0,
    dtype: TraceDtype::F32,
    token: None,
    layer: None,
    iter: None,
    warmup: false,
    host_issue_ns: 0,
    host_return_ns: 0,
    wait_start_ns: 0,
    wait_end_ns: 0,
    device_start_ns: None,
    device_end_ns: None,
    injected_delay_ns: None,
    replay: None,
    fill: None,
    checked: false,
    root: None,
    peer: None,
};

/// The collective event at the front of `bytes` as a format-`version` body
/// encodes it (formats 1 to 5: without root and peer), written into `e` in
/// place (no copy of the event), and the bytes it took; `None` where serde
/// must decide, `e` then partly written.
#[inline]
pub(crate) fn collective_event_into(version: u32, bytes: &[u8], e: &mut CollectiveEvent) -> Option<usize> {
    let mut r = Bytes { b: bytes, at: 0 };
    e.phase = r.phase()?;
    e.kind = r.kind()?;
    e.group = r.u32()?;
    e.seq = r.u64()?;
    e.bytes = r.u64()?;
    e.dtype = r.dtype()?;
    e.token = r.opt(Bytes::u32)?;
    e.layer = r.opt(Bytes::u32)?;
    e.iter = r.opt(Bytes::u32)?;
    e.warmup = r.bool()?;
    e.host_issue_ns = r.u64()?;
    e.host_return_ns = r.u64()?;
    e.wait_start_ns = r.u64()?;
    e.wait_end_ns = r.u64()?;
    e.device_start_ns = r.opt(Bytes::u64)?;
    e.device_end_ns = r.opt(Bytes::u64)?;
    e.injected_delay_ns = r.opt(Bytes::u64)?;
    e.replay = r.opt(|r| Some(ReplayTiming { target_gap_ns: r.u64()?, actual_gap_ns: r.u64()? }))?;
    e.fill = r.opt(|r| {
        Some(FillRecord { gap_ns: r.u64()?, units: r.u32()?, quantum_ns: r.u64()?, quantization_error_ns: r.i64()? })
    })?;
    e.checked = r.bool()?;
    (e.root, e.peer) = if version >= 6 { (r.opt(Bytes::u32)?, r.opt(Bytes::u32)?) } else { (None, None) };
    Some(r.at)
}

/// [`collective_event_into`] into a new event.
#[cfg(test)]
fn collective_event(version: u32, bytes: &[u8]) -> Option<(CollectiveEvent, usize)> {
    let mut e = BLANK;
    collective_event_into(version, bytes, &mut e).map(|n| (e, n))
}

/// The body's leading collectives (a varint count, then the events) and the
/// bytes they took; `None` where serde must decide.
pub(crate) fn collectives(version: u32, bytes: &[u8]) -> Option<(Vec<CollectiveEvent>, usize)> {
    let mut r = Bytes { b: bytes, at: 0 };
    let n = usize::try_from(r.u64()?).ok()?;
    // an event takes at least 22 bytes: no count can allocate more than the bytes hold
    let mut out = Vec::with_capacity(n.min(bytes.len() / 22));
    let mut at = r.at;
    for _ in 0..n {
        out.push(BLANK);
        let e = out.last_mut().expect("pushed");
        at += collective_event_into(version, bytes.get(at..)?, e)?;
    }
    Some((out, at))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::shard::bincode_cfg;
    use crate::evidence::shard::read::decode_collective_event_serde as serde_event;
    use rand::{Rng, SeedableRng};

    /// A value of each varint width, and the extremes.
    fn big(rng: &mut rand::rngs::StdRng) -> u64 {
        match rng.gen_range(0..5) {
            0 => rng.gen_range(0..251),
            1 => rng.gen_range(251..65536),
            2 => rng.gen_range(65536..1 << 32),
            3 => rng.gen::<u64>(),
            _ => u64::MAX,
        }
    }

    fn opt(rng: &mut rand::rngs::StdRng) -> Option<u64> {
        rng.gen_bool(0.5).then(|| big(rng))
    }

    fn event(rng: &mut rand::rngs::StdRng) -> CollectiveEvent {
        CollectiveEvent {
            phase: Phase::all()[rng.gen_range(0..Phase::all().len())],
            kind: [CollectiveKind::AllReduce, CollectiveKind::Recv, CollectiveKind::Broadcast][rng.gen_range(0..3)],
            group: big(rng) as u32,
            seq: big(rng),
            bytes: big(rng),
            dtype: TraceDtype::ALL[rng.gen_range(0..TraceDtype::ALL.len())],
            token: opt(rng).map(|v| v as u32),
            layer: opt(rng).map(|v| v as u32),
            iter: opt(rng).map(|v| v as u32),
            warmup: rng.gen_bool(0.5),
            host_issue_ns: big(rng),
            host_return_ns: big(rng),
            wait_start_ns: big(rng),
            wait_end_ns: big(rng),
            device_start_ns: opt(rng),
            device_end_ns: opt(rng),
            injected_delay_ns: opt(rng),
            replay: rng.gen_bool(0.5).then(|| ReplayTiming { target_gap_ns: big(rng), actual_gap_ns: big(rng) }),
            fill: rng.gen_bool(0.5).then(|| FillRecord {
                gap_ns: big(rng),
                units: big(rng) as u32,
                quantum_ns: big(rng),
                quantization_error_ns: big(rng) as i64,
            }),
            checked: rng.gen_bool(0.5),
            root: opt(rng).map(|v| v as u32),
            peer: opt(rng).map(|v| v as u32),
        }
    }

    /// Wherever the hand reader reads an event, serde reads the same event
    /// and length: on encoded events, on every prefix of them, and on bytes
    /// with one byte changed (where serde must then decide).
    #[test]
    fn the_hand_reader_reads_as_serde_or_defers_to_it() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(27);
        let mut read = 0;
        for i in 0..4000 {
            let version = [5, 6, 8][i % 3];
            let mut e = event(&mut rng);
            if version < 6 {
                (e.root, e.peer) = (None, None);
            }
            if version < 8 {
                e.dtype = [TraceDtype::F32, TraceDtype::Bf16][i % 2];
            }
            let mut bytes = bincode::serde::encode_to_vec(&e, bincode_cfg()).unwrap();
            if version < 6 {
                // a format-5 event: today's encoding without its last two tags
                bytes.truncate(bytes.len() - 2);
            }
            let fast = collective_event(version, &bytes).expect("a well-formed event reads");
            assert_eq!(fast, serde_event(version, &bytes).unwrap());
            assert_eq!((fast.0, fast.1), (e, bytes.len()));
            let cut = rng.gen_range(0..bytes.len());
            assert!(collective_event(version, &bytes[..cut]).is_none(), "a prefix is serde's to refuse");
            let mut bad = bytes.clone();
            let at = rng.gen_range(0..bad.len());
            bad[at] = rng.gen();
            if let Some(got) = collective_event(version, &bad) {
                read += 1;
                assert_eq!(Ok(got), serde_event(version, &bad).map_err(|e| e.to_string()), "byte {at} of {bad:?}");
            }
        }
        assert!(read > 1000, "changed bytes that still read: {read}");
    }

    /// The variant tables are serde's: every index reads as serde reads it,
    /// and an index past them is left to serde.
    #[test]
    fn variant_indices_are_serdes() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let mut e = event(&mut rng);
        (e.phase, e.kind, e.group, e.seq, e.bytes) = (Phase::all()[0], CollectiveKind::AllReduce, 0, 0, 0);
        let base = bincode::serde::encode_to_vec(&e, bincode_cfg()).unwrap();
        // phase, kind and dtype: bytes 0, 1 and 5 (group, seq and bytes take one byte each)
        for at in [0, 1, 5] {
            for i in 0..=20u8 {
                let mut b = base.clone();
                b[at] = i;
                let serde = serde_event(8, &b).ok();
                match collective_event(8, &b) {
                    Some(got) => assert_eq!(Some(got), serde, "byte {at} index {i}"),
                    None => assert!(serde.is_none(), "byte {at} index {i}: serde reads what the hand reader left"),
                }
            }
        }
    }
}
