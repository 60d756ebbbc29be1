//! Fuzz the TUN offload code: segmentation of TCP and UDP super-packets
//! (as read from the TUN, with an arbitrary virtio header) and coalescing of
//! arbitrary packets (as released by the peer). No input may panic; the
//! segments of a super-packet must carry its payload, in order, and UDP
//! segments must coalesce back into the same payload.
//!
//! The body lives in `mpt_fuzzcheck::offload`, which `cargo test` also runs
//! on every input of `fuzz/corpus/offload/` (crates/mpt-fuzzcheck/tests).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| mpt_fuzzcheck::offload(data));
