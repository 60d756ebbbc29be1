//! An established session: one key per direction, the send counter (the
//! AEAD nonce) and the receive replay window.
//!
//! Invariants: the send counter only grows and is never reused under one
//! key; a session refuses to send after `REJECT_AFTER_PACKETS`; `open` checks
//! the replay window before decrypting and updates it only after the packet
//! authenticated, so forged packets cannot move the window.

use super::aead::{Cipher, DataKey};
use super::handshake::Established;
use super::knobs;
use super::replay::{Replay, ReplayWindow};
use crate::Nanos;

/// Why a packet could not be opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenFailure {
    Replay,
    TooOld,
    BadTag,
}

pub struct Session {
    pub local_index: u32,
    pub remote_index: u32,
    pub cipher: Cipher,
    pub created: Nanos,
    send: DataKey,
    recv: DataKey,
    send_counter: u64,
    replay: ReplayWindow,
    pub received: u64,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Session(local {}, remote {}, {})",
            self.local_index,
            self.remote_index,
            self.cipher.name()
        )
    }
}

impl Session {
    pub fn new(e: &Established, local_index: u32, now: Nanos) -> Self {
        Self {
            local_index,
            remote_index: e.remote_index,
            cipher: e.cipher,
            created: now,
            send: DataKey::new(e.cipher, &e.send_key),
            recv: DataKey::new(e.cipher, &e.recv_key),
            send_counter: 0,
            replay: ReplayWindow::default(),
            received: 0,
        }
    }

    /// Packets sent so far.
    pub fn sent(&self) -> u64 {
        self.send_counter
    }

    /// Take the next nonce, or `None` when the key is used up.
    pub fn next_counter(&mut self) -> Option<u64> {
        if self.send_counter >= knobs::REJECT_AFTER_PACKETS {
            return None;
        }
        let c = self.send_counter;
        self.send_counter += 1;
        Some(c)
    }

    /// Seal `buf[..len]` (header already written as `aad`).
    pub fn seal(&self, counter: u64, aad: &[u8], buf: &mut [u8], len: usize) -> Option<usize> {
        self.send.seal(counter, aad, buf, len)
    }

    /// Check replay, decrypt in place, then record the counter.
    pub fn open(&mut self, counter: u64, aad: &[u8], buf: &mut [u8]) -> Result<usize, OpenFailure> {
        self.precheck(counter)?;
        let n = self
            .recv
            .open(counter, aad, buf)
            .map_err(|_| OpenFailure::BadTag)?;
        self.commit(counter)?;
        Ok(n)
    }

    /// Whether `counter` could still be accepted (no state change): the
    /// cheap test before spending an AEAD open on a packet.
    pub fn precheck(&self, counter: u64) -> Result<(), OpenFailure> {
        match self.replay.check(counter) {
            Replay::Fresh => Ok(()),
            Replay::Duplicate => Err(OpenFailure::Replay),
            Replay::TooOld => Err(OpenFailure::TooOld),
        }
    }

    /// The receive key, for opening packets outside `&mut self` (in
    /// parallel); [`Session::commit`] must follow each successful open.
    pub fn recv_key(&self) -> &DataKey {
        &self.recv
    }

    /// Record an authenticated `counter` in the replay window. Fails if the
    /// counter was accepted meanwhile (a duplicate within one batch).
    pub fn commit(&mut self, counter: u64) -> Result<(), OpenFailure> {
        match self.replay.update(counter) {
            Replay::Fresh => {
                self.received += 1;
                Ok(())
            }
            _ => Err(OpenFailure::Replay),
        }
    }

    /// Whether `counter` is newer than every packet accepted so far.
    pub fn is_newest(&self, counter: u64) -> bool {
        self.replay.is_newest(counter)
    }

    pub fn age(&self, now: Nanos) -> Nanos {
        now.saturating_sub(self.created)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (Session, Session) {
        let e1 = Established {
            send_key: [1; 32],
            recv_key: [2; 32],
            remote_index: 20,
            cipher: Cipher::ChaCha20Poly1305,
            peer: Default::default(),
        };
        let e2 = Established {
            send_key: [2; 32],
            recv_key: [1; 32],
            remote_index: 10,
            cipher: Cipher::ChaCha20Poly1305,
            peer: Default::default(),
        };
        (Session::new(&e1, 10, 0), Session::new(&e2, 20, 0))
    }

    #[test]
    fn seal_open_replay_and_forgery() {
        let (a, mut b) = pair();
        let mut a = a;
        let aad = [0u8; 36];
        let mut pkts = vec![];
        for _ in 0..3 {
            let c = a.next_counter().unwrap();
            let mut buf = vec![7u8; 10 + 16];
            a.seal(c, &aad, &mut buf, 10).unwrap();
            pkts.push((c, buf));
        }
        // Out of order is fine; a second copy is a replay.
        for i in [2, 0, 1] {
            let (c, buf) = &pkts[i];
            assert_eq!(b.open(*c, &aad, &mut buf.clone()), Ok(10));
        }
        assert_eq!(
            b.open(0, &aad, &mut pkts[0].1.clone()),
            Err(OpenFailure::Replay)
        );
        // A forged packet with a fresh counter fails and does not burn it.
        let mut forged = pkts[0].1.clone();
        forged[3] ^= 1;
        assert_eq!(b.open(3, &aad, &mut forged), Err(OpenFailure::BadTag));
        let c = a.next_counter().unwrap();
        assert_eq!(c, 3);
        let mut buf = vec![1u8; 26];
        a.seal(c, &aad, &mut buf, 10).unwrap();
        assert_eq!(b.open(3, &aad, &mut buf), Ok(10));
        assert_eq!(b.received, 4);
    }
}
