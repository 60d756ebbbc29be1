//! Session management for one peer: which session seals, which sessions
//! open, when to (re)handshake, and handshake message handling.
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

use std::collections::VecDeque;
use std::net::IpAddr;

use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha20Rng;
use serde::Serialize;

use super::aead::{cpu_has_aes, Cipher, DataKey};
use super::handshake::{
    self, HandshakeError, Identity, Initiation, INIT_BODY_LEN, RESPONSE_BODY_LEN, TIMESTAMP_LEN,
};
use super::knobs;
use super::ratelimit::RateLimiter;
use super::session::Session;
use crate::stats::DropReason;
use crate::Nanos;

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
}

/// Counters shown in `mpt status`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CryptoStats {
    pub handshakes_completed: u64,
    pub handshake_failures: u64,
    pub initiations_sent: u64,
    pub initiations_rate_limited: u64,
    pub rekeys: u64,
    pub sessions_expired: u64,
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
    },
    /// Initiations went unanswered (logged at 2, 4, 8, ... attempts).
    Unanswered {
        attempts: u64,
    },
    Expired,
}

struct Pending {
    init: Initiation,
    sent_at: Nanos,
}

pub struct CryptoState {
    cfg: SecurityConfig,
    rng: ChaCha20Rng,
    current: Option<Session>,
    previous: Option<(Session, Nanos)>,
    next: Option<Session>,
    pending: Option<Pending>,
    want_handshake: bool,
    attempts: u64,
    last_init_timestamp: Option<[u8; TIMESTAMP_LEN]>,
    limiter: RateLimiter,
    pub stats: CryptoStats,
    events: VecDeque<CryptoEvent>,
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
        Self {
            cfg,
            rng: ChaCha20Rng::from_seed(seed),
            current: None,
            previous: None,
            next: None,
            pending: None,
            want_handshake: want,
            attempts: 0,
            last_init_timestamp: None,
            limiter: RateLimiter::default(),
            stats: CryptoStats::default(),
            events: VecDeque::new(),
        }
    }

    pub fn role(&self) -> HandshakeRole {
        self.cfg.role
    }

    fn seed(&mut self) -> [u8; 32] {
        let mut s = [0u8; 32];
        self.rng.fill_bytes(&mut s);
        s
    }

    fn new_index(&mut self) -> u32 {
        loop {
            let i = self.rng.next_u32();
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
            // Key confirmation: the initiator uses the new session.
            let confirmed = self.next.take();
            if let Some(old) = std::mem::replace(&mut self.current, confirmed) {
                self.previous = Some((old, now));
            }
            return Ok(());
        }
        Err(DropReason::NoSession)
    }

    /// The session that seals right now (shared, for parallel seals).
    pub fn current_session(&self) -> Option<&Session> {
        self.current.as_ref()
    }

    /// Server: process an initiation from `src`. On success writes the
    /// response body into `out` and returns its length.
    pub fn handle_initiation(
        &mut self,
        now: Nanos,
        src: IpAddr,
        body: &[u8],
        out: &mut [u8],
    ) -> Result<usize, DropReason> {
        if self.cfg.role != HandshakeRole::Responder {
            return Err(DropReason::HandshakeUnexpected);
        }
        if !self.limiter.allow(src, now) {
            self.stats.initiations_rate_limited += 1;
            return Err(DropReason::HandshakeRateLimited);
        }
        let seed = self.seed();
        let index = self.new_index();
        let pref = self.cfg.cipher;
        let choose = move |offer: Cipher| match pref {
            CipherPref::Only(c) => c,
            CipherPref::Auto if offer == Cipher::Aes256Gcm && cpu_has_aes() => Cipher::Aes256Gcm,
            CipherPref::Auto => Cipher::ChaCha20Poly1305,
        };
        match handshake::respond(
            &self.cfg.identity,
            seed,
            body,
            index,
            self.last_init_timestamp,
            choose,
            out,
        ) {
            Ok(r) => {
                self.last_init_timestamp = Some(r.timestamp);
                let rekey = self.current.is_some();
                self.next = Some(Session::new(&r.established, index, now));
                self.stats.handshakes_completed += 1;
                if rekey {
                    self.stats.rekeys += 1;
                }
                self.events.push_back(CryptoEvent::Established {
                    cipher: r.established.cipher.name(),
                    rekey,
                });
                Ok(RESPONSE_BODY_LEN)
            }
            Err(e) => Err(self.fail(e)),
        }
    }

    fn fail(&mut self, e: HandshakeError) -> DropReason {
        self.stats.handshake_failures += 1;
        self.events.push_back(CryptoEvent::Failed {
            reason: e.describe(),
        });
        match e {
            HandshakeError::Unexpected => DropReason::HandshakeUnexpected,
            _ => DropReason::HandshakeFailed,
        }
    }

    /// Client: process a response.
    pub fn handle_response(&mut self, now: Nanos, body: &[u8]) -> Result<(), DropReason> {
        if self.cfg.role != HandshakeRole::Initiator {
            return Err(DropReason::HandshakeUnexpected);
        }
        let matches = self.pending.as_ref().map(|p| p.init.local_index)
            == handshake::response_receiver_index(body);
        if !matches || self.pending.is_none() {
            return Err(DropReason::HandshakeUnexpected);
        }
        let Some(p) = self.pending.take() else {
            return Err(DropReason::HandshakeUnexpected);
        };
        let index = p.init.local_index;
        match handshake::complete(p.init, body) {
            Ok(e) => {
                let rekey = self.current.is_some();
                if let Some(old) = self.current.replace(Session::new(&e, index, now)) {
                    self.previous = Some((old, now));
                }
                self.stats.handshakes_completed += 1;
                if rekey {
                    self.stats.rekeys += 1;
                }
                self.attempts = 0;
                self.events.push_back(CryptoEvent::Established {
                    cipher: e.cipher.name(),
                    rekey,
                });
                Ok(())
            }
            Err(err) => {
                // Keep waiting for a genuine response to a new initiation.
                self.want_handshake = true;
                Err(self.fail(err))
            }
        }
    }

    /// Client: an initiation to send now, written into `out`; returns its
    /// length and the attempt number (to rotate paths).
    pub fn poll_initiation(
        &mut self,
        now: Nanos,
        wall_ns: u64,
        out: &mut [u8],
    ) -> Option<(usize, u64)> {
        if self.cfg.role != HandshakeRole::Initiator || out.len() < INIT_BODY_LEN {
            return None;
        }
        let retry_due = self
            .pending
            .as_ref()
            .is_some_and(|p| now >= p.sent_at + knobs::HANDSHAKE_RETRY);
        let first = self.want_handshake && self.pending.is_none();
        if !first && !retry_due {
            return None;
        }
        if retry_due && self.attempts.is_power_of_two() && self.attempts >= 2 {
            self.events.push_back(CryptoEvent::Unanswered {
                attempts: self.attempts,
            });
        }
        let seed = self.seed();
        let index = self.new_index();
        let init = handshake::initiate(
            &self.cfg.identity,
            seed,
            index,
            timestamp(wall_ns),
            self.offer(),
            out,
        )
        .ok()?;
        self.pending = Some(Pending { init, sent_at: now });
        self.want_handshake = false;
        self.stats.initiations_sent += 1;
        self.attempts += 1;
        Some((INIT_BODY_LEN, self.attempts))
    }

    /// Earliest time `handle_timeout` has work.
    pub fn poll_timeout(&self) -> Option<Nanos> {
        let mut t: Option<Nanos> = None;
        let mut min = |x: Nanos| t = Some(t.map_or(x, |y| y.min(x)));
        if let Some(p) = &self.pending {
            min(p.sent_at + knobs::HANDSHAKE_RETRY);
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
                || self
                    .pending
                    .as_ref()
                    .is_some_and(|p| now >= p.sent_at + knobs::HANDSHAKE_RETRY))
    }

    pub fn poll_event(&mut self) -> Option<CryptoEvent> {
        self.events.pop_front()
    }

    /// Status: mode, cipher, session age (no key material).
    pub fn status(&self, now: Nanos) -> SecurityStatus {
        SecurityStatus {
            mode: "encrypted",
            role: match self.cfg.role {
                HandshakeRole::Initiator => "initiator",
                HandshakeRole::Responder => "responder",
            },
            cipher: self.current.as_ref().map(|s| s.cipher.name()),
            session_age_s: self.current.as_ref().map(|s| s.age(now) as f64 / 1e9),
            session_packets_sent: self.current.as_ref().map(|s| s.sent()),
            stats: self.stats.clone(),
        }
    }
}

/// Security part of the status document.
#[derive(Debug, Clone, Serialize)]
pub struct SecurityStatus {
    pub mode: &'static str,
    pub role: &'static str,
    pub cipher: Option<&'static str>,
    pub session_age_s: Option<f64>,
    pub session_packets_sent: Option<u64>,
    #[serde(flatten)]
    pub stats: CryptoStats,
}
