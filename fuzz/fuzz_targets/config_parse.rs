//! Fuzz the configuration loader: any text yields a config or errors,
//! never a panic.
//!
//! The body lives in `mpt_fuzzcheck::config_parse`, which `cargo test` also runs
//! on every input of `fuzz/corpus/config_parse/` (crates/mpt-fuzzcheck/tests).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| mpt_fuzzcheck::config_parse(data));
