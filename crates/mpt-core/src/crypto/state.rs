//! Session management for one peer: which session seals, which sessions
//! open, when to (re)handshake; the handshake messages are in `exchange.rs`.
//!
//! Roles are fixed: the client initiates, the server responds. Sessions:
//! * `current` seals outgoing packets and opens incoming ones;
//! * `previous` still opens packets for a grace period after a rekey, so
//!   packets in flight under the old key are not lost;
//! * `next` (server only) is a session from a fresh handshake that the
//!   client has not used yet; the first packet that opens under it makes it
//!   `current` (key confirmation, as in WireGuard).
//!
//! Invariants: nothing here allocates per data packet; a failed
//! authentication leaves every session unchanged; a session is never used
//! beyond `REJECT_AFTER` or its packet limit.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::net::SocketAddr;

use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};

use super::aead::{cpu_has_aes, Cipher, DataKey};
use super::cookie::{self, CookieMaker, MacKeys};
use super::handshake::{
    self, Announce, HandshakeError, Identity, Initiation, INIT_NOISE_LEN, RESPONSE_NOISE_LEN,
    TIMESTAMP_LEN,
};
use super::knobs;
use super::ratelimit::{Bucket, RateLimiter};
use super::retry::{Retry, SentInit};
use super::session::Session;
use crate::stats::DropReason;
use crate::Nanos;

// The handshake messages (initiation, response), a child module so that it
// shares the private state.
#[path = "exchange.rs"]
mod exchange;

/// Which side starts handshakes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandshakeRole {
    Initiator,
    Responder,
}

/// Cipher preference from the configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CipherPref {
    /// AES-256-GCM if both ends have AES instructions, else ChaCha20-Poly1305.
    Auto,
    Only(Cipher),
}

/// Security configuration of the core.
#[derive(Debug, Clone)]
pub struct SecurityConfig {
    pub identity: Identity,
    pub role: HandshakeRole,
    pub cipher: CipherPref,
    pub rekey_after: Nanos,
    pub rekey_after_packets: u64,
    /// A concentrator's peer slot, written into the top
    /// [`INDEX_SLOT_BITS`] bits of every session index this side hands out,
    /// so that a datagram finds its peer in O(1); `None` for a lone tunnel
    /// (fully random indices).
    pub index_slot: Option<u32>,
}

/// Bits of a session index that name a concentrator's peer slot: 2^20
/// peers (WireGuard's bound), 2^12 random values per peer (tuning knob).
pub const INDEX_SLOT_BITS: u32 = 20;

/// The concentrator slot a session index names (see
/// [`SecurityConfig::index_slot`]).
pub fn index_slot(index: u32) -> u32 {
    index >> (32 - INDEX_SLOT_BITS)
}

/// Counters shown in `mpt status`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct CryptoStats {
    /// Handshakes this side completed (a responder's once the initiator
    /// confirmed the session with its first packet).
    pub handshakes_completed: u64,
    /// Responder: responses the initiator never confirmed (it sent nothing
    /// under the answered session before its next initiation: a wrong
    /// pre-shared key on one side, or the response was lost).
    pub handshakes_unconfirmed: u64,
    pub handshake_failures: u64,
    pub initiations_sent: u64,
    pub initiations_rate_limited: u64,
    pub rekeys: u64,
    pub sessions_expired: u64,
    /// Responder: initiations answered with a cookie (under load).
    pub cookies_sent: u64,
    /// Initiator: cookie replies received and used.
    pub cookies_received: u64,
    /// Handshakes started because every path fell silent.
    pub silence_handshakes: u64,
    /// Sessions with a peer that had restarted (new incarnation).
    pub peer_restarts: u64,
    /// Responder: session-unknown hints sent (a sealed datagram named a
    /// session this side does not hold).
    pub session_unknown_sent: u64,
    /// Initiator: handshakes started because the peer said it no longer
    /// holds our session (it restarted).
    pub session_unknown_handshakes: u64,
}

