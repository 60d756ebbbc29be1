//! Reassembly of inner packets that travelled as fragments (wire type 11,
//! `wire/fragment.rs`).
//!
//! The pieces of one packet carry consecutive tunnel sequence numbers and
//! reach this stage in sequence order, as the reorder buffer releases
//! them; so one packet is reassembled at a time, as in multilink PPP
//! (RFC 1990 §4.1: a fragment that does not continue the packet under
//! way ends it). A piece continues the packet under way only if its
//! sequence number, index and count all say so.
//!
//! A packet whose gap the reorder buffer gave up is not lost yet: the
//! missing piece may still come, late (the reorder buffer then lets it
//! through out of order, as it does a whole late packet). So a packet
//! that a gap interrupts is parked, piece by piece, with the pieces that
//! arrive for it after the gap, and is handed out late once whole. Only a
//! packet pushed out of the bounded parking is counted as lost.
//!
//! Invariants:
//! * a packet is complete only with every piece `0..count`, each at
//!   sequence `base + index`; nothing else is ever handed out, so a lost
//!   piece never glues parts of two packets together;
//! * every packet given up is counted once in [`Reassembler::incomplete`]:
//!   when it leaves the parking unfinished, or when its pieces add up to
//!   more than an IP packet;
//! * the buffer under way holds at most one packet, of at most
//!   [`MAX_PACKET_BYTES`]; the parking holds at most [`PARKED_PACKETS`]
//!   packets of at most [`MAX_FRAGMENTS`] pieces each, and at most
//!   [`PARKED_BYTES_MAX`] bytes (the oldest parked packet goes first, as
//!   when the parking is full); a finished packet
//!   under way is handed out by swapping in a spare buffer from the caller
//!   ([`Reassembler::take_packet`]), so no byte is copied twice.

use std::collections::VecDeque;

use crate::wire::{Fragment, MAX_FRAGMENTS};

/// The longest packet reassembled: the IPv4 total length's limit (spec
/// constant, RFC 791; longer IPv6 jumbograms never cross a tunnel).
pub const MAX_PACKET_BYTES: usize = 65_535;

/// Packets interrupted by a gap kept for their late pieces (tuning knob:
/// a gap given up too early spans a few packets at most).
pub const PARKED_PACKETS: usize = 16;

/// Bytes of parked pieces at most: as many packets of the longest length
/// (derived bound; pieces of the tunnel MTU are far shorter).
pub const PARKED_BYTES_MAX: usize = PARKED_PACKETS * MAX_PACKET_BYTES;

/// What one piece did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Piece {
    /// Taken; the packet is not complete yet.
    Held,
    /// The packet under way is complete: [`Reassembler::packet`] holds it
    /// until the next piece comes.
    Complete,
    /// Its packet was interrupted by a gap: parked for late pieces
    /// (a packet this completes waits in [`Reassembler::take_late`]).
    Parked,
}

/// A packet a gap interrupted, its pieces by index.
#[derive(Debug)]
struct Parked {
    base: u64,
    count: u8,
    pieces: Vec<Option<Vec<u8>>>,
    have: u8,
}

impl Parked {
    fn bytes(&self) -> usize {
        self.pieces.iter().flatten().map(Vec::len).sum()
    }
}

/// One packet under reassembly in order, and a few parked ones.
#[derive(Debug, Default)]
pub struct Reassembler {
    /// Sequence number of piece 0 of the packet under way, its piece count
    /// and the next index it needs; `None`: no packet under way.
    under_way: Option<(u64, u8, u8)>,
    buf: Vec<u8>,
    parked: VecDeque<Parked>,
    parked_bytes: usize,
    /// Parked packets completed by a late piece, to hand out (late).
    late: VecDeque<Vec<u8>>,
    /// Packets given up: a piece never came.
    pub incomplete: u64,
    /// Packets reassembled whole, in order and late.
    pub reassembled: u64,
    pub reassembled_late: u64,
}

impl Reassembler {
    /// Take piece `f`, released in order with tunnel sequence `seq`.
    pub fn push(&mut self, seq: u64, f: &Fragment<'_>) -> Piece {
        let continues = self.under_way.is_some_and(|(base, count, next)| {
            f.index == next && f.count == count && seq == base + u64::from(next)
        });
        if !continues {
            self.interrupt();
            if f.index != 0 {
                // The packet's start was given up: it may still come late.
                self.park(seq, f);
                return Piece::Parked;
            }
            self.buf.clear();
            self.under_way = Some((seq, f.count, 0));
        }
        let Some((base, count, next)) = self.under_way else {
            return Piece::Parked;
        };
        if self.buf.len() + f.piece.len() > MAX_PACKET_BYTES {
            // No IP packet is this long: a peer's bug, never buffered.
            self.under_way = None;
            self.incomplete += 1;
            return Piece::Parked;
        }
        self.buf.extend_from_slice(f.piece);
        if next + 1 == count {
            self.under_way = None;
            self.reassembled += 1;
            return Piece::Complete;
        }
        self.under_way = Some((base, count, next + 1));
        Piece::Held
    }

