//! Fuzz the configuration loader: any text yields a config or errors,
//! never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = mpt_config::Config::parse(text, std::path::Path::new("fuzz.toml"));
    }
});
