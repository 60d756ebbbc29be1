//! Inner packets larger than one datagram: cut into fragments on the way
//! out, reassembled on the way in (wire type 11, `wire/fragment.rs`).
//!
//! Why: each datagram costs the same outer headers, so a tunnel MTU of
//! several datagrams spreads the inner packet's own headers (52 bytes of
//! TCP/IP) over more payload, and lets the inner TCP's window grow in
//! larger segments. The pieces of a packet leave back to back on the path
//! the packet was given (so a packet waits for one path, never for two),
//! each a datagram of its own with its own nonce, path sequence and
//! tunnel sequence.
//!
//! Send side: a packet of `len` bytes takes [`Tunnel::seq_span`]
//! consecutive tunnel sequence numbers when it enters (the queue, the
//! staging area or the wire); `emit_data` sends its piece 0 in the
//! caller's buffer and keeps the rest in `FragOut`; [`Tunnel::poll_transmit`]
//! hands out the rest before anything else (`output.rs`).
//! Loss recovery keeps the whole packet under its first sequence number
//! and resends single pieces; while it holds that copy, `FragOut` keeps
//! no bytes of its own and the later pieces are cut from the copy (one
//! copy of the packet per send instead of two: 3.7 % of the sender's
//! cycles on one unshaped path), unless the path holds its pieces (for a
//! real-time packet). Should the ring still let the copy go before the
//! last piece left, the rest of the packet is dropped and counted
//! (`fragment_incomplete`), as the receiver would count it.
//!
//! Receive side: pieces go through the reorder buffer like any data and
//! are reassembled as it releases them, in order
//! ([`crate::reassembly::Reassembler`]); a packet a given-up gap
//! interrupted waits, parked, for its late pieces and is delivered late
//! once whole, as the reorder buffer delivers a whole late packet.
//!
//! Invariants:
//! * a packet that fits one datagram (`len <= body_max`) is sent exactly
//!   as before: one data packet, one sequence number;
//! * pieces waiting in `FragOut` are bounded by the caller draining them:
//!   callers drain [`Tunnel::poll_transmit`] after every send (at most
//!   [`Tunnel::send_batch_max`] sends, one when packets may be cut),
//!   which hands them out before anything else; their
//!   buffers are reused;
//! * a reassembled packet is delivered before anything released after
//!   its last piece (order is kept).

use std::collections::VecDeque;

use super::{Received, Transmit, Tunnel};
use crate::reassembly::{Piece, Reassembler};
use crate::stats::DropReason;
use crate::wire::{self, Fragment, PacketType, FRAGMENT_HEADER_LEN, HEADER_LEN};
use crate::{Nanos, PathId};

/// The rest of one packet whose piece 0 has left.
struct FragOut {
    path: PathId,
    /// Sequence number of piece 0.
    seq: u64,
    class: u8,
    tos: u8,
    count: usize,
    /// Next piece to send.
    next: usize,
    /// The inner packet's bytes after piece 0, or empty when the pieces
    /// are read from the recovery ring's copy of the packet (`in_ring`),
    /// which saves copying it twice.
    bytes: Vec<u8>,
    /// The whole inner packet's length.
    len: usize,
    in_ring: bool,
}

/// Fragmentation state of one tunnel.
#[derive(Default)]
pub(super) struct FragState {
    /// Most body bytes one datagram carries; larger inner packets are cut.
    pub body_max: usize,
    out: VecDeque<FragOut>,
    /// Buffers of finished [`FragOut`]s, for reuse.
    pool: Vec<Vec<u8>>,
    pub reasm: Reassembler,
    /// Reassembled packets (and whole ones behind them) not yet handed to
    /// the TUN by [`Tunnel::deliver_ready`].
    pub ready: VecDeque<Vec<u8>>,
    pub tx_fragments: u64,
    pub rx_fragments: u64,
    /// Routed TCP is told to send segments that fit one datagram
    /// (`mss.rs`), and how many SYNs were so clamped.
    pub mss_clamp: Option<crate::mss::MssClamp>,
    pub mss_clamped: u64,
}