    /// A piece that arrived after its gap was given up (delivered late by
    /// the reorder buffer): parked with its packet, which
    /// [`Reassembler::take_late`] hands out once whole.
    pub fn push_late(&mut self, seq: u64, f: &Fragment<'_>) {
        self.park(seq, f);
    }

    /// A whole packet, or a gap, ends the packet under way (if any): it is
    /// parked for its late pieces.
    pub fn interrupt(&mut self) {
        let Some((base, count, next)) = self.under_way.take() else {
            return;
        };
        // Pieces 0..next are in `buf`; none is the last, so all are full
        // and of one size.
        let per = self.buf.len() / usize::from(next.max(1));
        let buf = std::mem::take(&mut self.buf);
        for (i, piece) in buf.chunks(per.max(1)).take(usize::from(next)).enumerate() {
            self.park_piece(base, count, i as u8, piece);
        }
        self.buf = buf;
    }

    fn park(&mut self, seq: u64, f: &Fragment<'_>) {
        match seq.checked_sub(u64::from(f.index)) {
            Some(base) => self.park_piece(base, f.count, f.index, f.piece),
            None => self.incomplete += 1,
        }
    }

    /// Give up parked packet `i`.
    fn unpark(&mut self, i: usize) {
        if let Some(p) = self.parked.remove(i) {
            self.parked_bytes -= p.bytes();
            self.incomplete += 1;
        }
    }

    fn park_piece(&mut self, base: u64, count: u8, index: u8, piece: &[u8]) {
        while self.parked_bytes + piece.len() > PARKED_BYTES_MAX && !self.parked.is_empty() {
            self.unpark(0);
        }
        let at = match self.parked.iter().position(|p| p.base == base) {
            Some(i) if self.parked[i].count == count => i,
            Some(i) => {
                // The same first piece with another count: not one packet.
                self.unpark(i);
                return;
            }
            None => {
                if self.parked.len() >= PARKED_PACKETS {
                    self.unpark(0);
                }
                self.parked.push_back(Parked {
                    base,
                    count,
                    pieces: vec![None; usize::from(count)],
                    have: 0,
                });
                self.parked.len() - 1
            }
        };
        let p = &mut self.parked[at];
        let slot = &mut p.pieces[usize::from(index)];
        if slot.is_some() {
            return; // a duplicate
        }
        *slot = Some(piece.to_vec());
        p.have += 1;
        self.parked_bytes += piece.len();
        if p.have < p.count {
            return;
        }
        let Some(done) = self.parked.remove(at) else {
            return;
        };
        self.parked_bytes -= done.bytes();
        let pkt: Vec<u8> = done.pieces.into_iter().flatten().flatten().collect();
        if pkt.len() > MAX_PACKET_BYTES {
            self.incomplete += 1;
            return;
        }
        self.reassembled_late += 1;
        self.late.push_back(pkt);
    }

    /// A parked packet a late piece completed, to hand out now.
    pub fn take_late(&mut self) -> Option<Vec<u8>> {
        self.late.pop_front()
    }

    /// Whether a packet is under way.
    pub fn is_under_way(&self) -> bool {
        self.under_way.is_some()
    }

    /// Packets parked for late pieces.
    pub fn parked(&self) -> usize {
        self.parked.len()
    }

    /// Bytes held: the packet under way and the parked pieces.
    pub fn held_bytes(&self) -> usize {
        let under_way = if self.under_way.is_some() {
            self.buf.len()
        } else {
            0
        };
        under_way + self.parked_bytes
    }

    /// The packet the last [`Piece::Complete`] finished.
    pub fn packet(&self) -> &[u8] {
        &self.buf
    }

    /// A piece of the packet under way (or just completed) arrived with an
    /// outer CE: carry it into the packet, whose IP header piece 0 holds
    /// (RFC 6040; `ecn_tunnel`).
    pub fn mark_ce(&mut self) -> crate::ecn_tunnel::Egress {
        crate::ecn_tunnel::decapsulate(&mut self.buf, crate::qos::ecn::CE)
    }

    /// Take the packet the last [`Piece::Complete`] finished, leaving
    /// `spare` (a buffer to reuse) in its place: no copy.
    pub fn take_packet(&mut self, spare: Vec<u8>) -> Vec<u8> {
        std::mem::replace(&mut self.buf, spare)
    }
}

const _: () = assert!(MAX_FRAGMENTS <= u8::MAX as usize);

#[cfg(test)]
mod tests {
    use super::*;

