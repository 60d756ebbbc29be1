//! ECN across the tunnel: RFC 6040 ("Tunnelling of Explicit Congestion
//! Notification"), normal mode.
//!
//! * **Ingress** (encapsulation): the outer header's ECN field is a copy
//!   of the inner packet's ([`outer_ecn`]), so that a queue on a path
//!   that marks (an AQM with ECN, RFC 3168) can mark the datagram instead
//!   of dropping it. The outer DSCP is the QoS class's business
//!   (`qos::mark`); only the two ECN bits come from here.
//! * **Egress** (decapsulation): the inner packet's ECN field becomes what
//!   RFC 6040 §4.2, Figure 4 says for the pair (inner, outer)
//!   ([`decapsulate`]):
//!
//! ```text
//!   inner \ outer | Not-ECT  ECT(0)   ECT(1)   CE
//!   --------------+-----------------------------------
//!   Not-ECT       | Not-ECT  Not-ECT  Not-ECT  drop
//!   ECT(0)        | ECT(0)   ECT(0)   ECT(1)   CE
//!   ECT(1)        | ECT(1)   ECT(1)   ECT(1)   CE
//!   CE            | CE       CE       CE       CE
//! ```
//!
//!   A CE on the outer header of a packet whose transport cannot read it
//!   (Not-ECT) is a congestion signal that only a drop conveys.
//!
//! Invariants: only the two ECN bits of the inner header change (and
//! IPv4's header checksum with them, RFC 1624 eqn. 3, so that it stays
//! valid); a buffer that is not an IPv4 or IPv6 packet, or too short for
//! its header, is left alone and reads as Not-ECT; nothing here panics on
//! any input.

use crate::qos::ecn::{checksum_update, CE, ECN_MASK, NOT_ECT};

/// ECT(1) (RFC 3168 §5).
pub const ECT1: u8 = 0b01;
/// ECT(0).
pub const ECT0: u8 = 0b10;

const IPV4_HEADER_MIN: usize = 20;
const IPV6_HEADER_LEN: usize = 40;

/// The ECN field of an IPv4 or IPv6 packet (Not-ECT for anything else).
pub fn inner_ecn(pkt: &[u8]) -> u8 {
    match pkt.first().map(|b| b >> 4) {
        Some(4) if pkt.len() >= IPV4_HEADER_MIN => pkt[1] & ECN_MASK,
        Some(6) if pkt.len() >= IPV6_HEADER_LEN => (pkt[1] >> 4) & ECN_MASK,
        _ => NOT_ECT,
    }
}

/// The outer header's ECN bits for inner packet `pkt` (normal mode: a
/// copy, RFC 6040 §4.1).
pub fn outer_ecn(pkt: &[u8]) -> u8 {
    inner_ecn(pkt)
}

/// What [`decapsulate`] did to the inner packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Egress {
    /// Its ECN field is as it came.
    Unchanged,
    /// The outer CE was carried into it.
    MarkedCe,
    /// The outer ECT(1) was carried into its ECT(0).
    MarkedEct1,
    /// Outer CE on a Not-ECT packet: drop it (the signal must not be lost).
    Drop,
}

/// Set the inner packet's ECN field from the outer header's `outer` bits
/// (RFC 6040 §4.2; the table in the module documentation).
pub fn decapsulate(pkt: &mut [u8], outer: u8) -> Egress {
    let inner = inner_ecn(pkt);
    match (inner, outer & ECN_MASK) {
        (_, NOT_ECT) | (_, ECT0) | (CE, _) | (ECT1, ECT1) | (NOT_ECT, ECT1) => Egress::Unchanged,
        (NOT_ECT, CE) => Egress::Drop,
        (_, CE) => {
            set_ecn(pkt, CE);
            Egress::MarkedCe
        }
        (_, _) => {
            // ECT(0) inside, ECT(1) outside.
            set_ecn(pkt, ECT1);
            Egress::MarkedEct1
        }
    }
}

