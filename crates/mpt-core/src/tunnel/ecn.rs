//! ECN across the tunnel, the tunnel's side (RFC 6040 normal mode; the
//! rules are in [`crate::ecn_tunnel`]).
//!
//! * Sending: a data datagram's outer ECN bits are its inner packet's
//!   (every piece of a fragmented packet carries its packet's). Plaintext
//!   tunnels (lab only) use RFC 6040's compatibility mode: outer Not-ECT,
//!   since they do not read the outer field back.
//! * Receiving: the I/O layer hands each datagram's outer ECN bits to
//!   [`super::Tunnel::recv_start`]; once the datagram is authentic
//!   ([`super::Tunnel::recv_finish`]) the inner packet's field is set
//!   from the pair, in place, before the reorder buffer copies it. A piece
//!   of a fragmented packet other than the first holds no IP header: its
//!   outer CE is remembered by tunnel sequence number and carried into
//!   the packet when the reassembler takes that piece, in order. A CE on a
//!   piece of a packet that a gap interrupted (parked, completed late) is
//!   counted in `ce_not_carried` instead.
//!
//! Invariants: only authentic datagrams change an inner packet; the
//! remembered sequence numbers are at most [`PENDING_MAX`]; every outer
//! CE is counted once, as carried, as a drop (`ecn_ce_not_ect`), or as not
//! carried, or shows as waiting (`ce_waiting`) until its piece's release.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use super::Tunnel;
use crate::ecn_tunnel::{decapsulate, Egress};
use crate::qos::ecn::{CE, ECN_MASK, NOT_ECT};
use crate::stats::DropReason;
use crate::wire::{self, Fragment, HeaderFields, PacketType, FRAGMENT_HEADER_LEN, HEADER_LEN};

/// Later pieces with an outer CE remembered until their release (tuning
/// knob: a CE is one per round trip or so; the reorder window is the
/// bound on how long one waits).
pub const PENDING_MAX: usize = 64;

/// ECN counters (`mpt status` `ecn`).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct EcnStats {
    /// Authentic data datagrams whose outer header arrived CE.
    pub outer_ce: u64,
    /// Outer CE carried into the inner packet (or found there already).
    pub ce_carried: u64,
    /// Outer ECT(1) carried into an ECT(0) inner packet.
    pub ect1_carried: u64,
    /// Outer CE on a packet of a parked (late) fragmented packet.
    pub ce_not_carried: u64,
    /// Outer CE on later pieces still waiting for their release (a gap
    /// before them) when the counters were read: a level, not a count.
    /// `outer_ce` = `ce_carried` + `ce_not_carried` + `ce_waiting` (CE
    /// dropped as not ECN-capable aside).
    pub ce_waiting: u64,
}

/// The receiving side's state. See the module documentation.
#[derive(Debug, Default)]
pub struct EcnIn {
    /// Tunnel sequence numbers of later pieces that arrived with CE.
    pending: VecDeque<u64>,
    pub stats: EcnStats,
}

/// What became of a datagram's outer ECN bits on arrival.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// Carried (or nothing to carry): deliver.
    Pass,
    /// Outer CE on a Not-ECT inner packet: drop it.
    Drop,
}

impl EcnIn {
    /// A whole inner packet (or the first piece, which holds its header)
    /// arrived with outer bits `outer`.
    pub fn on_packet(&mut self, inner: &mut [u8], outer: u8) -> Arrival {
        let ce = outer & ECN_MASK == CE;
        if ce {
            self.stats.outer_ce += 1;
        }
        match decapsulate(inner, outer) {
            Egress::Unchanged => {
                // An outer CE on an inner CE (marked before the tunnel's
                // egress, by mpt's own queue at the sender for one: the
                // outer copies the inner's field) is in the packet already.
                if ce {
                    self.stats.ce_carried += 1;
                }
                Arrival::Pass
            }
            Egress::MarkedCe => {
                self.stats.ce_carried += 1;
                Arrival::Pass
            }
            Egress::MarkedEct1 => {
                self.stats.ect1_carried += 1;
                Arrival::Pass
            }
            Egress::Drop => Arrival::Drop,
        }
    }

    /// A later piece (tunnel sequence `seq`) arrived with outer bits
    /// `outer`: a CE waits for the piece's release. A piece that cannot
    /// be released again (below `next_seq`, the reorder buffer's next, or
    /// a second copy of one already waiting: a resend whose original came
    /// after all) carries nothing: its CE is counted as not carried at
    /// once, not left waiting for a release that never comes.
    pub fn on_later_piece(&mut self, seq: u64, outer: u8, next_seq: u64) {
        if outer & ECN_MASK != CE {
            return;
        }
        self.stats.outer_ce += 1;
        if seq < next_seq || self.pending.contains(&seq) {
            self.stats.ce_not_carried += 1;
            return;
        }
        if self.pending.len() == PENDING_MAX {
            self.pending.pop_front();
            self.stats.ce_not_carried += 1;
        }
        self.pending.push_back(seq);
    }

    /// Whether piece `seq`, released now, arrived with CE (forgotten then).
    pub fn take(&mut self, seq: u64) -> bool {
        if self.pending.is_empty() {
            return false;
        }
        match self.pending.iter().position(|&s| s == seq) {
            Some(i) => {
                self.pending.remove(i);
                true
            }
            None => false,
        }
    }