impl FragState {
    pub fn new(body_max: usize, mss_clamp: Option<crate::mss::MssClamp>) -> Self {
        Self {
            body_max,
            mss_clamp,
            ..Self::default()
        }
    }

    /// Pieces cut but not handed out yet.
    pub fn pieces_waiting(&self) -> usize {
        self.out.iter().map(|f| f.count - f.next).sum()
    }
}

impl Tunnel {
    /// How many tunnel sequence numbers an inner packet of `len` bytes
    /// takes: one per datagram it travels in.
    pub(super) fn seq_span(&self, len: usize) -> u64 {
        wire::pieces(len, self.frag.body_max).unwrap_or(1) as u64
    }

    /// Most inner bytes one datagram carries; larger packets are sent as
    /// fragments.
    pub fn datagram_body_max(&self) -> usize {
        self.frag.body_max
    }

    /// Fragments sent and received so far, for `mpt status`.
    pub(super) fn fragment_status(&self) -> super::status::FragmentStatus {
        super::status::FragmentStatus {
            datagram_body: self.frag.body_max,
            tx_pieces: self.frag.tx_fragments,
            rx_pieces: self.frag.rx_fragments,
            reassembled: self.frag.reasm.reassembled,
            reassembled_late: self.frag.reasm.reassembled_late,
            parked_now: self.frag.reasm.parked(),
            held_bytes: self.frag.reasm.held_bytes(),
            held_bytes_max: crate::reassembly::MAX_PACKET_BYTES
                + crate::reassembly::PARKED_BYTES_MAX,
            mss_clamp: self
                .frag
                .mss_clamp
                .as_ref()
                .map(crate::mss::MssClamp::bounds),
            mss_clamped: self.frag.mss_clamped,
        }
    }

    /// Cut the inner packet at `buf[HEADER_LEN..HEADER_LEN + len]` (longer
    /// than one datagram carries): piece 0 is encapsulated in `buf`, the
    /// rest waits for [`Tunnel::poll_transmit`]. Accounting as for a data
    /// packet is the caller's (`emit_data`).
    #[allow(clippy::too_many_arguments)] // emit_data's, as they are
    pub(super) fn emit_first_fragment(
        &mut self,
        now: Nanos,
        path: PathId,
        seq: u64,
        class: u8,
        tos: u8,
        buf: &mut [u8],
        len: usize,
    ) -> Option<(usize, Option<super::SealTicket>)> {
        let body_max = self.frag.body_max;
        let count = wire::pieces(len, body_max)?;
        let r = wire::piece_range(len, body_max, 0);
        // Keep what follows piece 0 (the shift below and the tag overwrite
        // its start in `buf`), unless the recovery ring holds the packet
        // and its pieces leave at the caller's next drain (a path that
        // holds them, for a real-time packet, keeps its own copy: the
        // ring may let its copy go meanwhile).
        let in_ring = self.pieces_release_at(now, path) <= now
            && self
                .recovery
                .as_ref()
                .and_then(|rc| rc.stored(seq))
                .is_some_and(|b| b.len() == len);
        let mut bytes = self.frag.pool.pop().unwrap_or_default();
        bytes.clear();
        if !in_ring {
            bytes.extend_from_slice(&buf[HEADER_LEN + r.end..HEADER_LEN + len]);
        }
        buf.copy_within(
            HEADER_LEN..HEADER_LEN + r.len(),
            HEADER_LEN + FRAGMENT_HEADER_LEN,
        );
        wire::write_fragment_header(&mut buf[HEADER_LEN..], 0, count);
        let body = FRAGMENT_HEADER_LEN + r.len();
        let Some(sent) = self.emit(now, path, PacketType::Fragment, class, seq, buf, body) else {
            // Not sent (counted by `emit`): nor are the other pieces.
            self.frag.pool.push(bytes);
            return None;
        };
        self.frag.out.push_back(FragOut {
            path,
            seq,
            class,
            tos,
            count,
            next: 1,
            bytes,
            len,
            in_ring,
        });
        self.frag.tx_fragments += 1;
        Some(sent)
    }

