//! Fuzz the QoS classifier and stage with arbitrary inner packets: no input
//! may panic; a packet's class is one of the configured ones; what enters
//! the stage leaves it (or is counted as dropped) and the counts add up.
//! The ECN mark changes nothing but the ECN bits (and IPv4's checksum) of
//! an ECN-capable packet, and leaves any other input as it was.
//!
//! The body lives in `mpt_fuzzcheck::qos_classify`, which `cargo test` also runs
//! on every input of `fuzz/corpus/qos_classify/` (crates/mpt-fuzzcheck/tests).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| mpt_fuzzcheck::qos_classify(data));
