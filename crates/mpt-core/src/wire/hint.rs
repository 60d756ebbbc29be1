//! The session-unknown hint (type 14): a responder's answer, in the clear,
//! to a sealed datagram that names a session it does not hold (it
//! restarted and lost its sessions, or the session expired). The header's
//! session field carries the index that datagram named, its counter field
//! is 0; the body is that datagram's counter:
//!
//! ```text
//!  0  counter   u64   the counter (nonce) of the datagram that named the
//!                     session, below 2^48
//! ```
//!
//! The hint proves nothing (anyone may send it); an initiator takes it only
//! when it names the session the initiator seals with and a counter that
//! session recently sent, and it then only starts a handshake beside the
//! session it has (see `crypto::exchange`). It is smaller than any sealed
//! datagram that can call it out, so it amplifies nothing.
//!
//! Invariants: [`SessionUnknownBody::parse`] checks the length once and
//! never panics; every parsed body re-encodes to the bytes it came from.

use super::{be_u64, WireError, COUNTER_LIMIT};

/// Length of the body of a session-unknown hint (spec constant).
pub const SESSION_UNKNOWN_BODY_LEN: usize = 8;

/// The body of a [`super::PacketType::SessionUnknown`] datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionUnknownBody {
    /// The counter of the datagram that named the unknown session.
    pub counter: u64,
}

impl SessionUnknownBody {
    /// Parse the first [`SESSION_UNKNOWN_BODY_LEN`] bytes of `body`; a
    /// counter of 2^48 or more is no counter any sender used.
    pub fn parse(body: &[u8]) -> Result<Self, WireError> {
        if body.len() < SESSION_UNKNOWN_BODY_LEN {
            return Err(WireError::Truncated);
        }
        let counter = be_u64(body, 0);
        if counter >= COUNTER_LIMIT {
            return Err(WireError::BadType);
        }
        Ok(Self { counter })
    }

    /// Write the body into `out[..SESSION_UNKNOWN_BODY_LEN]`.
    pub fn write(&self, out: &mut [u8]) {
        out[..SESSION_UNKNOWN_BODY_LEN].copy_from_slice(&self.counter.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Test vector: counter 0x0000_0102_0304_0506.
    #[test]
    fn body_vector() {
        let bytes = [0, 0, 1, 2, 3, 4, 5, 6];
        let b = SessionUnknownBody::parse(&bytes).unwrap();
        assert_eq!(b.counter, 0x0102_0304_0506);
        let mut out = [0u8; SESSION_UNKNOWN_BODY_LEN];
        b.write(&mut out);
        assert_eq!(out, bytes);
    }

    #[test]
    fn short_or_impossible_bodies_are_refused() {
        assert_eq!(
            SessionUnknownBody::parse(&[0; 7]),
            Err(WireError::Truncated)
        );
        assert_eq!(
            SessionUnknownBody::parse(&[0, 1, 0, 0, 0, 0, 0, 0]),
            Err(WireError::BadType)
        );
    }
}