    /// The lowest tunnel sequence number of a piece still to leave on
    /// `path`, if any.
    pub(super) fn fragment_frontier(&self, path: PathId) -> Option<u64> {
        self.frag
            .out
            .iter()
            .filter(|f| f.path == path)
            .map(|f| f.seq + f.next as u64)
            .min()
    }

    /// When the pieces waiting for `path` may leave: `now`, except on a
    /// paced path that carries real-time packets, whose bottleneck would
    /// otherwise hold a whole packet's train (eight datagrams, 3 ms at 30
    /// Mbit/s) in front of the next real-time packet: there, once the path
    /// has budget, and never while a real-time packet waits for it (that
    /// one leaves first; its own deadline wakes the loop).
    pub(super) fn pieces_release_at(&self, now: Nanos, path: PathId) -> Nanos {
        let s = &self.paths[path as usize].sender;
        if !self.paced || !s.carries_realtime(now) {
            now
        } else if self.queue.rt_len(path) > 0 {
            Nanos::MAX
        } else {
            s.budget_at(now)
        }
    }

    /// Whether the pieces waiting for `path` are held now
    /// ([`Self::pieces_release_at`], with its budget brought to `now`).
    fn pieces_held(&mut self, now: Nanos, path: PathId) -> bool {
        if self.paced {
            self.paths[path as usize].sender.refill(now);
        }
        let at = self.pieces_release_at(now, path);
        if at > now && at != Nanos::MAX {
            // Held for budget: the pacer limits the path.
            self.paths[path as usize].sender.on_held();
        }
        at > now
    }

    /// The index in `frag.out` of the packet whose next piece may leave
    /// now: the oldest one on a path whose pieces are not held (a path's
    /// packets stay in order, as all of them are skipped while it holds).
    fn next_piece_index(&mut self, now: Nanos) -> Option<usize> {
        const _: () = assert!(crate::MAX_PATHS <= 64);
        let mut held: u64 = 0;
        for at in 0..self.frag.out.len() {
            let path = self.frag.out[at].path;
            let bit = 1u64 << (path % 64);
            if held & bit != 0 {
                continue;
            }
            if !self.pieces_held(now, path) {
                return Some(at);
            }
            held |= bit;
        }
        None
    }

    /// When the first held piece may leave (`now` if one may already).
    pub(super) fn pieces_deadline(&self, now: Nanos) -> Option<Nanos> {
        self.frag
            .out
            .iter()
            .map(|f| self.pieces_release_at(now, f.path))
            .min()
    }

