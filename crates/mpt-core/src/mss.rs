//! MSS clamping of routed TCP (OpenVPN's `mssfix`, Linux's
//! `TCPMSS --clamp-mss-to-pmtu`): the tunnel's MTU is several datagrams
//! (fragments, `wire/fragment.rs`), which pays off for a host's own
//! traffic, whose TCP then sends large segments; a host on a LAN behind a
//! router sends at most its LAN's 1500-byte packets, and each would be
//! cut into two datagrams (a 1430-byte and a 70-byte piece: two headers,
//! two sends). Its TCP is told to send segments that fit one datagram
//! instead: the MSS option of its SYN and SYN-ACK (RFC 9293 §3.7.1) is
//! lowered to one datagram's body less the IP and TCP headers.
//!
//! Which connections are clamped: those with an endpoint outside the
//! tunnel's own prefixes (the networks of `[tunnel] addresses`, which hold
//! both tunnel ends, or a concentrator's clients): routed traffic. A
//! connection between two tunnel addresses keeps its MSS and the gain of
//! large packets.
//!
//! Invariants: only a TCP segment with SYN whose MSS option is larger than
//! the bound is changed, and then only those two bytes and the checksum
//! (updated incrementally, RFC 1624 eq. 3); anything that does not parse
//! (IPv4 fragments, IPv6 extension headers, truncated options) is left as
//! it is; the function never panics on any input.

use std::net::IpAddr;

use ipnet::IpNet;

use crate::ip::{Ip, Tcp, IPV4_HEADER_LEN, IPV6_HEADER_LEN, PROTO_TCP, TCP_HEADER_LEN};

/// TCP SYN flag (RFC 9293 §3.1).
const SYN: u8 = 0x02;
/// TCP option kinds (RFC 9293 §3.2).
const OPT_END: u8 = 0;
const OPT_NOP: u8 = 1;
const OPT_MSS: u8 = 2;
const OPT_MSS_LEN: usize = 4;

/// The clamp of one tunnel (module documentation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MssClamp {
    /// The tunnel's own networks: connections within them are not clamped.
    own: Vec<IpNet>,
    /// Largest MSS of a routed IPv4 / IPv6 connection.
    mss_v4: u16,
    mss_v6: u16,
}

impl MssClamp {
    /// A clamp to segments that fit `datagram_body` bytes of inner packet,
    /// for connections with an endpoint outside `own` (truncated to their
    /// networks).
    pub fn new(own: &[IpNet], datagram_body: usize) -> Self {
        let mss = |ip: usize| {
            datagram_body
                .saturating_sub(ip + TCP_HEADER_LEN)
                .clamp(536, usize::from(u16::MAX)) as u16
        };
        Self {
            own: own.iter().map(IpNet::trunc).collect(),
            mss_v4: mss(IPV4_HEADER_LEN),
            mss_v6: mss(IPV6_HEADER_LEN),
        }
    }

    /// The bound for IPv4 and IPv6 connections.
    pub fn bounds(&self) -> (u16, u16) {
        (self.mss_v4, self.mss_v6)
    }

    fn routed(&self, src: IpAddr, dst: IpAddr) -> bool {
        let inside = |a: IpAddr| self.own.iter().any(|n| n.contains(&a));
        !(inside(src) && inside(dst))
    }

    /// Clamp the MSS option of `pkt` if it is a routed TCP SYN whose MSS is
    /// larger than the bound; whether it changed.
    pub fn apply(&self, pkt: &mut [u8]) -> bool {
        let Some(ip) = Ip::parse_simple(pkt, PROTO_TCP, TCP_HEADER_LEN) else {
            return false;
        };
        let Some(tcp) = Tcp::parse(pkt, &ip) else {
            return false;
        };
        if tcp.flags(pkt) & SYN == 0 {
            return false;
        }
        let (src, dst) = ip.addresses(pkt);
        let addr = |b: &[u8]| -> Option<IpAddr> {
            Some(match b.len() {
                4 => IpAddr::from(<[u8; 4]>::try_from(b).ok()?),
                _ => IpAddr::from(<[u8; 16]>::try_from(b).ok()?),
            })
        };
        let (Some(src), Some(dst)) = (addr(src), addr(dst)) else {
            return false;
        };
        if !self.routed(src, dst) {
            return false;
        }
        let bound = if ip.version == 4 {
            self.mss_v4
        } else {
            self.mss_v6
        };
        let Some(at) = mss_option_at(pkt, &tcp) else {
            return false;
        };
        let old = u16::from_be_bytes([pkt[at], pkt[at + 1]]);
        if old <= bound {
            return false;
        }
        pkt[at..at + 2].copy_from_slice(&bound.to_be_bytes());
        let c = tcp.checksum_at();
        let hc = u16::from_be_bytes([pkt[c], pkt[c + 1]]);
        pkt[c..c + 2].copy_from_slice(&update_checksum(hc, old, bound).to_be_bytes());
        true
    }
}

/// Offset of the MSS option's value in `pkt`, if the header has one.
fn mss_option_at(pkt: &[u8], tcp: &Tcp) -> Option<usize> {
    let mut i = tcp.at + TCP_HEADER_LEN;
    let end = tcp.at + tcp.header_len;
    while i < end {
        match pkt[i] {
            OPT_END => return None,
            OPT_NOP => i += 1,
            kind => {
                let len = usize::from(*pkt.get(i + 1)?);
                if len < 2 || i + len > end {
                    return None;
                }
                if kind == OPT_MSS && len == OPT_MSS_LEN {
                    return Some(i + 2);
                }
                i += len;
            }
        }
    }
    None
}