    /// The counters, with the CE still waiting now.
    pub fn stats(&self) -> EcnStats {
        EcnStats {
            ce_waiting: self.pending.len() as u64,
            ..self.stats
        }
    }

    /// Whether the outer bits say anything at all.
    pub fn quiet(outer: u8) -> bool {
        outer & ECN_MASK == NOT_ECT
    }
}

impl Tunnel {
    /// An authentic datagram's outer ECN bits, before its body goes on
    /// (see the module documentation); `Err`: drop it for that reason.
    pub(super) fn ecn_arrival(
        &mut self,
        ty: PacketType,
        f: &HeaderFields,
        outer: u8,
        buf: &mut [u8],
        body_len: usize,
    ) -> Result<(), DropReason> {
        if EcnIn::quiet(outer) || !matches!(ty, PacketType::Data | PacketType::Fragment) {
            return Ok(());
        }
        let body = &mut buf[HEADER_LEN..HEADER_LEN + body_len];
        let arrival = if ty == PacketType::Data {
            self.ecn_in.on_packet(body, outer)
        } else {
            match Fragment::parse(body).map(|p| p.index) {
                Ok(0) => self
                    .ecn_in
                    .on_packet(&mut body[FRAGMENT_HEADER_LEN..], outer),
                Ok(_) => {
                    let next = self.reorder.next_seq();
                    let seq = wire::widen_u32(f.tunnel_seq, next);
                    self.ecn_in.on_later_piece(seq, outer, next);
                    Arrival::Pass
                }
                // recv_authentic drops and counts it.
                Err(_) => Arrival::Pass,
            }
        };
        match arrival {
            Arrival::Pass => Ok(()),
            Arrival::Drop => Err(DropReason::EcnCeNotEct),
        }
    }

    /// Piece `seq` was released to the reassembler: carry its outer CE,
    /// if it had one, into the packet under way (`under_way`: the piece
    /// joined it; otherwise its packet was parked and the CE is counted as
    /// not carried).
    pub(super) fn ecn_on_piece_released(&mut self, seq: u64, under_way: bool) {
        if !self.ecn_in.take(seq) {
            return;
        }
        match under_way.then(|| self.frag.reasm.mark_ce()) {
            Some(Egress::MarkedCe | Egress::Unchanged) => self.ecn_in.stats.ce_carried += 1,
            _ => self.ecn_in.stats.ce_not_carried += 1,
        }
    }

    /// ECN counters (`mpt status`).
    pub fn ecn_stats(&self) -> EcnStats {
        self.ecn_in.stats()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ecn_tunnel::{inner_ecn, ECT0};

    fn v6(ecn: u8) -> Vec<u8> {
        let mut p = vec![0u8; 40];
        p[0] = 0x60;
        p[1] = ecn << 4;
        p
    }

    #[test]
    fn a_ce_on_a_whole_packet_is_carried_and_counted() {
        let mut e = EcnIn::default();
        let mut p = v6(ECT0);
        assert_eq!(e.on_packet(&mut p, CE), Arrival::Pass);
        assert_eq!(inner_ecn(&p), CE);
        let mut q = v6(NOT_ECT);
        assert_eq!(e.on_packet(&mut q, CE), Arrival::Drop);
        assert_eq!((e.stats.outer_ce, e.stats.ce_carried), (2, 1));
    }

    #[test]
    fn an_outer_ce_on_an_inner_ce_counts_as_carried() {
        // mpt's own queue marked the inner packet at the sender; the outer
        // header copied it. Every outer CE is accounted for (CI read one
        // of 440 missing before).
        let mut e = EcnIn::default();
        let mut p = v6(CE);
        assert_eq!(e.on_packet(&mut p, CE), Arrival::Pass);
        assert_eq!(inner_ecn(&p), CE);
        let s = e.stats();
        assert_eq!(
            (s.outer_ce, s.ce_carried + s.ce_not_carried + s.ce_waiting),
            (1, 1)
        );
    }

    #[test]
    fn later_pieces_are_remembered_until_their_release_and_bounded() {
        let mut e = EcnIn::default();
        e.on_later_piece(7, ECT0, 0);
        assert!(!e.take(7), "ECT alone is nothing to carry");
        e.on_later_piece(7, CE, 0);
        e.on_later_piece(9, CE, 0);
        assert!(e.take(9) && e.take(7) && !e.take(7));
        for s in 0..(PENDING_MAX as u64 + 3) {
            e.on_later_piece(100 + s, CE, 0);
        }
        assert_eq!(e.stats.ce_not_carried, 3);
        assert!(!e.take(100) && e.take(103));
    }

    #[test]
    fn a_later_piece_that_cannot_be_released_again_counts_at_once() {
        // Every outer CE is counted once: a second copy of a waiting piece
        // (a resend whose original came after all) and a piece below the
        // reorder buffer's next sequence number (released already) carry
        // nothing, and must not wait forever.
        let mut e = EcnIn::default();
        e.on_later_piece(20, CE, 10);
        e.on_later_piece(20, CE, 10);
        e.on_later_piece(5, CE, 10);
        assert_eq!((e.stats.outer_ce, e.stats.ce_not_carried), (3, 2));
        assert_eq!(
            e.stats().ce_waiting,
            1,
            "the first copy waits for its release"
        );
        assert!(e.take(20) && !e.take(20) && !e.take(5));
        assert_eq!(e.stats().ce_waiting, 0);
    }
}