    /// The next piece of a packet whose first piece has left, in `buf`
    /// (room for the header, one datagram's body and the tag), to seal like
    /// [`Tunnel::send_unsealed`]'s (the first source of
    /// [`Tunnel::poll_transmit`]).
    pub(super) fn poll_fragment(&mut self, now: Nanos, buf: &mut [u8]) -> Option<Transmit> {
        loop {
            let at = self.next_piece_index(now)?;
            let f = &mut self.frag.out[at];
            let (path, seq, class, tos, i, count) = (
                f.path,
                f.seq + f.next as u64,
                f.class,
                f.tos,
                f.next,
                f.count,
            );
            let r = wire::piece_range(f.len, self.frag.body_max, i);
            let body = FRAGMENT_HEADER_LEN + r.len();
            let src = if f.in_ring {
                // `seq` of piece 0: the ring keeps the packet under it.
                let first = f.seq;
                let held = self.recovery.as_ref().and_then(|rc| rc.stored(first));
                held.filter(|b| b.len() == f.len).map(|b| &b[r])
            } else {
                // `bytes` starts where piece 0 ends.
                let skip = wire::piece_range(f.len, self.frag.body_max, 0).end;
                f.bytes.get(r.start - skip..r.end - skip)
            };
            let room = buf.get_mut(HEADER_LEN..HEADER_LEN + body);
            let sent = match (room, src, self.paths[path as usize].remote) {
                (Some(room), Some(src), Some(dst)) => {
                    wire::write_fragment_header(room, i, count);
                    room[FRAGMENT_HEADER_LEN..].copy_from_slice(src);
                    Ok(dst)
                }
                (_, None, _) => Err(DropReason::FragmentIncomplete),
                _ => Err(DropReason::NoPath),
            };
            // The ring let the packet's copy go before its last pieces
            // left (a path that held them that long): the rest is
            // dropped, counted once for the packet.
            let gone = sent == Err(DropReason::FragmentIncomplete);
            f.next = if gone { f.count } else { f.next + 1 };
            if f.next == f.count {
                if let Some(done) = self.frag.out.remove(at) {
                    if self.frag.pool.len() < FRAG_POOL_BUFFERS {
                        self.frag.pool.push(done.bytes);
                    }
                }
            }
            let dst = match sent {
                Ok(dst) => dst,
                Err(reason) => {
                    // The path lost its peer's address meanwhile, or the
                    // ring its copy: the packet cannot complete (the
                    // receiver counts it incomplete too).
                    self.drops.add(reason);
                    continue;
                }
            };
            let Some((total, seal)) =
                self.emit(now, path, PacketType::Fragment, class, seq, buf, body)
            else {
                continue;
            };
            if self.paced {
                self.paths[path as usize].sender.on_send(total);
            }
            self.frag.tx_fragments += 1;
            let carries = super::Carries::Piece;
            return Some(self.data_transmit(path, dst, total, seal, tos, carries));
        }
    }

    /// Run `f` on the reassembler and count every packet it gave up.
    fn reassembly<T>(&mut self, f: impl FnOnce(&mut Reassembler) -> T) -> T {
        let before = self.frag.reasm.incomplete;
        let t = f(&mut self.frag.reasm);
        for _ in before..self.frag.reasm.incomplete {
            self.drops.add(DropReason::FragmentIncomplete);
        }
        t
    }

    /// A buffer for a packet that waits in `frag.ready`.
    pub(super) fn ready_buffer(&mut self, bytes: &[u8]) -> Vec<u8> {
        let mut b = self.frag.pool.pop().unwrap_or_default();
        b.clear();
        b.extend_from_slice(bytes);
        b
    }

    /// A data or fragment body released in order (`seq`): a whole packet
    /// ends any reassembly under way and passes (`Ok(false)`); a piece is
    /// taken (`Ok(true)`), and a packet it completes waits in `frag.ready`.
    fn on_released(&mut self, seq: u64, body: &[u8]) -> Result<bool, DropReason> {
        if !Fragment::is_fragment(body) {
            self.reassembly(Reassembler::interrupt);
            return Ok(false);
        }
        self.frag.rx_fragments += 1;
        let Ok(f) = Fragment::parse(body) else {
            self.reassembly(Reassembler::interrupt);
            return Err(DropReason::BadFragment);
        };
        let piece = self.reassembly(|r| r.push(seq, &f));
        self.ecn_on_piece_released(seq, piece != Piece::Parked);
        let complete = piece == Piece::Complete;
        let mut bad = false;
        if complete {
            if wire::inner_ip_version(self.frag.reasm.packet()).is_some() {
                let spare = self.frag.pool.pop().unwrap_or_default();
                let pkt = self.frag.reasm.take_packet(spare);
                self.frag.ready.push_back(pkt);
            } else {
                bad = true;
            }
        }
        self.take_late_packets();
        if bad {
            return Err(DropReason::BadInner);
        }
        Ok(true)
    }

