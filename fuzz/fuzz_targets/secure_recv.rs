//! Fuzz the secure receive path as a server (handshake responder and data
//! decryptor) or as a client (cookie replies, handshake responses): any
//! datagram sequence — initiations, responses, cookie replies, path
//! challenges, sealed data with arbitrary headers — must be refused or
//! accepted without a panic, and nothing unauthenticated may be delivered.
//!
//! The body lives in `mpt_fuzzcheck::secure_recv`, which `cargo test` also runs
//! on every input of `fuzz/corpus/secure_recv/` (crates/mpt-fuzzcheck/tests).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| mpt_fuzzcheck::secure_recv(data));