/// Something for the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CryptoEvent {
    Established {
        cipher: &'static str,
        rekey: bool,
    },
    Failed {
        reason: &'static str,
        /// The static public key of the sender, when it was authentic but
        /// not the configured peer's.
        unknown_key: Option<[u8; 32]>,
    },
    /// Initiations went unanswered (logged at 2, 4, 8, ... attempts).
    /// `under_load`: the server did answer with cookie replies (it is there
    /// but busy, maybe flooded) and the handshake has not completed yet.
    Unanswered {
        attempts: u64,
        under_load: bool,
    },
    Expired,
    /// Responder: the initiator sent a new initiation without a packet
    /// under the session we answered: it could not use our response (a
    /// wrong pre-shared key on one side), or the response was lost.
    Unconfirmed,
}

struct Pending {
    init: Initiation,
    sent_at: Nanos,
    /// A cookie reply arrived: resend at once with mac2.
    retry_now: bool,
    /// It went out with a valid mac2 (a late cookie reply to an earlier
    /// initiation does not replace it then).
    with_mac2: bool,
}

/// What [`CryptoState::handle_initiation`] wrote into the body buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InitOutcome {
    /// A handshake response body of this length; `restarted` holds the
    /// peer's next tunnel sequence number if the peer is a new incarnation
    /// (it restarted, or this is the first contact).
    Response { len: usize, restarted: Option<u64> },
    /// Under load without a valid mac2: a cookie reply body of this length.
    Cookie { len: usize },
}

pub struct CryptoState {
    cfg: SecurityConfig,
    rng: ChaCha20Rng,
    current: Option<Session>,
    previous: Option<(Session, Nanos)>,
    next: Option<Session>,
    /// What the `Established` event of `next` will say once confirmed
    /// (cipher, rekey).
    next_meta: (&'static str, bool),
    pending: Option<Pending>,
    want_handshake: bool,
    /// Initiator: retry intervals, recent initiations, cookies per path.
    retry: Retry,
    last_init_timestamp: Option<[u8; TIMESTAMP_LEN]>,
    limiter: RateLimiter,
    /// Initiations with a valid mac1 per second beyond which the responder
    /// is under load and asks for cookies.
    load: Bucket,
    /// Responder: session-unknown hints per second (`exchange.rs`).
    hints: Bucket,
    /// Random per start: announced in handshakes (peers detect restarts).
    incarnation: u64,
    peer_incarnation: Option<u64>,
    /// Checks mac1 of datagrams to us; the responder's cookie secret.
    cookies: CookieMaker,
    /// MAC keys of datagrams to the peer (and cookie replies from it).
    peer_macs: MacKeys,
    pub stats: CryptoStats,
    events: VecDeque<CryptoEvent>,
    /// A concentrator's guard checks load and cookies before this state
    /// sees an initiation (`concentrator::guard`).
    pub(crate) guarded: bool,
}

/// 12-byte handshake timestamp from wall-clock nanoseconds.
pub fn timestamp(wall_ns: u64) -> [u8; TIMESTAMP_LEN] {
    let mut t = [0u8; TIMESTAMP_LEN];
    t[..8].copy_from_slice(&(wall_ns / 1_000_000_000).to_be_bytes());
    t[8..].copy_from_slice(&((wall_ns % 1_000_000_000) as u32).to_be_bytes());
    t
}

impl CryptoState {
    pub fn new(cfg: SecurityConfig, seed: [u8; 32]) -> Self {
        let want = cfg.role == HandshakeRole::Initiator;
        let mut rng = ChaCha20Rng::from_seed(seed);
        let incarnation = rng.next_u64();
        let cookies = CookieMaker::new(&cfg.identity.private.public());
        let peer_macs = MacKeys::new(&cfg.identity.peer_public);
        let load_rate = f64::from(knobs::HANDSHAKE_LOAD_PER_S);
        Self {
            cfg,
            rng,
            current: None,
            previous: None,
            next: None,
            next_meta: ("", false),
            pending: None,
            want_handshake: want,
            retry: Retry::new(crate::MAX_PATHS),
            last_init_timestamp: None,
            limiter: RateLimiter::default(),
            load: Bucket::full(load_rate),
            hints: Bucket::full(knobs::SESSION_UNKNOWN_PER_S),
            incarnation,
            peer_incarnation: None,
            cookies,
            peer_macs,
            stats: CryptoStats::default(),
            events: VecDeque::new(),
            guarded: false,
        }
    }