    fn frag(index: u8, count: u8, piece: &[u8]) -> Fragment<'_> {
        Fragment {
            index,
            count,
            piece,
        }
    }

    #[test]
    fn pieces_in_order_make_the_packet() {
        let mut r = Reassembler::default();
        assert_eq!(r.push(10, &frag(0, 3, b"ab")), Piece::Held);
        assert_eq!(r.push(11, &frag(1, 3, b"cd")), Piece::Held);
        assert_eq!(r.push(12, &frag(2, 3, b"e")), Piece::Complete);
        assert_eq!(r.packet(), b"abcde");
        assert_eq!(r.take_packet(Vec::new()), b"abcde");
        assert_eq!((r.reassembled, r.incomplete), (1, 0));
        // The next packet starts fresh.
        assert_eq!(r.push(13, &frag(0, 2, b"x")), Piece::Held);
        assert_eq!(r.push(14, &frag(1, 2, b"y")), Piece::Complete);
        assert_eq!(r.packet(), b"xy");
    }

    #[test]
    fn a_lost_piece_never_glues_two_packets() {
        let mut r = Reassembler::default();
        // Packet A at 20..24 loses pieces 1..3; packet B at 24..28 loses
        // its piece 0. A's piece 0 and B's pieces 1..3 have the same
        // indexes and count, but not the sequence numbers.
        assert_eq!(r.push(20, &frag(0, 4, b"A0")), Piece::Held);
        for (seq, i) in [(25, 1), (26, 2), (27, 3)] {
            assert_eq!(r.push(seq, &frag(i, 4, b"B.")), Piece::Parked);
        }
        assert!(!r.is_under_way());
        assert_eq!((r.reassembled, r.parked()), (0, 2), "A and B parked apart");
        assert!(r.take_late().is_none());
        // A's missing pieces come late: A is whole, B still waits.
        for (seq, i) in [(22, 2), (21, 1), (23, 3)] {
            r.push_late(seq, &frag(i, 4, b"A."));
        }
        assert_eq!(r.take_late().as_deref(), Some(&b"A0A.A.A."[..]));
        assert_eq!((r.reassembled_late, r.parked(), r.incomplete), (1, 1, 0));
    }

    #[test]
    fn a_gap_parks_the_packet_under_way_and_its_late_piece_completes_it() {
        let mut r = Reassembler::default();
        r.push(1, &frag(0, 4, b"aa"));
        r.push(2, &frag(1, 4, b"bb"));
        // Piece 2 was given up; piece 3 comes in order after the gap.
        assert_eq!(r.push(4, &frag(3, 4, b"d")), Piece::Parked);
        r.push_late(3, &frag(2, 4, b"cc"));
        assert_eq!(r.take_late().as_deref(), Some(&b"aabbccd"[..]));
        // A duplicate late piece of a finished packet starts nothing whole.
        r.push_late(3, &frag(2, 4, b"cc"));
        assert!(r.take_late().is_none());
    }

    #[test]
    fn the_parking_is_bounded_and_what_leaves_it_is_counted() {
        let mut r = Reassembler::default();
        for k in 0..(PARKED_PACKETS as u64 + 3) {
            r.push_late(100 * k + 1, &frag(1, 2, b"x"));
        }
        assert_eq!(r.parked(), PARKED_PACKETS);
        assert_eq!(r.incomplete, 3);
        // Another count for the same first piece: not one packet.
        r.push_late(1802, &frag(2, 3, b"y"));
        assert_eq!(r.incomplete, 4);
        // Pieces adding up to more than any IP packet are never buffered.
        let big = vec![0u8; 40_000];
        assert_eq!(r.push(5000, &frag(0, 2, &big)), Piece::Held);
        assert_eq!(r.push(5001, &frag(1, 2, &big)), Piece::Parked);
        assert!(!r.is_under_way());
        assert_eq!(r.incomplete, 5);
    }

    #[test]
    fn the_parking_is_bounded_in_bytes() {
        let mut r = Reassembler::default();
        let piece = vec![0u8; 65_000];
        for k in 0..(PARKED_PACKETS as u64 + 1) {
            r.push_late(100 * k + 1, &frag(1, 2, &piece));
            assert!(r.held_bytes() <= PARKED_BYTES_MAX, "{}", r.held_bytes());
        }
        // The 17th made room by bytes before the count bound acted.
        assert_eq!((r.parked(), r.incomplete), (PARKED_PACKETS, 1));
        assert_eq!(r.held_bytes(), PARKED_PACKETS * 65_000);
        // A late piece completes a parked packet: its bytes leave.
        r.push_late(1600, &frag(0, 2, b"z"));
        assert_eq!(r.take_late().map(|p| p.len()), Some(65_001));
        assert_eq!(r.held_bytes(), (PARKED_PACKETS - 1) * 65_000);
    }
}
