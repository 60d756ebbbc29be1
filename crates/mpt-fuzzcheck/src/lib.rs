//! The bodies of mpt's fuzz targets, one function per target, shared by
//! two callers:
//! - `fuzz/fuzz_targets/*.rs`, the cargo-fuzz (libFuzzer) binaries, each a
//!   one-line wrapper around its function here (nightly, coverage-guided);
//! - `tests/corpus.rs`, a stable test that replays every input stored in
//!   `fuzz/corpus/<target>/` through the same function, so that each
//!   `cargo test` checks the whole corpus without a nightly toolchain.
//!
//! Invariants: every function takes arbitrary bytes and returns normally
//! for every input; a panic (failed assertion included) is a finding. The
//! functions hold no state between calls and read no clock or file.
//! `TARGETS` (with the `testing` feature) names every target in `fuzz/Cargo.toml` exactly once.

mod config;
mod fec;
mod io;
mod qos;
#[cfg(feature = "testing")]
mod tunnel;
mod wire;

pub use config::{config_parse, control_request};
pub use fec::fec_repair;
pub use io::{offload, probe_recv};
pub use qos::qos_classify;
#[cfg(feature = "testing")]
pub use tunnel::{secure_recv, tunnel_recv};
pub use wire::wire_parse;

/// A fuzz target: its name (the folder under `fuzz/corpus/` and the binary
/// in `fuzz/Cargo.toml`) and its body.
pub type Target = (&'static str, fn(&[u8]));

/// Every fuzz target, in the order of `fuzz/Cargo.toml`.
#[cfg(feature = "testing")]
pub const TARGETS: [Target; 9] = [
    ("wire_parse", wire_parse),
    ("tunnel_recv", tunnel_recv),
    ("config_parse", config_parse),
    ("secure_recv", secure_recv),
    ("offload", offload),
    ("qos_classify", qos_classify),
    ("control_request", control_request),
    ("probe_recv", probe_recv),
    ("fec_repair", fec_repair),
];