    /// This side's announcement for a handshake message.
    fn announce(&self, next_seq: u64) -> Announce {
        Announce {
            incarnation: self.incarnation,
            next_seq,
        }
    }

    /// Record what the peer announced; its next sequence number if it is a
    /// new incarnation (a restart, or the first contact).
    fn note_peer(&mut self, a: Announce) -> Option<u64> {
        if self.peer_incarnation == Some(a.incarnation) {
            return None;
        }
        if self.peer_incarnation.is_some() {
            self.stats.peer_restarts += 1;
        }
        self.peer_incarnation = Some(a.incarnation);
        Some(a.next_seq)
    }

    /// Write mac1 and mac2 into the end of a handshake datagram to the
    /// peer sent on `path`; an initiation remembers its mac1.
    pub fn write_macs(&mut self, now: Nanos, path: usize, dgram: &mut [u8]) {
        let cookie = match self.cfg.role {
            HandshakeRole::Initiator => self.retry.cookie_for(now, path),
            HandshakeRole::Responder => None,
        };
        let mac1 = self.peer_macs.write_macs(dgram, cookie.as_ref());
        if let (Some(p), Some(mac1)) = (self.pending.as_mut(), mac1) {
            if self.cfg.role == HandshakeRole::Initiator {
                p.with_mac2 = cookie.is_some();
                self.retry.on_sent(SentInit {
                    index: p.init.local_index,
                    mac1,
                    path,
                    sent_at: p.sent_at,
                });
            }
        }
    }

    /// Initiator: every path fell silent (the server may have restarted):
    /// handshake now instead of waiting for the rekey timer. Retries back
    /// off while nothing answers.
    pub fn handshake_on_silence(&mut self) {
        if self.cfg.role == HandshakeRole::Initiator
            && self.pending.is_none()
            && !self.want_handshake
        {
            self.want_handshake = true;
            self.stats.silence_handshakes += 1;
        }
    }

    /// Initiator: a cookie reply (under load, the server asks for proof of
    /// our address). It may answer any recent initiation; the cookie is
    /// kept for the path that initiation went out on, and the pending
    /// initiation is resent at once with mac2 unless it already carried one
    /// (its answer may be on its way).
    pub fn handle_cookie_reply(&mut self, now: Nanos, body: &[u8]) -> Result<(), DropReason> {
        if self.cfg.role != HandshakeRole::Initiator || self.pending.is_none() {
            return Err(DropReason::HandshakeUnexpected);
        }
        let sent = cookie::cookie_reply_receiver(body)
            .and_then(|i| self.retry.sent(i))
            .ok_or(DropReason::HandshakeUnexpected)?;
        let c = self
            .peer_macs
            .open_cookie_reply(body, &sent.mac1)
            .ok_or(DropReason::HandshakeFailed)?;
        self.retry.on_cookie(now, &sent, c);
        if let Some(p) = self.pending.as_mut().filter(|p| !p.with_mac2) {
            p.retry_now = true;
        }
        self.stats.cookies_received += 1;
        Ok(())
    }

    /// Initiator: the path whose cookie is the freshest one still usable,
    /// if any (an initiation there can carry mac2 at once).
    pub fn cookie_path(&self, now: Nanos) -> Option<usize> {
        self.retry.cookie_path(now)
    }

    pub fn role(&self) -> HandshakeRole {
        self.cfg.role
    }

    /// The peer's static public key (the only one accepted).
    pub fn peer_public(&self) -> &crate::crypto::keys::PublicKey {
        &self.cfg.identity.peer_public
    }

    fn seed(&mut self) -> [u8; 32] {
        let mut s = [0u8; 32];
        self.rng.fill_bytes(&mut s);
        s
    }

    fn new_index(&mut self) -> u32 {
        loop {
            let mut i = self.rng.next_u32();
            if let Some(slot) = self.cfg.index_slot {
                let random_bits = 32 - INDEX_SLOT_BITS;
                i = (slot << random_bits) | (i & ((1 << random_bits) - 1));
            }
            let taken = [
                self.current.as_ref(),
                self.previous.as_ref().map(|p| &p.0),
                self.next.as_ref(),
            ]
            .iter()
            .flatten()
            .any(|s| s.local_index == i);
            if i != 0 && !taken {
                return i;
            }
        }
    }

