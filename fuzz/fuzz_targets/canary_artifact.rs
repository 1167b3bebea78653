//! Canary artifact decoder (`canary inspect`/`verify` input) and its
//! consistency check, then the expansion of whatever passes. The first byte
//! chooses: even, the rest is the artifact as a file holds it (digest and
//! exact bytes checked first); odd, the rest is decoded as an artifact's
//! fields and resealed, so the consistency check and the expansion see
//! every field the mutator makes, not only those behind a matching digest.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    use commcanary::canary::{artifact, expand};
    let Some((mode, rest)) = data.split_first() else { return };
    let bytes = if mode % 2 == 0 {
        rest.to_vec()
    } else {
        let Ok(c) = serde_json::from_slice::<artifact::Canary>(rest) else { return };
        let Ok(c) = c.seal() else { return };
        let Ok(b) = serde_json::to_vec_pretty(&c) else { return };
        b
    };
    if let Ok(c) = artifact::from_slice(&bytes) {
        let _ = expand::expand(&c);
    }
});
