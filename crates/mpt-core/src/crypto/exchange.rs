//! The handshake messages of [`CryptoState`]: the server answering an
//! initiation (or, under load, a cookie reply), the client taking the
//! response, and the client writing initiations (Noise IKpsk2 as in
//! WireGuard; see `handshake.rs` and `cookie.rs`).
//!
//! A responder answers a sealed datagram naming a session it does not
//! hold with a session-unknown hint (`wire/hint.rs`), at most
//! [`knobs::SESSION_UNKNOWN_PER_S`] a second; the initiator takes one only
//! for the session it seals with, a counter it sent lately and a session
//! at least [`knobs::SESSION_UNKNOWN_MIN_AGE`] old, and then only starts a
//! handshake beside that session (a forged hint costs one handshake).
//!
//! Invariants: a message that fails any check changes no session and is
//! counted under one drop reason; a new session replaces the current one
//! only once it is authentic (the server keeps it as `next` until the
//! client's first packet confirms it).

use super::*;

impl CryptoState {
    /// Server: process the initiation datagram `dgram` (header, body and
    /// MACs) from `src`. Writes a response body (or, under load without a
    /// valid mac2, a cookie reply body) into `out`. `next_seq` is the next
    /// tunnel sequence number this side will send.
    pub fn handle_initiation(
        &mut self,
        now: Nanos,
        src: SocketAddr,
        dgram: &[u8],
        next_seq: u64,
        out: &mut [u8],
    ) -> Result<InitOutcome, DropReason> {
        if self.cfg.role != HandshakeRole::Responder {
            return Err(DropReason::HandshakeUnexpected);
        }
        let noise_end = crate::wire::HEADER_LEN + INIT_NOISE_LEN;
        if dgram.len() != noise_end + cookie::MACS_LEN {
            return Err(DropReason::Truncated);
        }
        // One keyed hash: whoever does not know our public key stops here.
        if !self.cookies.own().check_mac1(dgram) {
            return Err(DropReason::HandshakeBadMac);
        }
        let load = f64::from(knobs::HANDSHAKE_LOAD_PER_S);
        // Behind a concentrator's guard, the guard judged the load (one
        // cookie stage, or the two would keep asking for each other's).
        if !self.guarded && !self.load.take(now, load, load) {
            let secret = self.seed();
            if !self.cookies.check_mac2(now, dgram, &src, || secret) {
                let mut nonce = [0u8; cookie::COOKIE_NONCE_LEN];
                self.rng.fill_bytes(&mut nonce);
                let sender = u32::from_be_bytes([
                    dgram[noise_end - INIT_NOISE_LEN],
                    dgram[noise_end - INIT_NOISE_LEN + 1],
                    dgram[noise_end - INIT_NOISE_LEN + 2],
                    dgram[noise_end - INIT_NOISE_LEN + 3],
                ]);
                let len = self
                    .cookies
                    .write_reply(now, dgram, &src, sender, nonce, || secret, out)
                    .ok_or(DropReason::TooBig)?;
                self.stats.cookies_sent += 1;
                return Ok(InitOutcome::Cookie { len });
            }
        }
        if !self.limiter.allow(src.ip(), now) {
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
        let body = &dgram[crate::wire::HEADER_LEN..noise_end];
        let announce = self.announce(next_seq);
        match handshake::respond(
            &self.cfg.identity,
            seed,
            body,
            index,
            self.last_init_timestamp,
            choose,
            announce,
            out,
        ) {
            Ok(r) => {
                self.last_init_timestamp = Some(r.timestamp);
                let rekey = self.current.is_some();
                let answered = Session::new(&r.established, index, now);
                if self.next.replace(answered).is_some() {
                    // Our previous response was never confirmed.
                    self.stats.handshakes_unconfirmed += 1;
                    self.events.push_back(CryptoEvent::Unconfirmed);
                }
                // Established once the initiator confirms it ([`commit`]).
                self.next_meta = (r.established.cipher.name(), rekey);
                let restarted = self.note_peer(r.established.peer);
                Ok(InitOutcome::Response {
                    len: RESPONSE_NOISE_LEN + cookie::MACS_LEN,
                    restarted,
                })
            }
            Err(e) => Err(self.fail(e)),
        }
    }

    fn fail(&mut self, e: HandshakeError) -> DropReason {
        self.stats.handshake_failures += 1;
        self.events.push_back(CryptoEvent::Failed {
            reason: e.describe(),
            unknown_key: match e {
                HandshakeError::UnknownPeer(k) => Some(k),
                _ => None,
            },
        });
        match e {
            HandshakeError::Unexpected => DropReason::HandshakeUnexpected,
            _ => DropReason::HandshakeFailed,
        }
    }

    /// Client: process a response datagram (header, body and MACs).
    /// Returns the server's next tunnel sequence number if the server is a
    /// new incarnation (it restarted, or this is the first session).
    pub fn handle_response(&mut self, now: Nanos, dgram: &[u8]) -> Result<Option<u64>, DropReason> {
        if self.cfg.role != HandshakeRole::Initiator {
            return Err(DropReason::HandshakeUnexpected);
        }
        let noise_end = crate::wire::HEADER_LEN + RESPONSE_NOISE_LEN;
        if dgram.len() != noise_end + cookie::MACS_LEN {
            return Err(DropReason::Truncated);
        }
        if !self.cookies.own().check_mac1(dgram) {
            return Err(DropReason::HandshakeBadMac);
        }
        let body = &dgram[crate::wire::HEADER_LEN..noise_end];
        let matches = self.pending.as_ref().map(|p| p.init.local_index)
            == handshake::response_receiver_index(body);
        if !matches {
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
                self.retry.on_established();
                self.events.push_back(CryptoEvent::Established {
                    cipher: e.cipher.name(),
                    rekey,
                });
                Ok(self.note_peer(e.peer))
            }
            Err(err) => {
                // Keep waiting for a genuine response to a new initiation.
                self.want_handshake = true;
                Err(self.fail(err))
            }
        }
    }