    fn offer(&self) -> Cipher {
        match self.cfg.cipher {
            CipherPref::Only(c) => c,
            CipherPref::Auto if cpu_has_aes() => Cipher::Aes256Gcm,
            CipherPref::Auto => Cipher::ChaCha20Poly1305,
        }
    }

    /// The session that seals, with its counter for the next packet.
    pub fn seal_session(&mut self, now: Nanos) -> Option<(&Session, u64)> {
        let s = self.current.as_mut()?;
        if s.age(now) >= knobs::REJECT_AFTER {
            return None;
        }
        let c = s.next_counter()?;
        if self.cfg.role == HandshakeRole::Initiator
            && self.pending.is_none()
            && (s.sent() >= self.cfg.rekey_after_packets || s.age(now) >= self.cfg.rekey_after)
        {
            self.want_handshake = true;
        }
        Some((self.current.as_ref()?, c))
    }

    /// Seal a body with the current session (after `seal_session` handed
    /// out `counter`). Returns the sealed body length.
    pub fn seal(&self, counter: u64, aad: &[u8], body: &mut [u8], len: usize) -> Option<usize> {
        self.current.as_ref()?.seal(counter, aad, body, len)
    }

    pub fn has_session(&self) -> bool {
        self.current.is_some()
    }

    /// Open a packet addressed to our session `index`: [`Self::precheck`],
    /// decrypt with [`Self::recv_key`], [`Self::commit`].
    pub fn open(
        &mut self,
        index: u32,
        counter: u64,
        aad: &[u8],
        body: &mut [u8],
        now: Nanos,
    ) -> Result<usize, DropReason> {
        self.precheck(index, counter, now)?;
        let key = self.recv_key(index).ok_or(DropReason::NoSession)?;
        let n = key
            .open(counter, aad, body)
            .map_err(|_| DropReason::BadTag)?;
        self.commit(index, counter, now)?;
        Ok(n)
    }

    /// The session with our index `index`, among current, previous and next.
    fn session(&self, index: u32) -> Option<&Session> {
        [
            self.current.as_ref(),
            self.previous.as_ref().map(|p| &p.0),
            self.next.as_ref(),
        ]
        .into_iter()
        .flatten()
        .find(|s| s.local_index == index)
    }

    /// Whether a packet to session `index` with `counter` can be accepted,
    /// without changing any state: run before spending an AEAD open.
    pub fn precheck(&self, index: u32, counter: u64, now: Nanos) -> Result<(), DropReason> {
        let s = self.session(index).ok_or(DropReason::NoSession)?;
        if self
            .current
            .as_ref()
            .is_some_and(|c| c.local_index == index)
            && s.age(now) >= knobs::REJECT_AFTER
        {
            return Err(DropReason::NoSession);
        }
        s.precheck(counter).map_err(|_| DropReason::Replay)
    }

    /// Whether a packet to session `index` with `counter` is newer than
    /// every packet accepted so far in that session (call before commit).
    pub fn is_newest(&self, index: u32, counter: u64) -> bool {
        self.session(index).is_some_and(|s| s.is_newest(counter))
    }

    /// A random token (path validation).
    pub fn random_token(&mut self) -> [u8; 8] {
        let mut t = [0u8; 8];
        self.rng.fill_bytes(&mut t);
        t
    }

    /// The receive key of session `index` (shared, for parallel opens).
    pub fn recv_key(&self, index: u32) -> Option<&DataKey> {
        self.session(index).map(Session::recv_key)
    }