/// RFC 1624 eq. 3: HC' = ~(~HC + ~m + m'), one 16-bit field changed from
/// `old` to `new`.
fn update_checksum(hc: u16, old: u16, new: u16) -> u16 {
    let mut s = u32::from(!hc) + u32::from(!old) + u32::from(new);
    while s >> 16 != 0 {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ip::checksum;

    /// An IPv4 TCP SYN from `src` to `dst` with options NOP, NOP, MSS
    /// `mss`, SACK permitted, and a valid checksum.
    fn syn4(src: [u8; 4], dst: [u8; 4], mss: u16, flags: u8) -> Vec<u8> {
        let opts = [1, 1, 2, 4, (mss >> 8) as u8, mss as u8, 4, 2];
        let tcp_len = TCP_HEADER_LEN + opts.len();
        let mut p = vec![0u8; IPV4_HEADER_LEN + tcp_len];
        p[0] = 0x45;
        let total = p.len() as u16;
        p[2..4].copy_from_slice(&total.to_be_bytes());
        p[8] = 64;
        p[9] = PROTO_TCP;
        p[12..16].copy_from_slice(&src);
        p[16..20].copy_from_slice(&dst);
        crate::ip::ipv4_fill_checksum(&mut p[..IPV4_HEADER_LEN]);
        let t = IPV4_HEADER_LEN;
        p[t..t + 2].copy_from_slice(&40000u16.to_be_bytes());
        p[t + 2..t + 4].copy_from_slice(&5201u16.to_be_bytes());
        p[t + 12] = ((tcp_len / 4) as u8) << 4;
        p[t + 13] = flags;
        p[t + 20..].copy_from_slice(&opts);
        fill_tcp_checksum(&mut p);
        p
    }

    fn fill_tcp_checksum(p: &mut [u8]) {
        let ip = Ip::parse(p).unwrap();
        let l4 = p.len() - ip.header_len;
        let c = ip.header_len + 16;
        p[c] = 0;
        p[c + 1] = 0;
        let s = checksum::sum16(&p[ip.header_len..], checksum::pseudo(p, &ip, PROTO_TCP, l4));
        p[c..c + 2].copy_from_slice(&(!checksum::fold(s)).to_be_bytes());
    }

    fn clamp() -> MssClamp {
        MssClamp::new(&["10.99.0.1/24".parse().unwrap()], 1432)
    }

    #[test]
    fn a_routed_syn_is_clamped_with_a_valid_checksum() {
        let mut p = syn4([192, 168, 1, 10], [192, 168, 2, 20], 1460, SYN);
        assert!(clamp().apply(&mut p));
        let at = mss_option_at(&p, &Tcp::parse(&p, &Ip::parse(&p).unwrap()).unwrap()).unwrap();
        assert_eq!(u16::from_be_bytes([p[at], p[at + 1]]), 1392);
        let mut want = p.clone();
        fill_tcp_checksum(&mut want);
        assert_eq!(p, want, "the incremental checksum equals a full one");
        // A SYN-ACK too, and one endpoint outside is enough.
        let mut p = syn4([10, 99, 0, 2], [192, 168, 2, 20], 8960, SYN | 0x10);
        assert!(clamp().apply(&mut p));
    }

    #[test]
    fn host_to_host_small_and_non_syn_segments_are_left_alone() {
        let c = clamp();
        let mut p = syn4([10, 99, 0, 1], [10, 99, 0, 2], 11_000, SYN);
        assert!(!c.apply(&mut p), "both ends are tunnel addresses");
        let mut p = syn4([192, 168, 1, 10], [192, 168, 2, 20], 1200, SYN);
        assert!(!c.apply(&mut p), "already below the bound");
        let mut p = syn4([192, 168, 1, 10], [192, 168, 2, 20], 1460, 0x10);
        let before = p.clone();
        assert!(!c.apply(&mut p), "not a SYN");
        assert_eq!(p, before);
        assert_eq!(c.bounds(), (1392, 1372));
    }

    #[test]
    fn any_input_is_safe() {
        let c = clamp();
        let base = syn4([192, 168, 1, 10], [192, 168, 2, 20], 1460, SYN);
        for cut in 0..base.len() {
            let mut p = base[..cut].to_vec();
            c.apply(&mut p);
        }
        // Option lengths that lie.
        for bad in [0u8, 1, 40, 255] {
            let mut p = base.clone();
            p[IPV4_HEADER_LEN + 20 + 3] = bad;
            c.apply(&mut p);
        }
    }

    #[test]
    fn the_incremental_update_follows_rfc_1624() {
        // Any field change, against a full recomputation.
        for (old, new) in [(1460u16, 1392u16), (0xffff, 0), (0, 0xffff), (8960, 1372)] {
            let mut w = [0x12u8, 0x34, (old >> 8) as u8, old as u8, 0xab, 0xcd];
            let hc = !checksum::fold(checksum::sum16(&w, 0));
            w[2..4].copy_from_slice(&new.to_be_bytes());
            let full = !checksum::fold(checksum::sum16(&w, 0));
            let inc = update_checksum(hc, old, new);
            // 0x0000 and 0xffff are the same one's-complement number.
            assert!(inc == full || (inc ^ full) == 0xffff, "{old} -> {new}");
        }
    }
}