    /// When the pending initiation is due to be sent again: at once after
    /// a cookie reply, else after the interval of the retry policy
    /// (`retry.rs`).
    pub(super) fn retry_at(&self) -> Option<Nanos> {
        let p = self.pending.as_ref()?;
        if p.retry_now {
            return Some(p.sent_at);
        }
        Some(p.sent_at.saturating_add(self.retry.interval()))
    }

    /// Client: an initiation to send now, written into `out` (the body,
    /// without MACs: [`CryptoState::write_macs`] adds them once the header
    /// is written); returns the body length with room for the MACs and the
    /// attempt number (to rotate paths). `next_seq` is the next tunnel
    /// sequence number this side will send.
    pub fn poll_initiation(
        &mut self,
        now: Nanos,
        wall_ns: u64,
        next_seq: u64,
        out: &mut [u8],
    ) -> Option<(usize, u64)> {
        let len = INIT_NOISE_LEN + cookie::MACS_LEN;
        if self.cfg.role != HandshakeRole::Initiator || out.len() < len {
            return None;
        }
        let retry_due = self.retry_at().is_some_and(|t| now >= t);
        let first = self.want_handshake && self.pending.is_none();
        if !first && !retry_due {
            return None;
        }
        let attempts = self.retry.attempts();
        if retry_due && attempts.is_power_of_two() && attempts >= 2 {
            self.events.push_back(CryptoEvent::Unanswered {
                attempts,
                under_load: self.retry.under_load(),
            });
        }
        let seed = self.seed();
        let index = self.new_index();
        let announce = self.announce(next_seq);
        let init = handshake::initiate(
            &self.cfg.identity,
            seed,
            index,
            timestamp(wall_ns),
            self.offer(),
            announce,
            out,
        )
        .ok()?;
        let cookie_retry = self.pending.as_ref().is_some_and(|p| p.retry_now);
        self.pending = Some(Pending {
            init,
            sent_at: now,
            retry_now: false,
            with_mac2: false,
        });
        self.want_handshake = false;
        self.stats.initiations_sent += 1;
        if !cookie_retry {
            self.retry.on_attempt();
        }
        Some((len, self.retry.attempts()))
    }

    /// Responder: whether a session-unknown hint may go out now (rate
    /// limited; counted when it may).
    pub fn take_session_unknown(&mut self, now: Nanos) -> bool {
        let rate = knobs::SESSION_UNKNOWN_PER_S;
        if self.cfg.role != HandshakeRole::Responder || !self.hints.take(now, rate, rate) {
            return false;
        }
        self.stats.session_unknown_sent += 1;
        true
    }

    /// Initiator: the peer says it does not hold the session `index` it
    /// got a datagram with `counter` for (it restarted). `Ok`: taken, and
    /// whether a handshake starts (none was under way); `Err`: the drop.
    pub fn handle_session_unknown(
        &mut self,
        now: Nanos,
        index: u32,
        counter: u64,
    ) -> Result<bool, DropReason> {
        if self.cfg.role != HandshakeRole::Initiator {
            return Err(DropReason::HandshakeUnexpected);
        }
        let s = self
            .current
            .as_ref()
            .filter(|s| s.remote_index == index)
            .ok_or(DropReason::SessionUnknownIgnored)?;
        let sent = s.sent();
        let recent = counter < sent && sent - counter <= knobs::SESSION_UNKNOWN_COUNTER_WINDOW;
        if !recent || s.age(now) < knobs::SESSION_UNKNOWN_MIN_AGE {
            return Err(DropReason::SessionUnknownIgnored);
        }
        if self.pending.is_some() || self.want_handshake {
            return Ok(false);
        }
        self.want_handshake = true;
        self.stats.session_unknown_handshakes += 1;
        Ok(true)
    }
}
