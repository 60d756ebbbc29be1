//! Cryptographic state of a tunnel: keys, the Noise handshake, data AEAD,
//! anti-replay and rate limiting. See `docs/security.md`.
//!
//! * [`keys`] — X25519 static keys and their base64 text form;
//! * [`handshake`] — Noise `IKpsk2` (as WireGuard) over the tunnel's wire
//!   format, producing a [`session::Session`];
//! * [`aead`] — ChaCha20-Poly1305 (RFC 8439) and AES-256-GCM for data, with
//!   the 24-byte mpt header as associated data;
//! * [`replay`] — the RFC 6479 sliding-window anti-replay check;
//! * [`cookie`] — the MACs and cookie replies that keep handshake floods
//!   from spoofed sources away from the Diffie-Hellman work (WireGuard);
//! * [`ratelimit`] — per-source token buckets for handshake initiations;
//! * [`retry`] — the initiator's retry intervals and the cookies it holds;
//! * [`session`] — one session's keys, counters and replay window;
//! * [`state`] — the whole security state of one tunnel.
//!
//! Invariants: no function here touches the OS. Randomness comes from a
//! ChaCha20 generator seeded by the caller; time comes in as `now`. Secret
//! key material is never formatted by `Debug`.

pub mod aead;
pub mod cookie;
pub mod handshake;
pub mod keys;
pub mod ratelimit;
pub mod replay;
pub mod retry;
pub mod session;
pub mod state;

/// AEAD tag length in bytes (RFC 8439 §2.8, NIST SP 800-38D).
pub const TAG_LEN: usize = 16;
/// X25519 key length in bytes (RFC 7748).
pub const KEY_LEN: usize = 32;

/// Tuning knobs of the security layer (not protocol constants).
pub mod knobs {
    use crate::{Nanos, NANOS_PER_MS};
    /// Start a new handshake after a session has been used this long.
    pub const REKEY_AFTER: Nanos = 120_000 * NANOS_PER_MS;
    /// Start a new handshake after this many packets under one session.
    pub const REKEY_AFTER_PACKETS: u64 = 1 << 40;
    /// Refuse to use a session older than this (both directions).
    pub const REJECT_AFTER: Nanos = 180_000 * NANOS_PER_MS;
    /// Never send more packets than this under one key (nonce space).
    pub const REJECT_AFTER_PACKETS: u64 = crate::wire::COUNTER_LIMIT - (1 << 13);
    /// Retry an unanswered handshake initiation after this long, doubling
    /// with every attempt up to `HANDSHAKE_RETRY_MAX` (backoff while the
    /// server stays away). The cap is low because an unanswered initiation
    /// may just have been lost in a flooded server's socket queue, and
    /// one 197-byte initiation per second costs an absent server nothing.
    pub const HANDSHAKE_RETRY: Nanos = 250 * NANOS_PER_MS;
    pub const HANDSHAKE_RETRY_MAX: Nanos = 1_000 * NANOS_PER_MS;
    /// Initiations with a valid mac1 per second (sustained, and as a burst)
    /// above which a responder is under load and answers initiations that
    /// carry no valid mac2 with a cookie reply (`cookie.rs`). One peer
    /// handshakes once per rekey interval; a flood goes far beyond.
    pub const HANDSHAKE_LOAD_PER_S: u32 = 10;
    /// Keep accepting the previous session this long after a new one.
    pub const PREVIOUS_SESSION_GRACE: Nanos = 10_000 * NANOS_PER_MS;
    /// Handshake initiations accepted per source address: burst and rate.
    pub const HANDSHAKE_BURST_PER_SOURCE: u32 = 5;
    pub const HANDSHAKE_PER_SOURCE_PER_S: u32 = 2;
    /// Handshake initiations accepted from all sources together per second.
    pub const HANDSHAKE_GLOBAL_PER_S: u32 = 50;
    /// Sources tracked by the rate limiter (bounded memory).
    pub const RATE_LIMIT_SOURCES: usize = 4096;
    /// Session-unknown hints a responder sends per second, and at once
    /// (per tunnel; a concentrator's guard adds one per peer): a client
    /// sends many datagrams a round trip, one answer serves.
    pub const SESSION_UNKNOWN_PER_S: f64 = 20.0;
    /// An initiator takes a session-unknown hint only for a counter among
    /// the last this many it sent under its session (a second of 1 Gbit/s
    /// and more): what an off-path sender cannot know.
    pub const SESSION_UNKNOWN_COUNTER_WINDOW: u64 = 1 << 20;
    /// ... and only for a session at least this old: a forged hint costs
    /// at most one handshake this often.
    pub const SESSION_UNKNOWN_MIN_AGE: Nanos = 1_000 * NANOS_PER_MS;
}
