//! The tunnel's data path split around its AEAD work, so that the I/O layer
//! can seal and open a whole batch in parallel (worker threads) while every
//! state change stays serial and in order.
//!
//! Send: [`Tunnel::send_unsealed`] (serial: path, sequence numbers, nonce,
//! header; hands out a [`SealTicket`]) → [`Sealer::seal`] with that ticket
//! (parallel, shared keys) → the datagram leaves.
//! Receive: [`Tunnel::recv_start`] (serial: header parsed once into an
//! [`OpenTicket`], path, source, session, replay pre-check) →
//! [`Opener::open`] (parallel) → [`Tunnel::recv_finish`] (serial: replay
//! window, key confirmation, path statistics, reordering).
//!
//! Invariants:
//! * the sealer and opener only read shared keys; nonces are handed out by
//!   the serial part, so parallel seals never share a nonce;
//! * a packet changes state only in `recv_finish`, after it authenticated;
//!   the replay window is updated there, so a duplicate within one batch
//!   is dropped (`replay`) even if both copies opened;
//! * a datagram is sealed with the session and nonce it was given, so no
//!   session change between `send_unsealed` and the seal can break it;
//! * `Tunnel::send` is exactly `send_unsealed` + `seal`, and `Tunnel::recv`
//!   exactly `recv_start` + `open` + `recv_finish`, so every test of
//!   `send`/`recv` covers the I/O layer's split path too.

use std::net::SocketAddr;

use super::address::Freshness;
use super::{Received, Transmit, Tunnel};
use crate::crypto::state::CryptoState;
use crate::crypto::TAG_LEN;
use crate::stats::DropReason;
use crate::wire::{HeaderFields, PacketType, HEADER_LEN};
use crate::Nanos;

/// What sealing one datagram needs, handed out with it by the serial part:
/// the session (our index for it) and the nonce. Sealing uses exactly
/// these, whatever the current session is by then, so a session change
/// between queueing and sealing cannot drop or mis-seal the datagram (the
/// superseded session is kept for its grace period; see `crypto::state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SealTicket {
    /// Our local index of the session.
    pub session: u32,
    /// The AEAD nonce counter written into the header.
    pub counter: u64,
}

/// Seals datagrams made by [`Tunnel::send_unsealed`]. `Sync`: share it
/// among threads for one batch.
#[derive(Clone, Copy)]
pub struct Sealer<'a> {
    /// `None`: no encryption configured, datagrams go as they are.
    crypto: Option<&'a CryptoState>,
}

impl Sealer<'_> {
    /// Whether sealing is a no-op (plaintext tunnel).
    pub fn is_plain(&self) -> bool {
        self.crypto.is_none()
    }

    /// Seal `datagram` (its whole length, the tag's room at the end) in
    /// place as its [`Transmit::seal`] says ([`super::Seal::Done`]: nothing
    /// to seal, the datagram is complete). `false` means it must not be
    /// sent: the session is gone (expired while queued) or a ticket
    /// reached a plaintext tunnel.
    pub fn seal(&self, seal: super::Seal, datagram: &mut [u8]) -> bool {
        let super::Seal::Pending(t) = seal else {
            return true;
        };
        let Some(c) = self.crypto else {
            return false;
        };
        let Some(s) = c.sealing_session(t.session) else {
            return false;
        };
        let Some(body_len) = datagram.len().checked_sub(HEADER_LEN + TAG_LEN) else {
            return false;
        };
        let mut aad = [0u8; HEADER_LEN];
        aad.copy_from_slice(&datagram[..HEADER_LEN]);
        s.seal(t.counter, &aad, &mut datagram[HEADER_LEN..], body_len)
            .is_some()
    }
}

/// A received secure datagram's header, parsed once by
/// [`Tunnel::recv_start`] and carried through [`Opener::open`] and
/// [`Tunnel::recv_finish`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenTicket {
    pub ty: PacketType,
    /// The header, with `path` already our own path (`pairing.rs`).
    pub fields: HeaderFields,
    /// The path id the sender wrote (its own numbering).
    pub peer_path: u8,
    /// The outer header's ECN bits, as the I/O layer read them
    /// (`ecn.rs`).
    pub outer_ecn: u8,
}

/// Opens datagrams that [`Tunnel::recv_start`] passed on. `Sync`.
#[derive(Clone, Copy)]
pub struct Opener<'a> {
    crypto: Option<&'a CryptoState>,
}

