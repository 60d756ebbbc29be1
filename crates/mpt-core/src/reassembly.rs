//! Reassembly of inner packets that travelled as fragments (wire type 11,
//! `wire/fragment.rs`).
//!
//! The pieces of one packet carry consecutive tunnel sequence numbers and
//! reach this stage in sequence order, as the reorder buffer releases
//! them; so one packet is reassembled at a time, as in multilink PPP
//! (RFC 1990 §4.1: a fragment that does not continue the packet under
//! way ends it). A piece continues the packet under way only if its
//! sequence number, index and count all say so; anything else ends the
//! packet under way as incomplete.
//!
//! Invariants:
//! * a packet is complete only with every piece `0..count`, each at
//!   sequence `base + index`, in order; nothing else is ever handed out,
//!   so a lost piece never glues parts of two packets together;
//! * every incomplete packet is counted once in [`Reassembler::incomplete`],
//!   and so is every stray piece (one that starts no packet and continues
//!   none);
//! * the buffer holds at most one packet, of at most
//!   [`MAX_PACKET_BYTES`]; a finished packet is handed out by swapping
//!   in a spare buffer from the caller ([`Reassembler::take_packet`]), so
//!   no byte is copied twice.

use crate::wire::{Fragment, MAX_FRAGMENTS};

/// The longest packet reassembled: the IPv4 total length's limit (spec
/// constant, RFC 791; longer IPv6 jumbograms never cross a tunnel).
pub const MAX_PACKET_BYTES: usize = 65_535;

/// What one piece did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Piece {
    /// Taken; the packet is not complete yet.
    Held,
    /// The packet is complete: [`Reassembler::packet`] holds it until the
    /// next piece comes.
    Complete,
    /// Not part of any packet that can complete (counted).
    Stray,
}

/// One packet under reassembly at a time.
#[derive(Debug, Default)]
pub struct Reassembler {
    /// Sequence number of piece 0 of the packet under way, its piece count
    /// and the next index it needs; `None`: no packet under way.
    under_way: Option<(u64, u8, u8)>,
    buf: Vec<u8>,
    /// Packets that lost a piece, and stray pieces.
    pub incomplete: u64,
    /// Packets reassembled whole.
    pub reassembled: u64,
}

impl Reassembler {
    /// Take piece `f`, which arrived with tunnel sequence `seq`.
    pub fn push(&mut self, seq: u64, f: &Fragment<'_>) -> Piece {
        let continues = self.under_way.is_some_and(|(base, count, next)| {
            f.index == next && f.count == count && seq == base + u64::from(next)
        });
        if !continues {
            self.abandon();
            if f.index != 0 {
                self.incomplete += 1;
                return Piece::Stray;
            }
            self.buf.clear();
            self.under_way = Some((seq, f.count, 0));
        }
        if self.buf.len() + f.piece.len() > MAX_PACKET_BYTES {
            // No IP packet is this long: a peer's bug, never buffered.
            self.abandon();
            return Piece::Stray;
        }
        self.buf.extend_from_slice(f.piece);
        let Some((base, count, next)) = self.under_way else {
            return Piece::Stray;
        };
        if next + 1 == count {
            self.under_way = None;
            self.reassembled += 1;
            return Piece::Complete;
        }
        self.under_way = Some((base, count, next + 1));
        Piece::Held
    }

    /// A whole packet, or a gap, ends the packet under way (if any) as
    /// incomplete.
    pub fn abandon(&mut self) {
        if self.under_way.take().is_some() {
            self.incomplete += 1;
        }
    }

    /// Whether a packet is under way.
    pub fn is_under_way(&self) -> bool {
        self.under_way.is_some()
    }

    /// The packet the last [`Piece::Complete`] finished.
    pub fn packet(&self) -> &[u8] {
        &self.buf
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
            assert_eq!(r.push(seq, &frag(i, 4, b"B")), Piece::Stray);
        }
        assert!(!r.is_under_way());
        assert_eq!(
            (r.reassembled, r.incomplete),
            (0, 4),
            "A once, three strays"
        );
    }

    #[test]
    fn a_new_first_piece_or_a_whole_packet_ends_the_one_under_way() {
        let mut r = Reassembler::default();
        r.push(1, &frag(0, 2, b"a"));
        assert_eq!(r.push(2, &frag(0, 2, b"b")), Piece::Held, "starts anew");
        assert_eq!(r.incomplete, 1);
        r.abandon();
        assert_eq!(r.incomplete, 2);
        r.abandon();
        assert_eq!(r.incomplete, 2, "nothing under way: nothing counted");
        // A piece whose count disagrees does not continue the packet.
        r.push(5, &frag(0, 3, b"a"));
        assert_eq!(r.push(6, &frag(1, 2, b"b")), Piece::Stray);
        assert_eq!(r.incomplete, 4);
        // Pieces adding up to more than any IP packet are never buffered.
        let big = vec![0u8; 40_000];
        assert_eq!(r.push(10, &frag(0, 2, &big)), Piece::Held);
        assert_eq!(r.push(11, &frag(1, 2, &big)), Piece::Stray);
        assert!(!r.is_under_way());
    }
}
