//! Fuzz mpt-probe's receiver (`StreamStats`, with the probe header parser
//! and the two-step send stamps): any sequence of datagrams, each
//! prefixed here by one length byte, at any arrival times, is counted
//! (received, duplicate or invalid), never a panic; every probe received
//! gets exactly one send time, the kernel's or its user stamp.
//!
//! The body lives in `mpt_fuzzcheck::probe_recv`, which `cargo test` also runs
//! on every input of `fuzz/corpus/probe_recv/` (crates/mpt-fuzzcheck/tests).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| mpt_fuzzcheck::probe_recv(data));