/// Write `ecn` into the packet's ECN field (an IPv4 or IPv6 packet long
/// enough for its header; anything else is left alone).
fn set_ecn(pkt: &mut [u8], ecn: u8) {
    match pkt.first().map(|b| b >> 4) {
        Some(4) if pkt.len() >= IPV4_HEADER_MIN => {
            let old = u16::from_be_bytes([pkt[0], pkt[1]]);
            pkt[1] = (pkt[1] & !ECN_MASK) | (ecn & ECN_MASK);
            let new = u16::from_be_bytes([pkt[0], pkt[1]]);
            let sum = u16::from_be_bytes([pkt[10], pkt[11]]);
            pkt[10..12].copy_from_slice(&checksum_update(sum, old, new).to_be_bytes());
        }
        Some(6) if pkt.len() >= IPV6_HEADER_LEN => {
            pkt[1] = (pkt[1] & !(ECN_MASK << 4)) | ((ecn & ECN_MASK) << 4);
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An IPv4 header (UDP, 10.0.0.1 → 10.0.0.2, TOS 0x02 = ECT(0)) with
    /// its checksum, as a byte-array test vector.
    const V4_ECT0: [u8; 20] = [
        0x45, 0x02, 0x00, 0x54, 0x12, 0x34, 0x40, 0x00, 0x40, 0x11, 0x14, 0x61, 0x0a, 0x00, 0x00,
        0x01, 0x0a, 0x00, 0x00, 0x02,
    ];

    fn folded_sum(h: &[u8]) -> u16 {
        let mut s: u32 = h
            .chunks(2)
            .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
            .sum();
        while s > 0xffff {
            s = (s & 0xffff) + (s >> 16);
        }
        s as u16
    }

    fn v4(ecn: u8) -> Vec<u8> {
        let mut p = V4_ECT0.to_vec();
        set_ecn(&mut p, ecn);
        assert_eq!(folded_sum(&p), 0xffff);
        p
    }

    fn v6(ecn: u8) -> Vec<u8> {
        let mut p = vec![0u8; 40];
        // Traffic class 0xb8 (EF) and the top of the flow label, 0x5.
        p[0] = 0x6b;
        p[1] = 0x85 | (ecn << 4);
        p
    }

    #[test]
    fn ingress_copies_the_inner_ecn_field() {
        for e in [NOT_ECT, ECT1, ECT0, CE] {
            assert_eq!(outer_ecn(&v4(e)), e);
            assert_eq!(outer_ecn(&v6(e)), e);
        }
        assert_eq!(outer_ecn(&[0x45; 19]), NOT_ECT);
        assert_eq!(outer_ecn(&[]), NOT_ECT);
    }

    #[test]
    fn egress_follows_rfc_6040_figure_4_for_every_pair() {
        use Egress::*;
        // (inner, outer) -> (inner after, what happened)
        let table = [
            ((NOT_ECT, NOT_ECT), (NOT_ECT, Unchanged)),
            ((NOT_ECT, ECT0), (NOT_ECT, Unchanged)),
            ((NOT_ECT, ECT1), (NOT_ECT, Unchanged)),
            ((NOT_ECT, CE), (NOT_ECT, Drop)),
            ((ECT0, NOT_ECT), (ECT0, Unchanged)),
            ((ECT0, ECT0), (ECT0, Unchanged)),
            ((ECT0, ECT1), (ECT1, MarkedEct1)),
            ((ECT0, CE), (CE, MarkedCe)),
            ((ECT1, NOT_ECT), (ECT1, Unchanged)),
            ((ECT1, ECT0), (ECT1, Unchanged)),
            ((ECT1, ECT1), (ECT1, Unchanged)),
            ((ECT1, CE), (CE, MarkedCe)),
            ((CE, NOT_ECT), (CE, Unchanged)),
            ((CE, ECT0), (CE, Unchanged)),
            ((CE, ECT1), (CE, Unchanged)),
            ((CE, CE), (CE, Unchanged)),
        ];
        for ((inner, outer), (after, what)) in table {
            for mut p in [v4(inner), v6(inner)] {
                let before = p.clone();
                assert_eq!(decapsulate(&mut p, outer), what, "{inner} {outer}");
                assert_eq!(inner_ecn(&p), after, "{inner} {outer}");
                if p[0] >> 4 == 4 {
                    assert_eq!(folded_sum(&p), 0xffff, "checksum stays valid");
                    assert_eq!(p[2..10], before[2..10]);
                    assert_eq!(p[12..], before[12..]);
                    assert_eq!(p[1] >> 2, before[1] >> 2, "DSCP kept");
                } else {
                    assert_eq!(p[0], before[0]);
                    assert_eq!(p[1] & 0xcf, before[1] & 0xcf, "DSCP and flow label kept");
                    assert_eq!(p[2..], before[2..]);
                }
            }
        }
    }

    #[test]
    fn an_ect0_ipv4_vector_marked_ce_has_the_known_checksum() {
        let mut p = V4_ECT0.to_vec();
        assert_eq!(decapsulate(&mut p, CE), Egress::MarkedCe);
        assert_eq!(p[1], 0x03);
        assert_eq!(&p[10..12], &[0x14, 0x60]);
    }

    #[test]
    fn foreign_or_short_buffers_are_not_touched() {
        for mut b in [vec![], vec![0x45; 19], vec![0x62; 39], vec![0x12; 60]] {
            let before = b.clone();
            // Not an IP packet: reads as Not-ECT, so an outer CE drops it.
            assert_eq!(decapsulate(&mut b, CE), Egress::Drop);
            assert_eq!(decapsulate(&mut b, ECT1), Egress::Unchanged);
            assert_eq!(b, before);
        }
    }
}
