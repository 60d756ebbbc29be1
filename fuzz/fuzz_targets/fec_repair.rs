//! Fuzz the repair-body parser and the forward error correction decoder:
//! no input may panic, an accepted body re-encodes to the same bytes, and
//! what the decoder rebuilds fits the shard it came from.
//!
//! The body lives in `mpt_fuzzcheck::fec_repair`, which `cargo test` also
//! runs on every input of `fuzz/corpus/fec_repair/` (crates/mpt-fuzzcheck/tests).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| mpt_fuzzcheck::fec_repair(data));