    /// Packets that late pieces completed: handed out next (late, out of
    /// order, as the reorder buffer delivers a whole late packet).
    fn take_late_packets(&mut self) {
        while let Some(pkt) = self.frag.reasm.take_late() {
            if wire::inner_ip_version(&pkt).is_some() {
                self.frag.ready.push_back(pkt);
            } else {
                self.drops.add(DropReason::BadInner);
            }
        }
    }

    /// A data body the reorder buffer lets through at once (in order, or
    /// late after its gap was given up): a whole packet goes straight to
    /// the TUN unless a reassembled one waits before it; a piece is
    /// reassembled (a late piece joins its parked packet).
    pub(super) fn deliver_now(&mut self, seq: u64, body: &[u8], late: bool) -> Received {
        if late && Fragment::is_fragment(body) {
            self.frag.rx_fragments += 1;
            let Ok(f) = Fragment::parse(body) else {
                return self.drop_counted(DropReason::BadFragment);
            };
            self.reassembly(|r| r.push_late(seq, &f));
            self.ecn_on_piece_released(seq, false);
            self.take_late_packets();
            return Received::Consumed;
        }
        if !late {
            match self.on_released(seq, body) {
                Ok(true) => return Received::Consumed,
                Ok(false) => {}
                Err(r) => return self.drop_counted(r),
            }
        }
        if !self.frag.ready.is_empty() {
            // Keep the order: behind the reassembled packet still waiting.
            let b = self.ready_buffer(body);
            self.frag.ready.push_back(b);
            return Received::Consumed;
        }
        self.counters.rx_packets += 1;
        self.counters.rx_bytes += body.len() as u64;
        Received::Deliver {
            offset: HEADER_LEN,
            len: body.len(),
        }
    }

    /// Hand every packet that is ready, in order, to `write`: reassembled
    /// ones first, then what the reorder buffer releases (pieces among it
    /// are reassembled on the way). Returns how many were handed over.
    pub(super) fn deliver_released(
        &mut self,
        write: &mut impl FnMut(&[u8]) -> Result<(), DropReason>,
    ) -> usize {
        let mut n = 0;
        loop {
            if let Some(b) = self.frag.ready.pop_front() {
                n += 1;
                self.hand_over(write, &b);
                if self.frag.pool.len() < FRAG_POOL_BUFFERS {
                    self.frag.pool.push(b);
                }
                continue;
            }
            let Some((seq, b)) = self.reorder.pop_seq() else {
                return n;
            };
            match self.on_released(seq, &b) {
                Ok(true) => {}
                Ok(false) => {
                    n += 1;
                    self.hand_over(write, &b);
                }
                Err(r) => self.drops.add(r),
            }
            self.reorder.recycle(b);
        }
    }

    fn hand_over(&mut self, write: &mut impl FnMut(&[u8]) -> Result<(), DropReason>, b: &[u8]) {
        self.counters.rx_packets += 1;
        self.counters.rx_bytes += b.len() as u64;
        if let Err(r) = write(b) {
            self.drops.add(r);
        }
    }
}

/// Piece `index` of the inner packet `stored` (kept for loss recovery),
/// written as a fragment body into `buf` after the header; its body
/// length. `None` if the packet is not cut that far.
pub(super) fn write_piece(
    body_max: usize,
    stored: &[u8],
    index: usize,
    buf: &mut [u8],
) -> Option<usize> {
    let count = wire::pieces(stored.len(), body_max)?;
    if index >= count || count < 2 {
        return None;
    }
    let r = wire::piece_range(stored.len(), body_max, index);
    let body = FRAGMENT_HEADER_LEN + r.len();
    let room = buf.get_mut(HEADER_LEN..HEADER_LEN + body)?;
    wire::write_fragment_header(room, index, count);
    room[FRAGMENT_HEADER_LEN..].copy_from_slice(&stored[r]);
    Some(body)
}

/// Buffers kept for reuse by the fragment state (tuning knob).
const FRAG_POOL_BUFFERS: usize = 64;
