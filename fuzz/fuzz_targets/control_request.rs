//! Fuzz the control request parser (`mpt-control`): any line a local
//! client writes yields a request or an error, never a panic; a request
//! parsed survives its own line.
//!
//! The body lives in `mpt_fuzzcheck::control_request`, which `cargo test` also runs
//! on every input of `fuzz/corpus/control_request/` (crates/mpt-fuzzcheck/tests).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| mpt_fuzzcheck::control_request(data));
