//! # mpt-core — the sans-IO heart of the mpt multipath tunnel
//!
//! This crate holds everything that decides what happens to a packet, and
//! nothing that touches the operating system:
//!
//! * [`wire`] — the on-the-wire header, probe bodies and their codecs;
//! * [`ip`] — field views over inner IPv4/IPv6/TCP/UDP packets and the
//!   Internet checksum, shared with the I/O layer's offloads;
//! * [`estimate`] — per-path delivery rate, one-way delay floor and queueing
//!   delay, loss by cause, measured where packets arrive;
//! * [`path`] — per-path state: liveness, RTT (RFC 6298), jitter (RFC 3550),
//!   loss and counters;
//! * [`pace`] — the sender's model of each path from receiver reports:
//!   BBR-style rate control and a pacing budget;
//! * [`queue`] — mpt's own send queue, bounded in time;
//! * [`qos`] — early classification, per-class and per-flow queues,
//!   precedence, rate limits and CoDel;
//! * [`rates`] — bits and packets per second over the last second;
//! * [`sched`] — the [`sched::Scheduler`] trait, earliest-arrival (ECF) and
//!   smooth weighted round-robin;
//! * [`reorder`] — the receive-side reorder buffer and its release policies;
//! * [`crypto`] — keys, the Noise handshake, cookies, sessions and AEAD;
//! * [`concentrator`] — many peers in one server: allowed IPs (longest
//!   prefix match);
//! * [`stats`] — drop reasons and their counters;
//! * [`tunnel`] — the state machine that ties them together;
//! * `testing` (cargo feature `testing`) — the one test-configuration
//!   builder of the core's tests, benchmarks and fuzz targets.
//!
//! Invariants of the whole crate:
//! * no socket, thread, file or clock is used: time enters only as a `now`
//!   argument in nanoseconds of a monotonic clock ([`Nanos`]); wall-clock
//!   time for wire timestamps is `now + wall_offset`, set by the caller;
//! * all input from the network is untrusted: every parser checks bounds once
//!   and returns an error that the tunnel turns into a counted drop;
//! * nothing here panics on any input (fuzzed in `fuzz/`).

pub mod concentrator;
pub mod crypto;
pub mod ecn_tunnel;
pub mod estimate;
pub mod fec;
pub mod ip;
pub mod mss;
pub mod pace;
pub mod path;
pub mod qos;
pub mod queue;
pub mod rates;
pub mod reassembly;
pub mod release;
pub mod reorder;
pub mod rtt;
pub mod sched;
pub mod stats;
#[cfg(feature = "testing")]
pub mod testing;
pub mod tunnel;
pub mod wire;

/// Nanoseconds on a monotonic clock chosen by the caller.
pub type Nanos = u64;

/// Nanoseconds per millisecond.
pub const NANOS_PER_MS: u64 = 1_000_000;

/// Index of a path in the tunnel configuration (also its id on the wire).
pub type PathId = u8;

/// Maximum number of paths in one tunnel (the path id is one byte on the
/// wire; the product limit is lower to keep per-path arrays small).
pub const MAX_PATHS: usize = 32;
