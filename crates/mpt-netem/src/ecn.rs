//! A link that marks instead of dropping: with `ecn_mark_ms`, a frame
//! that waits longer than that in the rate queue is marked Congestion
//! Experienced if its IP header says ECN-capable (RFC 3168 §5; a step
//! marker, as DCTCP's switches use, RFC 8257 §3.1). This kernel has no
//! ECN-capable qdisc, so the lab's links mark here.
//!
//! Invariants: only an Ethernet frame carrying IPv4 or IPv6 whose ECN
//! field is ECT(0) or ECT(1) changes, and only in those two bits (IPv4's
//! header checksum updated with them, RFC 1624 eqn. 3); a short or other
//! frame is left alone.

const ETH_HEADER: usize = 14;
const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;
const CE: u8 = 0b11;

/// Mark `frame` CE if it is ECN-capable; whether it was marked now.
pub fn mark_ce(frame: &mut [u8]) -> bool {
    if frame.len() < ETH_HEADER + 20 {
        return false;
    }
    let ip = ETH_HEADER;
    match u16::from_be_bytes([frame[12], frame[13]]) {
        ETHERTYPE_IPV4 if frame[ip] >> 4 == 4 => {
            let ecn = frame[ip + 1] & CE;
            if ecn == 0 || ecn == CE {
                return false;
            }
            let old = u16::from_be_bytes([frame[ip], frame[ip + 1]]);
            frame[ip + 1] |= CE;
            let new = u16::from_be_bytes([frame[ip], frame[ip + 1]]);
            let sum = u16::from_be_bytes([frame[ip + 10], frame[ip + 11]]);
            let mut s = u32::from(!sum) + u32::from(!old) + u32::from(new);
            while s > 0xffff {
                s = (s & 0xffff) + (s >> 16);
            }
            frame[ip + 10..ip + 12].copy_from_slice(&(!(s as u16)).to_be_bytes());
            true
        }
        ETHERTYPE_IPV6 if frame.len() >= ETH_HEADER + 40 && frame[ip] >> 4 == 6 => {
            let ecn = (frame[ip + 1] >> 4) & CE;
            if ecn == 0 || ecn == CE {
                return false;
            }
            frame[ip + 1] |= CE << 4;
            true
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ethernet + the IPv4 header of a UDP datagram with TOS `tos`, its
    /// checksum valid.
    fn v4(tos: u8) -> Vec<u8> {
        let mut f = vec![0u8; 14];
        f[12..14].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
        let mut h = [
            0x45, tos, 0x00, 0x54, 0x12, 0x34, 0x40, 0x00, 0x40, 0x11, 0, 0, 10, 0, 0, 1, 10, 0, 0,
            2,
        ];
        let sum = fold(&h);
        h[10..12].copy_from_slice(&(!sum).to_be_bytes());
        f.extend_from_slice(&h);
        f.extend_from_slice(&[0xab; 8]);
        f
    }

    fn fold(h: &[u8]) -> u16 {
        let mut s: u32 = h
            .chunks(2)
            .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
            .sum();
        while s > 0xffff {
            s = (s & 0xffff) + (s >> 16);
        }
        s as u16
    }

    #[test]
    fn ect_frames_are_marked_with_a_valid_checksum_and_others_left_alone() {
        for tos in [0x02, 0x01, 0xb9] {
            let mut f = v4(tos);
            assert!(mark_ce(&mut f));
            assert_eq!(f[15], tos | 3);
            assert_eq!(fold(&f[14..34]), 0xffff, "checksum valid");
            assert!(!mark_ce(&mut f), "already CE");
        }
        for mut f in [v4(0x00), v4(0xb8), vec![0u8; 20], vec![]] {
            let before = f.clone();
            assert!(!mark_ce(&mut f));
            assert_eq!(f, before);
        }
        let mut v6 = vec![0u8; 54];
        v6[12..14].copy_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
        v6[14] = 0x60;
        v6[15] = 0x20; // ECT(0)
        assert!(mark_ce(&mut v6));
        assert_eq!(v6[15], 0x30);
    }
}
