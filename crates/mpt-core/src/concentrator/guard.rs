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
//! trip instead of after their paths' silence). Hints are spaced per
//! source address ([`HINT_SOURCE_SPACING_NS`]): one busy client, or one
//! flooding source, cannot spend the budget that every other client's
//! first datagram after a restart needs. The table that spaces them is
//! keyed by a secret hash; a source that shares a slot with another only
//! gets a hint sooner, never later.
//!
//! Invariants: at most [`OUT_MAX`] cookie replies and hints wait to be
//! sent; each goes only to the address its trigger came from; one source
//! address gets at most one hint per [`HINT_SOURCE_SPACING_NS`]; nothing
//! here panics on any datagram.

use std::collections::VecDeque;
use std::hash::{Hash, Hasher};
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
use crate::{Nanos, NANOS_PER_MS};

/// Initiations per second a concentrator takes without cookies, before
/// adding its peers' share (tuning knob).
pub const LOAD_BASE_PER_S: f64 = 10.0;
/// Peers per extra initiation per second (each rekeys every 120 s).
pub const LOAD_PEERS_PER_S_DIVISOR: f64 = 60.0;
/// Burst: peers per extra initiation that may arrive at once.
pub const LOAD_PEERS_BURST_DIVISOR: f64 = 4.0;
/// Cookie replies queued at most (each 84 bytes).
pub const OUT_MAX: usize = 256;
/// One hint per source address at most this often (tuning knob): a
/// client's handshake answers its first; the next covers a lost one.
pub const HINT_SOURCE_SPACING_NS: Nanos = 250 * NANOS_PER_MS;
/// Slots of the table that spaces hints per source (16 bytes each,
/// allocated at the first hint).
pub const HINT_SOURCE_SLOTS: usize = 4096;

/// See the module documentation.
pub struct Guard {
    cookies: CookieMaker,
    load: Bucket,
    rng: ChaCha20Rng,
    /// Session-unknown hints per second (full at the first: a restarted
    /// concentrator's clients all come at once).
    hints: Option<Bucket>,
    /// When each source last got a hint: (its keyed hash, then).
    hinted: Vec<(u64, Nanos)>,
    /// The secret that keys `hinted`'s hash.
    hint_key: [u8; 16],
    out: VecDeque<(usize, SocketAddr, Vec<u8>)>,
    pub cookies_sent: u64,
    /// Session-unknown hints sent (status).
    pub hints_sent: u64,
    /// Datagrams left without a hint: their source had one within
    /// [`HINT_SOURCE_SPACING_NS`] (status).
    pub hints_spaced: u64,
}

impl Guard {
    pub fn new(own: &PublicKey, seed: [u8; 32]) -> Self {
        Self {
            cookies: CookieMaker::new(own),
            load: Bucket::full(LOAD_BASE_PER_S),
            hints: None,
            hinted: Vec::new(),
            hint_key: [0; 16],
            rng: ChaCha20Rng::from_seed(seed),
            out: VecDeque::new(),
            cookies_sent: 0,
            hints_sent: 0,
            hints_spaced: 0,
        }
    }

