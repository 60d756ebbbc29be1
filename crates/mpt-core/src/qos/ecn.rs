//! ECN marking for the AQM: where CoDel would drop an ECN-capable packet
//! it marks it Congestion Experienced instead (RFC 3168 §5 and §6.1.1.1;
//! RFC 8289 §5 and RFC 8290 §4.1 do so too), so that a TCP with ECN gets
//! CoDel's early signal without losing the packet and retransmitting it.
//!
//! The ECN field is the two low bits of IPv4's TOS byte or IPv6's traffic
//! class: 00 Not-ECT, 01 ECT(1), 10 ECT(0), 11 CE.
//!
//! Invariants:
//! * only ECT(0) and ECT(1) change, to CE; a Not-ECT packet is left as it
//!   is (the caller drops it) and a CE packet stays CE;
//! * IPv4's header checksum is updated incrementally (RFC 1624, eqn. 3)
//!   and stays valid; IPv6 has none;
//! * no panic on any input: a buffer too short for its version's header,
//!   or not IP, is left alone and counts as not ECN-capable.

/// The ECN field's bits in the TOS / traffic class byte (RFC 3168 §5).
pub const ECN_MASK: u8 = 0b11;
/// Not ECN-capable transport.
pub const NOT_ECT: u8 = 0b00;
/// Congestion Experienced.
pub const CE: u8 = 0b11;

const IPV4_HEADER_MIN: usize = 20;
const IPV6_HEADER_LEN: usize = 40;

/// Mark `pkt` CE if its transport is ECN-capable; whether it now carries
/// CE (a packet already marked does). See the module documentation.
pub fn mark_ce(pkt: &mut [u8]) -> bool {
    match pkt.first().map(|b| b >> 4) {
        Some(4) if pkt.len() >= IPV4_HEADER_MIN => {
            match pkt[1] & ECN_MASK {
                NOT_ECT => return false,
                CE => return true,
                _ => {}
            }
            let old = u16::from_be_bytes([pkt[0], pkt[1]]);
            pkt[1] |= CE;
            let new = u16::from_be_bytes([pkt[0], pkt[1]]);
            let sum = u16::from_be_bytes([pkt[10], pkt[11]]);
            pkt[10..12].copy_from_slice(&checksum_update(sum, old, new).to_be_bytes());
            true
        }
        Some(6) if pkt.len() >= IPV6_HEADER_LEN => {
            // Traffic class: the low nibble of byte 0, the high of byte 1.
            match (pkt[1] >> 4) & ECN_MASK {
                NOT_ECT => false,
                _ => {
                    pkt[1] |= CE << 4;
                    true
                }
            }
        }
        _ => false,
    }
}

/// RFC 1624 eqn. 3: the header checksum `sum` after one 16-bit word of
/// the header went from `old` to `new`: HC' = ~(~HC + ~m + m').
pub(crate) fn checksum_update(sum: u16, old: u16, new: u16) -> u16 {
    let mut s = u32::from(!sum) + u32::from(!old) + u32::from(new);
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one's complement sum of a header with its checksum: 0xffff
    /// when the checksum is valid.
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

    /// An IPv4 header (UDP, 10.0.0.1 → 10.0.0.2, TOS 0x02 = ECT(0)) with
    /// its checksum, as a byte-array test vector.
    const V4_ECT0: [u8; 20] = [
        0x45, 0x02, 0x00, 0x54, 0x12, 0x34, 0x40, 0x00, 0x40, 0x11, 0x14, 0x61, 0x0a, 0x00, 0x00,
        0x01, 0x0a, 0x00, 0x00, 0x02,
    ];

    #[test]
    fn an_ect_ipv4_packet_is_marked_and_its_checksum_stays_valid() {
        assert_eq!(folded_sum(&V4_ECT0), 0xffff, "the vector is valid");
        let mut p = V4_ECT0.to_vec();
        assert!(mark_ce(&mut p));
        assert_eq!(p[1], 0x03);
        // 0x1461 - 1, as recomputing the whole header gives.
        assert_eq!(&p[10..12], &[0x14, 0x60]);
        assert_eq!(folded_sum(&p), 0xffff);
        assert_eq!(p[2..10], V4_ECT0[2..10]);
        assert_eq!(p[12..], V4_ECT0[12..]);
        // Marked again: already CE, unchanged.
        let before = p.clone();
        assert!(mark_ce(&mut p));
        assert_eq!(p, before);
    }

    #[test]
    fn ect1_and_dscp_bits_survive_the_mark() {
        // EF (DSCP 46) with ECT(1): TOS 0xb9 becomes 0xbb.
        let mut p = V4_ECT0.to_vec();
        p[1] = 0xb9;
        let fixed = checksum_update(u16::from_be_bytes([p[10], p[11]]), 0x4502, 0x45b9);
        p[10..12].copy_from_slice(&fixed.to_be_bytes());
        assert_eq!(folded_sum(&p), 0xffff);
        assert!(mark_ce(&mut p));
        assert_eq!(p[1], 0xbb);
        assert_eq!(folded_sum(&p), 0xffff);
    }

    #[test]
    fn a_not_ect_packet_is_left_alone() {
        let mut p = V4_ECT0.to_vec();
        p[1] = 0x00;
        let before = p.clone();
        assert!(!mark_ce(&mut p));
        assert_eq!(p, before);
        let mut v6 = [0u8; 40];
        v6[0] = 0x60;
        assert!(!mark_ce(&mut v6));
        assert_eq!(v6, {
            let mut x = [0u8; 40];
            x[0] = 0x60;
            x
        });
    }

    #[test]
    fn an_ect_ipv6_packet_is_marked_in_its_traffic_class() {
        // Traffic class 0xb8 | ECT(0) = 0xba: byte 0 0x6b, byte 1 0xa0
        // (and the top of the flow label, 0x5).
        let mut p = [0u8; 40];
        p[0] = 0x6b;
        p[1] = 0xa5;
        assert!(mark_ce(&mut p));
        assert_eq!((p[0], p[1]), (0x6b, 0xb5));
    }

    #[test]
    fn short_or_foreign_buffers_are_not_touched() {
        for mut b in [vec![], vec![0x45; 19], vec![0x62; 39], vec![0x12; 60]] {
            let before = b.clone();
            assert!(!mark_ce(&mut b));
            assert_eq!(b, before);
        }
    }
}
