//! Fuzz the whole receive path of the tunnel state machine with a sequence
//! of datagrams (split on a marker) and timer steps: no panic, no hang, and
//! delivered packets leave in strictly increasing order.
//!
//! The body lives in `mpt_fuzzcheck::tunnel_recv`, which `cargo test` also runs
//! on every input of `fuzz/corpus/tunnel_recv/` (crates/mpt-fuzzcheck/tests).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| mpt_fuzzcheck::tunnel_recv(data));
