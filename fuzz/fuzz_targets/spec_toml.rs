//! Campaign spec (TOML) decoder and validation.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(spec) = toml::from_str::<commcanary::campaign::spec::CampaignSpec>(text) {
            let _ = spec.validate();
        }
    }
});