    /// `from`'s slot in the spacing table and its tag, or `None` if it
    /// had a hint within [`HINT_SOURCE_SPACING_NS`].
    fn hint_slot(&mut self, now: Nanos, from: &SocketAddr) -> Option<(usize, u64)> {
        if self.hinted.is_empty() {
            self.rng.fill_bytes(&mut self.hint_key);
            self.hinted = vec![(0, 0); HINT_SOURCE_SLOTS];
        }
        let mut h = std::hash::DefaultHasher::new();
        self.hint_key.hash(&mut h);
        from.hash(&mut h);
        // Zero marks an empty slot.
        let tag = h.finish() | 1;
        let i = (tag >> 1) as usize % HINT_SOURCE_SLOTS;
        let (had, then) = self.hinted[i];
        if had == tag && now.saturating_sub(then) < HINT_SOURCE_SPACING_NS {
            return None;
        }
        Some((i, tag))
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
    /// [`knobs::SESSION_UNKNOWN_PER_S`] plus one per peer a second, one
    /// per source per [`HINT_SOURCE_SPACING_NS`], and never for a
    /// datagram no larger than the hint.
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
        let Some((slot, tag)) = self.hint_slot(now, &from) else {
            self.hints_spaced += 1;
            return;
        };
        let bucket = self.hints.get_or_insert_with(|| Bucket::full(rate));
        if !bucket.take(now, rate, rate) {
            return;
        }
        self.hinted[slot] = (tag, now);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::KEY_LEN;

    fn sealed(session: u32, counter: u64) -> Vec<u8> {
        let mut d = vec![0u8; 200];
        let f = HeaderFields {
            session,
            counter,
            ..Default::default()
        };
        wire::write_header(&mut d, PacketType::Data, &f);
        d
    }

    fn from(port: u16) -> SocketAddr {
        SocketAddr::from(([192, 0, 2, 7], port))
    }

    fn hints(g: &mut Guard) -> Vec<SocketAddr> {
        std::iter::from_fn(|| g.poll_transmit())
            .map(|(_, to, _)| to)
            .collect()
    }

    #[test]
    fn each_source_gets_one_hint_per_spacing() {
        let mut g = Guard::new(&PublicKey([3; KEY_LEN]), [9; 32]);
        let ms = NANOS_PER_MS;
        for k in 0..10 {
            g.hint(k * ms, 0, 0, from(1), &sealed(5, k), 10, 0);
        }
        assert_eq!(hints(&mut g), vec![from(1)]);
        assert_eq!(g.hints_spaced, 9);
        // Another source is not held by the first's spacing.
        g.hint(10 * ms, 0, 0, from(2), &sealed(6, 0), 10, 0);
        assert_eq!(hints(&mut g), vec![from(2)]);
        // After the spacing, the first gets another (its first was lost).
        g.hint(HINT_SOURCE_SPACING_NS, 0, 0, from(1), &sealed(5, 11), 10, 0);
        assert_eq!(hints(&mut g), vec![from(1)]);
        assert_eq!(g.hints_sent, 3);
    }

    #[test]
    fn a_flooding_source_leaves_the_budget_to_the_others() {
        let mut g = Guard::new(&PublicKey([3; KEY_LEN]), [9; 32]);
        let peers = 100;
        // One source sends ten thousand datagrams of unknown sessions
        // within 100 ms; then each of 100 clients sends one.
        for k in 0..10_000u64 {
            g.hint(k * 10_000, 0, 0, from(1), &sealed(5, k), peers, 0);
        }
        for c in 0..100u16 {
            g.hint(
                100 * NANOS_PER_MS,
                0,
                0,
                from(1_000 + c),
                &sealed(7, 0),
                peers,
                0,
            );
        }
        let to = hints(&mut g);
        assert_eq!(to.iter().filter(|a| **a == from(1)).count(), 1);
        assert_eq!(to.len(), 101, "every client got its hint");
    }

    #[test]
    fn no_hint_answers_a_handshake_a_hint_or_a_short_datagram() {
        let mut g = Guard::new(&PublicKey([3; KEY_LEN]), [9; 32]);
        let mut d = sealed(5, 0);
        wire::write_header(&mut d, PacketType::SessionUnknown, &HeaderFields::default());
        g.hint(0, 0, 0, from(1), &d, 1, 0);
        g.hint(0, 0, 0, from(2), &sealed(0, 0), 1, 0);
        g.hint(0, 0, 0, from(3), &sealed(5, 0)[..HEADER_LEN + 8], 1, 0);
        g.hint(0, 0, 0, from(4), &[0xff; 3], 1, 0);
        assert!(hints(&mut g).is_empty());
    }
}
