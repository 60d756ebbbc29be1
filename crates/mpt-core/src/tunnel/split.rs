//! The tunnel's data path split around its AEAD work, so that the I/O layer
//! can seal and open a whole batch in parallel (worker threads) while every
//! state change stays serial and in order.
//!
//! Send: [`Tunnel::send_unsealed`] (serial: path, sequence numbers, nonce,
//! header) → [`Sealer::seal`] (parallel, shared key) → the datagram leaves.
//! Receive: [`Tunnel::recv_start`] (serial: header, path, source, session,
//! replay pre-check) → [`Opener::open`] (parallel) → [`Tunnel::recv_finish`]
//! (serial: replay window, key confirmation, path statistics, reordering).
//!
//! Invariants:
//! * the sealer and opener only read shared keys; nonces are handed out by
//!   the serial part, so parallel seals never share a nonce;
//! * a packet changes state only in `recv_finish`, after it authenticated;
//!   the replay window is updated there, so a duplicate within one batch
//!   is dropped (`replay`) even if both copies opened;
//! * `Tunnel::recv` is exactly `recv_start` + `open` + `recv_finish`, so
//!   every test of `recv` covers the split path too.

use std::net::SocketAddr;

use super::{Received, Tunnel};
use crate::crypto::session::Session;
use crate::crypto::state::CryptoState;
use crate::crypto::TAG_LEN;
use crate::stats::DropReason;
use crate::wire::{Header, HEADER_LEN};
use crate::Nanos;

/// Seals datagrams made by [`Tunnel::send_unsealed`]. `Sync`: share it
/// among threads for one batch.
#[derive(Clone, Copy)]
pub enum Sealer<'a> {
    /// No encryption configured: datagrams go as they are.
    Plain,
    /// The current session.
    Key(&'a Session),
    /// Security on but no session: nothing may leave.
    Missing,
}

impl Sealer<'_> {
    /// Seal `datagram` (its whole length, the tag's room at the end) in
    /// place. `false` means it must not be sent: no session, or a header
    /// that names another session (an I/O layer bug, never on purpose).
    pub fn seal(&self, datagram: &mut [u8]) -> bool {
        let s = match self {
            Sealer::Plain => return true,
            Sealer::Missing => return false,
            Sealer::Key(s) => s,
        };
        let Ok(h) = Header::new_checked(datagram) else {
            return false;
        };
        let (session, counter) = (h.session(), h.counter());
        let Some(body_len) = datagram.len().checked_sub(HEADER_LEN + TAG_LEN) else {
            return false;
        };
        if session != s.remote_index {
            return false;
        }
        let mut aad = [0u8; HEADER_LEN];
        aad.copy_from_slice(&datagram[..HEADER_LEN]);
        s.seal(counter, &aad, &mut datagram[HEADER_LEN..], body_len)
            .is_some()
    }
}

/// Opens datagrams that [`Tunnel::recv_start`] passed on. `Sync`.
#[derive(Clone, Copy)]
pub struct Opener<'a> {
    crypto: Option<&'a CryptoState>,
}

impl Opener<'_> {
    /// Decrypt `datagram` in place; returns the body length, or the reason
    /// to drop it (to hand to [`Tunnel::recv_finish`] either way).
    pub fn open(&self, datagram: &mut [u8]) -> Result<usize, DropReason> {
        let c = self.crypto.ok_or(DropReason::NoSession)?;
        let h = Header::new_checked(datagram).map_err(|_| DropReason::Truncated)?;
        let (index, counter) = (h.session(), h.counter());
        let key = c.recv_key(index).ok_or(DropReason::NoSession)?;
        let mut aad = [0u8; HEADER_LEN];
        aad.copy_from_slice(&datagram[..HEADER_LEN]);
        key.open(counter, &aad, &mut datagram[HEADER_LEN..])
            .map_err(|_| DropReason::BadTag)
    }
}

/// What [`Tunnel::recv_start`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecvStart {
    /// Fully handled (dropped, a handshake message, or plaintext data).
    Done(Received),
    /// Authenticate with [`Opener::open`], then call [`Tunnel::recv_finish`].
    Open,
}

impl Tunnel {
    /// The sealer for datagrams sent since the last session change.
    pub fn sealer(&self) -> Sealer<'_> {
        match self.crypto.as_ref() {
            None => Sealer::Plain,
            Some(c) => c.current_session().map_or(Sealer::Missing, Sealer::Key),
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
    pub fn recv(
        &mut self,
        now: Nanos,
        local_key: usize,
        from: SocketAddr,
        buf: &mut [u8],
    ) -> Received {
        match self.recv_start(now, local_key, from, buf) {
            RecvStart::Done(r) => r,
            RecvStart::Open => {
                let opened = self.opener().open(buf);
                self.recv_finish(now, from, buf, opened)
            }
        }
    }

    /// Second half of [`Tunnel::recv`] for a datagram that
    /// [`Tunnel::recv_start`] passed on, with what [`Opener::open`] said.
    pub fn recv_finish(
        &mut self,
        now: Nanos,
        from: SocketAddr,
        buf: &[u8],
        opened: Result<usize, DropReason>,
    ) -> Received {
        let body_len = match opened {
            Ok(n) => n,
            Err(r) => return self.drop_counted(r),
        };
        let Ok(h) = Header::new_checked(buf) else {
            return self.drop_counted(DropReason::Truncated);
        };
        let (ty, f) = (h.packet_type(), h.fields());
        let Some(c) = self.crypto.as_mut() else {
            return self.drop_counted(DropReason::NoSession);
        };
        let newest = c.is_newest(f.session, f.counter);
        if let Err(r) = c.commit(f.session, f.counter, now) {
            return self.drop_counted(r);
        }
        self.recv_authentic(now, ty, &f, from, newest, buf, body_len)
    }
}