impl Opener<'_> {
    /// Decrypt `datagram` in place; returns the body length, or the reason
    /// to drop it (to hand to [`Tunnel::recv_finish`] either way).
    pub fn open(&self, t: &OpenTicket, datagram: &mut [u8]) -> Result<usize, DropReason> {
        let c = self.crypto.ok_or(DropReason::NoSession)?;
        let key = c.recv_key(t.fields.session).ok_or(DropReason::NoSession)?;
        if datagram.len() < HEADER_LEN {
            return Err(DropReason::Truncated);
        }
        let mut aad = [0u8; HEADER_LEN];
        aad.copy_from_slice(&datagram[..HEADER_LEN]);
        key.open(t.fields.counter, &aad, &mut datagram[HEADER_LEN..])
            .map_err(|_| DropReason::BadTag)
    }
}

/// What [`Tunnel::recv_start`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecvStart {
    /// Fully handled (dropped, a handshake message, or plaintext data).
    Done(Received),
    /// Authenticate with [`Opener::open`], then call [`Tunnel::recv_finish`],
    /// both with this ticket.
    Open(OpenTicket),
}

impl Tunnel {
    /// The sealer for datagrams made by [`Tunnel::send_unsealed`].
    pub fn sealer(&self) -> Sealer<'_> {
        Sealer {
            crypto: self.crypto.as_ref(),
        }
    }

    /// Encapsulate the inner packet at `buf[HEADER_LEN..HEADER_LEN + len]`
    /// and seal it: exactly [`Tunnel::send_unsealed`] followed by
    /// [`Sealer::seal`]. `buf` needs `TAG_LEN` bytes of room after the
    /// packet when security is on.
    pub fn send(&mut self, now: Nanos, buf: &mut [u8], len: usize) -> Option<Transmit> {
        let tx = self.send_unsealed(now, buf, len)?;
        self.seal_or_count(tx, buf)
    }

    /// Seal a transmit made here; one that cannot be sealed is counted
    /// (`no_session`) and not returned.
    pub(super) fn seal_or_count(&mut self, tx: Transmit, buf: &mut [u8]) -> Option<Transmit> {
        if self.sealer().seal(tx.seal, &mut buf[..tx.len]) {
            Some(Transmit {
                seal: super::Seal::Done,
                ..tx
            })
        } else {
            self.drops.add(DropReason::NoSession);
            None
        }
    }

    /// The opener for datagrams that [`Tunnel::recv_start`] passed on.
    pub fn opener(&self) -> Opener<'_> {
        Opener {
            crypto: self.crypto.as_ref(),
        }
    }

    /// Handle a datagram that arrived on local socket `local_key` from
    /// `from`. `buf` holds exactly the datagram; it is decrypted in place.
    /// Its outer header's ECN field reads as Not-ECT ([`Tunnel::recv_ecn`]
    /// takes it).
    pub fn recv(
        &mut self,
        now: Nanos,
        local_key: usize,
        from: SocketAddr,
        buf: &mut [u8],
    ) -> Received {
        self.recv_ecn(now, local_key, from, buf, 0)
    }

    /// [`Tunnel::recv`] of a datagram whose outer header carried the ECN
    /// bits `outer_ecn` (RFC 6040, `ecn.rs`).
    pub fn recv_ecn(
        &mut self,
        now: Nanos,
        local_key: usize,
        from: SocketAddr,
        buf: &mut [u8],
        outer_ecn: u8,
    ) -> Received {
        match self.recv_start(now, local_key, from, buf, outer_ecn) {
            RecvStart::Done(r) => r,
            RecvStart::Open(t) => {
                let opened = self.opener().open(&t, buf);
                self.recv_finish(now, from, buf, &t, opened)
            }
        }
    }

    /// Second half of [`Tunnel::recv`] for a datagram that
    /// [`Tunnel::recv_start`] passed on, with what [`Opener::open`] said.
    pub fn recv_finish(
        &mut self,
        now: Nanos,
        from: SocketAddr,
        buf: &mut [u8],
        t: &OpenTicket,
        opened: Result<usize, DropReason>,
    ) -> Received {
        let body_len = match opened {
            Ok(n) => n,
            Err(r) => return self.drop_counted(r),
        };
        let (ty, f) = (t.ty, t.fields);
        let Some(c) = self.crypto.as_mut() else {
            return self.drop_counted(DropReason::NoSession);
        };
        if let Err(r) = c.commit(f.session, f.counter, now) {
            return self.drop_counted(r);
        }
        let fresh = Freshness {
            session: f.session,
            counter: f.counter,
            current: c
                .current_session()
                .is_some_and(|s| s.local_index == f.session),
        };
        if let Err(r) = self.ecn_arrival(ty, &f, t.outer_ecn, buf, body_len) {
            return self.drop_counted(r);
        }
        self.recv_authentic(now, ty, &f, t.peer_path, from, Some(fresh), buf, body_len)
    }
}
