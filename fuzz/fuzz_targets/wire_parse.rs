//! Fuzz the header, probe-body, receiver-report (for its own path or
//! another), NACK-body, fragment, session-unknown and
//! cookie-reply parsers and the MAC checks: no input may panic, every
//! accepted header, report, session-unknown body and fragment header
//! re-encodes to the same
//! bytes, every accepted NACK body re-encodes to the bytes it was parsed
//! from, and no cookie reply opens without the right key and mac1.
//!
//! The body lives in `mpt_fuzzcheck::wire_parse`, which `cargo test` also runs
//! on every input of `fuzz/corpus/wire_parse/` (crates/mpt-fuzzcheck/tests).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| mpt_fuzzcheck::wire_parse(data));
