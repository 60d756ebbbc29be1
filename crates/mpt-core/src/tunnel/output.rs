//! The tunnel's output, in the order the wire needs it: one poll for every
//! datagram the core has to send (quinn-proto's `poll_transmit` is the
//! model).
//!
//! Three sources feed the wire besides the packet a caller has just
//! handed to [`Tunnel::send_unsealed`]:
//!
//! 1. the rest of a packet cut into pieces (`fragment.rs`): they leave
//!    right behind its first piece, before any later packet on its path;
//! 2. control packets (`control.rs`): handshake messages, recovery
//!    requests and resends, path validation, echoes, probes, reports;
//! 3. packets that waited for their path's pacing budget, or for the first
//!    session (`send.rs`, the QoS stage in `qos.rs`).
//!
//! [`Tunnel::poll_transmit`] yields them in that order. The caller's only
//! rule: after at most [`Tunnel::send_batch_max`] calls to
//! [`Tunnel::send_unsealed`], and whenever [`Tunnel::poll_timeout`] is
//! due, poll until `None`, sending each datagram in the order given
//! (sealing it first when its [`Transmit::seal`] is
//! [`Seal::Pending`]). The I/O layer knows nothing of pieces or queues.
//!
//! Invariants:
//! * a path carries tunnel sequence numbers in order: pieces come before
//!   control packets (whose frontier assumes them sent) and queued data;
//! * a datagram handed out has been counted as sent (path sequence, pacing
//!   budget, recovery ring); one that cannot be made is counted as a drop
//!   and skipped, never handed out half made;
//! * a datagram the I/O layer holds because its socket refused it for
//!   now is counted ([`Tunnel::on_send_held`]), never a drop;
//! * no allocation: each source reuses its buffers.

use std::net::SocketAddr;

use super::{SealTicket, Tunnel};
use crate::{Nanos, PathId};

/// A datagram to send: `buf[..len]` goes to `dst` over `path`'s socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    pub path: PathId,
    pub local_key: usize,
    pub dst: SocketAddr,
    pub len: usize,
    /// Whether the datagram is complete or still needs [`super::Sealer::seal`].
    pub seal: Seal,
    /// What it carries (a capture shows inner packets, not control).
    pub carries: Carries,
    /// The outer header's TOS / traffic-class byte (its class's
    /// [`crate::qos::OuterDscp`]; 0 for control packets).
    pub tos: u8,
}

/// Whether a [`Transmit`]'s datagram still needs its seal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seal {
    /// Complete as it is: a control packet (sealed when it was made), a
    /// handshake message, or any datagram of a plaintext tunnel.
    Done,
    /// A data packet or piece whose body [`super::Sealer::seal`] seals with this
    /// ticket before it leaves (a batch at a time, on the workers).
    Pending(SealTicket),
}

/// What a [`Transmit`] carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Carries {
    /// An inner packet whole, or the first piece of one cut in pieces.
    Packet,
    /// A later piece of a packet cut in pieces (`fragment.rs`).
    Piece,
    /// A control or handshake packet of the tunnel's own.
    Control,
}

impl Tunnel {
    /// The next datagram to send, written into `buf`: the pieces still
    /// waiting of a packet cut into fragments, then control packets, then
    /// packets whose path has budget again. `buf` needs room for the
    /// header, the largest inner packet and the tag (a transmit slot).
    /// Call until `None` at one `now`; see the module doc for when.
    pub fn poll_transmit(&mut self, now: Nanos, buf: &mut [u8]) -> Option<Transmit> {
        if let Some(t) = self.poll_fragment(now, buf) {
            return Some(t);
        }
        if let Some(t) = self.poll_control(now, buf) {
            return Some(t);
        }
        self.poll_queued(now, buf)
    }

    /// How many packets [`Tunnel::send_unsealed`] may take before the
    /// caller polls [`Tunnel::poll_transmit`] to the end: one when a packet
    /// may leave in several datagrams (they go before the next packet, so
    /// a caller that placed the next packet in its batch already would
    /// send it too early); unlimited otherwise.
    pub fn send_batch_max(&self) -> usize {
        if self.frag.body_max >= self.mtu {
            usize::MAX
        } else {
            1
        }
    }
}

/// What the I/O layer tells of its sockets, and asks to size them.
impl Tunnel {
    /// A datagram on `path` was refused for now by its local
    /// socket (its send buffer is full: the host's own interface is the
    /// bottleneck) and is held by the I/O layer, to leave when the socket
    /// takes it. Counted, not a drop, and not charged to the path's pacing
    /// budget again: the wait shows in the path's one-way delay (the
    /// datagram's timestamp was taken when it was made), which the rate
    /// control reads as a queue (charging it again held fifty
    /// concentrator clients' starts on two cores to half their rate).
    pub fn on_send_held(&mut self, path: PathId) {
        if self.paths.get(path as usize).is_some() {
            self.counters.send_held += 1;
        }
    }

    /// How long of its paths' rate a path socket may leave in the host's
    /// own queues (0: no local push-back; `[scheduler] local_queue_ms`).
    pub fn local_queue(&self) -> Nanos {
        self.local_queue
    }
    pub fn set_local_queue(&mut self, local_queue: Nanos) {
        self.local_queue = local_queue;
    }

    /// The highest rate the paths on local socket `socket` delivered
    /// lately ([`crate::pace::PathSender::delivered_peak_bps`]), summed (bits per
    /// second; `None`: none of them measured lately; a path's pacing rate
    /// before it was measured is a guess, and a path far slower than the
    /// guess overflowed its interface's queue at once); unbounded
    /// (`u64::MAX`) when the paths are not paced (static weights: the
    /// static-share tunnel's behaviour). The I/O layer sizes the socket's
    /// send buffer from it.
    pub fn socket_rate_bps(&self, socket: usize, now: Nanos) -> Option<u64> {
        if !self.paced {
            return Some(u64::MAX);
        }
        self.paths
            .iter()
            .filter(|p| p.state.cfg.local_key == socket && !p.removed)
            .filter_map(|p| p.sender.delivered_peak_bps(now))
            .reduce(|a, b| a.saturating_add(b))
    }
}

impl Seal {
    /// The ticket to seal with, if the datagram still needs it.
    pub fn ticket(self) -> Option<SealTicket> {
        match self {
            Seal::Done => None,
            Seal::Pending(t) => Some(t),
        }
    }
}

impl From<Option<SealTicket>> for Seal {
    fn from(t: Option<SealTicket>) -> Self {
        t.map_or(Seal::Done, Seal::Pending)
    }
}