    /// Record an authenticated packet: replay window, and key confirmation
    /// (the first packet under the next session makes it current).
    pub fn commit(&mut self, index: u32, counter: u64, now: Nanos) -> Result<(), DropReason> {
        let map = |_| DropReason::Replay;
        if let Some(s) = self.current.as_mut().filter(|s| s.local_index == index) {
            if s.age(now) >= knobs::REJECT_AFTER {
                return Err(DropReason::NoSession);
            }
            return s.commit(counter).map_err(map);
        }
        if let Some((s, _)) = self
            .previous
            .as_mut()
            .filter(|(s, _)| s.local_index == index)
        {
            return s.commit(counter).map_err(map);
        }
        if let Some(s) = self.next.as_mut().filter(|s| s.local_index == index) {
            s.commit(counter).map_err(map)?;
            // Key confirmation: the initiator uses the new session, so the
            // handshake is complete only now (with a wrong pre-shared key
            // the initiator cannot read our response and never gets here).
            let confirmed = self.next.take();
            let (cipher, rekey) = self.next_meta;
            self.stats.handshakes_completed += 1;
            if rekey {
                self.stats.rekeys += 1;
            }
            self.events
                .push_back(CryptoEvent::Established { cipher, rekey });
            if let Some(old) = std::mem::replace(&mut self.current, confirmed) {
                self.previous = Some((old, now));
            }
            return Ok(());
        }
        Err(DropReason::NoSession)
    }

    /// The session that seals right now.
    pub fn current_session(&self) -> Option<&Session> {
        self.current.as_ref()
    }

    /// The session with our index `index` (current, previous or next), to
    /// seal a datagram it handed out a nonce for (shared, for parallel
    /// seals).
    pub fn sealing_session(&self, index: u32) -> Option<&Session> {
        self.session(index)
    }

    /// Earliest time `handle_timeout` has work.
    pub fn poll_timeout(&self) -> Option<Nanos> {
        let mut t: Option<Nanos> = None;
        let mut min = |x: Nanos| t = Some(t.map_or(x, |y| y.min(x)));
        if let Some(t) = self.retry_at() {
            min(t);
        }
        if let Some(s) = &self.current {
            min(s.created + knobs::REJECT_AFTER);
            if self.cfg.role == HandshakeRole::Initiator && self.pending.is_none() {
                min(s.created + self.cfg.rekey_after);
            }
        }
        if let Some((_, at)) = &self.previous {
            min(at + knobs::PREVIOUS_SESSION_GRACE);
        }
        t
    }

    pub fn handle_timeout(&mut self, now: Nanos) {
        if self
            .previous
            .as_ref()
            .is_some_and(|(_, at)| now >= at + knobs::PREVIOUS_SESSION_GRACE)
        {
            self.previous = None;
        }
        if self
            .current
            .as_ref()
            .is_some_and(|s| s.age(now) >= knobs::REJECT_AFTER)
        {
            self.current = None;
            self.stats.sessions_expired += 1;
            self.events.push_back(CryptoEvent::Expired);
        }
        if self.cfg.role == HandshakeRole::Initiator && self.pending.is_none() {
            let due = self
                .current
                .as_ref()
                .is_none_or(|s| s.age(now) >= self.cfg.rekey_after);
            if due {
                self.want_handshake = true;
            }
        }
    }

    /// Whether an initiation is waiting to go out (for timers).
    pub fn wants_initiation(&self, now: Nanos) -> bool {
        self.cfg.role == HandshakeRole::Initiator
            && ((self.want_handshake && self.pending.is_none())
                || self.retry_at().is_some_and(|t| now >= t))
    }

    pub fn poll_event(&mut self) -> Option<CryptoEvent> {
        self.events.pop_front()
    }

    /// Status: mode, cipher, session age (no key material).
    pub fn status(&self, now: Nanos) -> SecurityStatus {
        SecurityStatus {
            mode: "encrypted".into(),
            role: match self.cfg.role {
                HandshakeRole::Initiator => "initiator",
                HandshakeRole::Responder => "responder",
            }
            .into(),
            cipher: self.current.as_ref().map(|s| s.cipher.name().into()),
            session_age_s: self.current.as_ref().map(|s| s.age(now) as f64 / 1e9),
            session_packets_sent: self.current.as_ref().map(|s| s.sent()),
            stats: self.stats.clone(),
        }
    }
}

/// Security part of the status document.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct SecurityStatus {
    pub mode: Cow<'static, str>,
    pub role: Cow<'static, str>,
    pub cipher: Option<Cow<'static, str>>,
    pub session_age_s: Option<f64>,
    pub session_packets_sent: Option<u64>,
    #[serde(flatten)]
    pub stats: CryptoStats,
}
