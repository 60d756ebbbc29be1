//! Denial-of-service protection for the handshake: the two MACs and the
//! cookie reply of WireGuard (Donenfeld, "WireGuard: Next Generation Kernel
//! Network Tunnel", NDSS 2017, §5.3 and §5.4.4–5.4.7), over mpt's wire
//! format.
//!
//! Every handshake datagram (header and body) ends in `mac1 ‖ mac2`:
//! * `mac1 = MAC(HASH("mac1----" ‖ Spub_receiver), datagram[..mac1])`: only
//!   who knows the receiver's public key can make it, so a receiver drops
//!   scans and garbage after one keyed BLAKE2s, before any Diffie-Hellman;
//! * `mac2 = MAC(cookie, datagram[..mac2])`, or zeros without a cookie. A
//!   responder under load answers an initiation without a valid `mac2`
//!   with a cookie reply instead of doing the handshake work. The cookie is
//!   `MAC(secret, source address ‖ port)` under a secret that rotates every
//!   [`COOKIE_SECRET_LIFETIME`], so a valid `mac2` proves that the
//!   initiator receives packets at its source address: spoofed sources
//!   cannot pass.
//!
//! Cookie reply body (packet type 7), [`COOKIE_REPLY_BODY_LEN`] bytes:
//!
//! ```text
//!  0  receiver index  u32   the initiation's sender index
//!  4  nonce           24    random
//! 28  cookie          16+16 XChaCha20-Poly1305 under HASH("cookie--" ‖
//!                           Spub_responder), associated data: the mac1 of
//!                           the initiation it answers
//! ```
//!
//! `MAC` is keyed BLAKE2s with a 16-byte output (RFC 7693), `HASH` is
//! BLAKE2s-256.
//!
//! Invariants: nothing here allocates or reads a clock or the OS; time and
//! randomness come in as arguments; comparisons of MACs are constant-time.

use std::net::SocketAddr;

use blake2::digest::consts::U16;
use blake2::digest::{Digest, KeyInit, Mac};
use blake2::{Blake2s256, Blake2sMac};
use chacha20poly1305::aead::AeadInPlace;
use chacha20poly1305::{Tag, XChaCha20Poly1305, XNonce};

use super::keys::PublicKey;
use crate::{Nanos, NANOS_PER_MS};

/// Length of one MAC (spec constant).
pub const MAC_LEN: usize = 16;
/// Both MACs at the end of a handshake datagram (spec constant).
pub const MACS_LEN: usize = 2 * MAC_LEN;
/// Nonce of a cookie reply (XChaCha20, spec constant).
pub const COOKIE_NONCE_LEN: usize = 24;
/// Body of a cookie reply (spec constant).
pub const COOKIE_REPLY_BODY_LEN: usize = 4 + COOKIE_NONCE_LEN + MAC_LEN + 16;
/// How long a responder's cookie secret lives (WireGuard: 120 s).
pub const COOKIE_SECRET_LIFETIME: Nanos = 120_000 * NANOS_PER_MS;
/// How long an initiator uses a cookie it received: a little less than the
/// secret's lifetime, so that it is not used after the responder rotated.
pub const COOKIE_USE_LIFETIME: Nanos = 110_000 * NANOS_PER_MS;

const LABEL_MAC1: &[u8] = b"mac1----";
const LABEL_COOKIE: &[u8] = b"cookie--";

/// A cookie: the second MAC's key.
pub type Cookie = [u8; MAC_LEN];

fn hash(label: &[u8], key: &PublicKey) -> [u8; 32] {
    let mut h = Blake2s256::new();
    h.update(label);
    h.update(key.0);
    h.finalize().into()
}

fn mac(key: &[u8], parts: &[&[u8]]) -> [u8; MAC_LEN] {
    // Keys here are 16 or 32 bytes, within BLAKE2s's 32-byte key limit.
    let Ok(mut m) = <Blake2sMac<U16> as KeyInit>::new_from_slice(key) else {
        return [0; MAC_LEN];
    };
    for p in parts {
        Mac::update(&mut m, p);
    }
    m.finalize().into_bytes().into()
}

/// Constant-time equality of two MACs.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The keys derived from one peer's public key: what a sender needs to
/// address a handshake datagram to that peer, and what that peer needs to
/// check it.
#[derive(Clone)]
pub struct MacKeys {
    mac1: [u8; 32],
    cookie: [u8; 32],
}

impl MacKeys {
    pub fn new(receiver: &PublicKey) -> Self {
        Self {
            mac1: hash(LABEL_MAC1, receiver),
            cookie: hash(LABEL_COOKIE, receiver),
        }
    }

    /// Write `mac1` and `mac2` (zeros without a cookie) into the last
    /// [`MACS_LEN`] bytes of `dgram`; returns `mac1`. `None` if the datagram
    /// is too short to hold them.
    pub fn write_macs(&self, dgram: &mut [u8], cookie: Option<&Cookie>) -> Option<[u8; MAC_LEN]> {
        let at = dgram.len().checked_sub(MACS_LEN)?;
        let m1 = mac(&self.mac1, &[&dgram[..at]]);
        dgram[at..at + MAC_LEN].copy_from_slice(&m1);
        let m2 = cookie.map_or([0; MAC_LEN], |c| mac(c, &[&dgram[..at + MAC_LEN]]));
        dgram[at + MAC_LEN..].copy_from_slice(&m2);
        Some(m1)
    }

    /// Whether `dgram` ends in a valid `mac1` for this receiver.
    pub fn check_mac1(&self, dgram: &[u8]) -> bool {
        let Some(at) = dgram.len().checked_sub(MACS_LEN) else {
            return false;
        };
        same(&mac(&self.mac1, &[&dgram[..at]]), &dgram[at..at + MAC_LEN])
    }

