//! The flood guard in front of a concentrator's handshakes.
//!
//! Finding the peer of an initiation costs two Diffie-Hellman operations
//! (its static key is read with ours). Before that work, as a lone server
//! does before its own (WireGuard's cookie mechanism, `crypto::cookie`):
//! under load — more initiations with a valid mac1 than
//! `LOAD_BASE_PER_S + peers / LOAD_PEERS_PER_S_DIVISOR` per second — an
//! initiation must carry a valid mac2, the proof that its sender receives
//! at its source address; one without gets a cookie reply (which a real
//! client answers at once with a new initiation) and no further work.
//!
//! The threshold grows with the peers: a concentrator's clients rekey every
//! two minutes and may all come back at once after a restart; cookies then
//! cost them one round trip, never the connection. No per-source limit:
//! many clients may share one address behind a carrier NAT.
//!
//! It also answers a sealed datagram that names no peer's session with a
//! session-unknown hint (after a restart, clients handshake within a round
//! trip instead of after their paths' silence).
//!
//! Invariants: at most [`OUT_MAX`] cookie replies and hints wait to be
//! sent; each goes only to the address its trigger came from; nothing here panics
//! on any datagram.

use std::collections::VecDeque;
use std::net::SocketAddr;

use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha20Rng;

use crate::crypto::cookie::{CookieMaker, COOKIE_NONCE_LEN, COOKIE_REPLY_BODY_LEN};
use crate::crypto::keys::PublicKey;
use crate::crypto::knobs;
use crate::crypto::ratelimit::Bucket;
use crate::stats::DropReason;
use crate::wire::{
    self, Header, HeaderFields, PacketType, SessionUnknownBody, HEADER_LEN,
    SESSION_UNKNOWN_BODY_LEN,
};
use crate::Nanos;

/// Initiations per second a concentrator takes without cookies, before
/// adding its peers' share (tuning knob).
pub const LOAD_BASE_PER_S: f64 = 10.0;
/// Peers per extra initiation per second (each rekeys every 120 s).
pub const LOAD_PEERS_PER_S_DIVISOR: f64 = 60.0;
/// Burst: peers per extra initiation that may arrive at once.
pub const LOAD_PEERS_BURST_DIVISOR: f64 = 4.0;
/// Cookie replies queued at most (each 84 bytes).
pub const OUT_MAX: usize = 256;

/// See the module documentation.
pub struct Guard {
    cookies: CookieMaker,
    load: Bucket,
    rng: ChaCha20Rng,
    /// Session-unknown hints per second.
    hints: Bucket,
    out: VecDeque<(usize, SocketAddr, Vec<u8>)>,
    pub cookies_sent: u64,
    /// Session-unknown hints sent (status).
    pub hints_sent: u64,
}

impl Guard {
    pub fn new(own: &PublicKey, seed: [u8; 32]) -> Self {
        Self {
            cookies: CookieMaker::new(own),
            load: Bucket::full(LOAD_BASE_PER_S),
            hints: Bucket::full(knobs::SESSION_UNKNOWN_PER_S),
            rng: ChaCha20Rng::from_seed(seed),
            out: VecDeque::new(),
            cookies_sent: 0,
            hints_sent: 0,
        }
    }

    /// An initiation `dgram` with a valid mac1 came from `from` on socket
    /// `local_key` (our path `path` there): `Ok` to go on, or the drop (a
    /// cookie reply may be queued). `wall` stamps the reply.
    #[allow(clippy::too_many_arguments)] // the datagram and where it came from
    pub fn admit(
        &mut self,
        now: Nanos,
        local_key: usize,
        path: u8,
        from: SocketAddr,
        dgram: &[u8],
        peers: usize,
        wall: u64,
    ) -> Result<(), DropReason> {
        let peers = peers as f64;
        let rate = LOAD_BASE_PER_S + peers / LOAD_PEERS_PER_S_DIVISOR;
        let burst = LOAD_BASE_PER_S + peers / LOAD_PEERS_BURST_DIVISOR;
        if self.load.take(now, rate, burst) {
            return Ok(());
        }
        let mut secret = [0u8; 32];
        self.rng.fill_bytes(&mut secret);
        if self.cookies.check_mac2(now, dgram, &from, || secret) {
            return Ok(());
        }
        let body = dgram
            .get(HEADER_LEN..HEADER_LEN + 4)
            .ok_or(DropReason::Truncated)?;
        let sender = u32::from_be_bytes([body[0], body[1], body[2], body[3]]);
        let mut nonce = [0u8; COOKIE_NONCE_LEN];
        self.rng.fill_bytes(&mut nonce);
        let mut out = vec![0u8; HEADER_LEN + COOKIE_REPLY_BODY_LEN];
        let len = self
            .cookies
            .write_reply(
                now,
                dgram,
                &from,
                sender,
                nonce,
                || secret,
                &mut out[HEADER_LEN..],
            )
            .ok_or(DropReason::Truncated)?;
        out.truncate(HEADER_LEN + len);
        let f = HeaderFields {
            path,
            timestamp_us: wire::timestamp_us(wall),
            ..Default::default()
        };
        wire::write_header(&mut out, PacketType::CookieReply, &f);
        if self.out.len() < OUT_MAX {
            self.out.push_back((local_key, from, out));
            self.cookies_sent += 1;
        }
        Err(DropReason::HandshakeCookieSent)
    }

    /// A sealed datagram `dgram` from `from` on socket `local_key` (our
    /// path `path` there) named a session of no peer here (the
    /// concentrator restarted, or the peer is gone): queue a session-unknown
    /// hint to its sender (`wire/hint.rs`), at most
    /// [`knobs::SESSION_UNKNOWN_PER_S`] plus one per peer a second, and
    /// never for a datagram no larger than the hint.
    #[allow(clippy::too_many_arguments)] // the datagram and where it came from
    pub fn hint(
        &mut self,
        now: Nanos,
        local_key: usize,
        path: u8,
        from: SocketAddr,
        dgram: &[u8],
        peers: usize,
        wall: u64,
    ) {
        let hint_len = HEADER_LEN + SESSION_UNKNOWN_BODY_LEN;
        let Ok(h) = Header::new_checked(dgram) else {
            return;
        };
        let sealed = !matches!(
            h.packet_type(),
            PacketType::HandshakeInit
                | PacketType::HandshakeResponse
                | PacketType::CookieReply
                | PacketType::SessionUnknown
        );
        if !sealed || h.session() == 0 || dgram.len() <= hint_len || self.out.len() >= OUT_MAX {
            return;
        }
        let rate = knobs::SESSION_UNKNOWN_PER_S + peers as f64;
        if !self.hints.take(now, rate, rate) {
            return;
        }
        let mut out = vec![0u8; hint_len];
        let f = HeaderFields {
            path,
            session: h.session(),
            timestamp_us: wire::timestamp_us(wall),
            ..Default::default()
        };
        wire::write_header(&mut out, PacketType::SessionUnknown, &f);
        SessionUnknownBody {
            counter: h.counter(),
        }
        .write(&mut out[HEADER_LEN..]);
        self.out.push_back((local_key, from, out));
        self.hints_sent += 1;
    }

    /// A cookie reply or hint to send: (socket, destination, datagram).
    pub fn poll_transmit(&mut self) -> Option<(usize, SocketAddr, Vec<u8>)> {
        self.out.pop_front()
    }
}