    /// Initiator: open a cookie reply `body` that answers the initiation
    /// whose mac1 was `mac1_sent`.
    pub fn open_cookie_reply(&self, body: &[u8], mac1_sent: &[u8; MAC_LEN]) -> Option<Cookie> {
        if body.len() != COOKIE_REPLY_BODY_LEN {
            return None;
        }
        let nonce = XNonce::from_slice(&body[4..4 + COOKIE_NONCE_LEN]);
        let mut cookie = [0u8; MAC_LEN];
        cookie.copy_from_slice(&body[4 + COOKIE_NONCE_LEN..4 + COOKIE_NONCE_LEN + MAC_LEN]);
        let tag = Tag::from_slice(&body[4 + COOKIE_NONCE_LEN + MAC_LEN..]);
        let aead = XChaCha20Poly1305::new_from_slice(&self.cookie).ok()?;
        aead.decrypt_in_place_detached(nonce, mac1_sent, &mut cookie, tag)
            .ok()?;
        Some(cookie)
    }
}

/// The receiver index a cookie reply names (to find the initiation).
pub fn cookie_reply_receiver(body: &[u8]) -> Option<u32> {
    (body.len() == COOKIE_REPLY_BODY_LEN)
        .then(|| u32::from_be_bytes([body[0], body[1], body[2], body[3]]))
}

fn addr_bytes(a: &SocketAddr, out: &mut [u8; 18]) -> usize {
    match a {
        SocketAddr::V4(v) => {
            out[..4].copy_from_slice(&v.ip().octets());
            out[4..6].copy_from_slice(&v.port().to_be_bytes());
            6
        }
        SocketAddr::V6(v) => {
            out[..16].copy_from_slice(&v.ip().octets());
            out[16..18].copy_from_slice(&v.port().to_be_bytes());
            18
        }
    }
}

/// Responder: the rotating secret behind cookies.
pub struct CookieMaker {
    /// Keys derived from our own public key (checks mac1, seals cookies).
    own: MacKeys,
    secret: [u8; 32],
    secret_at: Option<Nanos>,
}

impl CookieMaker {
    pub fn new(own_public: &PublicKey) -> Self {
        Self {
            own: MacKeys::new(own_public),
            secret: [0; 32],
            secret_at: None,
        }
    }

    /// The keys that check mac1 of datagrams addressed to us.
    pub fn own(&self) -> &MacKeys {
        &self.own
    }

    /// The cookie for `src` at `now`; `fresh` gives a new secret when the
    /// current one is older than [`COOKIE_SECRET_LIFETIME`].
    fn cookie(&mut self, now: Nanos, src: &SocketAddr, fresh: impl FnOnce() -> [u8; 32]) -> Cookie {
        if self
            .secret_at
            .is_none_or(|t| now.saturating_sub(t) >= COOKIE_SECRET_LIFETIME)
        {
            self.secret = fresh();
            self.secret_at = Some(now);
        }
        let mut b = [0u8; 18];
        let n = addr_bytes(src, &mut b);
        mac(&self.secret, &[&b[..n]])
    }

    /// Whether `dgram` (with a valid mac1) carries a valid mac2 for `src`.
    pub fn check_mac2(
        &mut self,
        now: Nanos,
        dgram: &[u8],
        src: &SocketAddr,
        fresh: impl FnOnce() -> [u8; 32],
    ) -> bool {
        let Some(at) = dgram.len().checked_sub(MAC_LEN) else {
            return false;
        };
        // All zeros: the sender holds no cookie (a MAC that happens to be
        // zero has probability 2^-128). Saves two hashes per flood packet.
        if dgram[at..].iter().all(|b| *b == 0) {
            return false;
        }
        let c = self.cookie(now, src, fresh);
        same(&mac(&c, &[&dgram[..at]]), &dgram[at..])
    }

    /// Write a cookie reply body for the initiation `dgram` from `src`
    /// (sender index `sender`) into `out`; returns its length.
    #[allow(clippy::too_many_arguments)] // the reply's inputs, as they are
    pub fn write_reply(
        &mut self,
        now: Nanos,
        dgram: &[u8],
        src: &SocketAddr,
        sender: u32,
        nonce: [u8; COOKIE_NONCE_LEN],
        fresh: impl FnOnce() -> [u8; 32],
        out: &mut [u8],
    ) -> Option<usize> {
        if out.len() < COOKIE_REPLY_BODY_LEN || dgram.len() < MACS_LEN {
            return None;
        }
        let at = dgram.len() - MACS_LEN;
        let mac1 = &dgram[at..at + MAC_LEN];
        let mut cookie = self.cookie(now, src, fresh);
        let aead = XChaCha20Poly1305::new_from_slice(&self.own.cookie).ok()?;
        let tag = aead
            .encrypt_in_place_detached(XNonce::from_slice(&nonce), mac1, &mut cookie)
            .ok()?;
        out[..4].copy_from_slice(&sender.to_be_bytes());
        out[4..4 + COOKIE_NONCE_LEN].copy_from_slice(&nonce);
        out[4 + COOKIE_NONCE_LEN..4 + COOKIE_NONCE_LEN + MAC_LEN].copy_from_slice(&cookie);
        out[4 + COOKIE_NONCE_LEN + MAC_LEN..COOKIE_REPLY_BODY_LEN].copy_from_slice(&tag);
        Some(COOKIE_REPLY_BODY_LEN)
    }
}

#[cfg(test)]
#[path = "cookie_tests.rs"]
mod tests;
