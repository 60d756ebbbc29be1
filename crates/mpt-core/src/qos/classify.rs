//! Early demultiplexing: the class and the flow of an inner packet, read
//! from its headers before it is queued anywhere (the ED-SGSN thesis's
//! classifier, Lefebvre; DSCP per RFC 2474, EF per RFC 3246).
//!
//! A class matches a packet when every criterion it sets holds: one of its
//! DSCP values, its protocol, one of its port ranges (source or
//! destination), one of its source and one of its destination prefixes.
//! The first matching class in configuration order wins; a class that sets
//! no criterion is the default and catches the rest.
//!
//! The flow is a keyed hash of the 5-tuple (addresses, protocol, ports),
//! so a sender cannot aim its flows at another's bucket without the key.
//!
//! Invariants:
//! * classification reads only bytes that [`Ip::parse`] bounds-checked,
//!   and ports only of first fragments whose transport header is present:
//!   no panic on any input;
//! * a packet that is not IP never reaches here (the tunnel drops it).

use std::net::IpAddr;

use crate::ip::{Ip, PROTO_TCP, PROTO_UDP};

/// A network prefix (address and length), matched against inner packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prefix {
    pub addr: IpAddr,
    pub len: u8,
}

impl Prefix {
    /// Whether the address bytes `a` (4 or 16 of them) fall in the prefix.
    pub fn contains(&self, a: &[u8]) -> bool {
        let net: &[u8] = match &self.addr {
            IpAddr::V4(v) if a.len() == 4 => &v.octets()[..],
            IpAddr::V6(v) if a.len() == 16 => &v.octets()[..],
            _ => return false,
        };
        let full = usize::from(self.len / 8).min(a.len());
        if net[..full] != a[..full] {
            return false;
        }
        let rest = self.len % 8;
        if rest == 0 || full >= a.len() {
            return true;
        }
        let mask = 0xffu8 << (8 - rest);
        net[full] & mask == a[full] & mask
    }
}

/// What a class matches; empty criteria match everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClassMatch {
    /// DSCP code points (0–63).
    pub dscp: Vec<u8>,
    /// IP protocol number (6 TCP, 17 UDP, ...).
    pub protocol: Option<u8>,
    /// Port ranges, inclusive, matched against source or destination.
    pub ports: Vec<(u16, u16)>,
    pub source: Vec<Prefix>,
    pub destination: Vec<Prefix>,
}

impl ClassMatch {
    /// Whether no criterion is set (the default class).
    pub fn is_catch_all(&self) -> bool {
        self.dscp.is_empty()
            && self.protocol.is_none()
            && self.ports.is_empty()
            && self.source.is_empty()
            && self.destination.is_empty()
    }

    pub fn matches(&self, p: &Inspected<'_>) -> bool {
        (self.dscp.is_empty() || self.dscp.contains(&p.dscp))
            && self.protocol.is_none_or(|x| x == p.protocol)
            && (self.ports.is_empty()
                || p.ports.is_some_and(|(s, d)| {
                    self.ports
                        .iter()
                        .any(|(lo, hi)| (*lo..=*hi).contains(&s) || (*lo..=*hi).contains(&d))
                }))
            && (self.source.is_empty() || self.source.iter().any(|n| n.contains(p.source)))
            && (self.destination.is_empty()
                || self.destination.iter().any(|n| n.contains(p.destination)))
    }
}

/// The header fields classification reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Inspected<'a> {
    pub dscp: u8,
    pub protocol: u8,
    pub source: &'a [u8],
    pub destination: &'a [u8],
    /// (source, destination) ports of TCP and UDP first fragments.
    pub ports: Option<(u16, u16)>,
}

/// Read what classification needs; `None` if `pkt` is not IP.
pub fn inspect(pkt: &[u8]) -> Option<Inspected<'_>> {
    let ip = Ip::parse(pkt)?;
    let (protocol, first_fragment) = if ip.version == 4 {
        let frag = u16::from_be_bytes([pkt[6], pkt[7]]) & 0x1fff;
        (pkt[9], frag == 0)
    } else {
        // The next header as written: a packet with extension headers is
        // classified by addresses and DSCP alone (no ports).
        (pkt[6], true)
    };
    let (source, destination) = ip.addresses(pkt);
    let at = ip.header_len;
    let ports = (first_fragment
        && matches!(protocol, PROTO_TCP | PROTO_UDP)
        && pkt.len() >= at + 4)
        .then(|| {
            (
                u16::from_be_bytes([pkt[at], pkt[at + 1]]),
                u16::from_be_bytes([pkt[at + 2], pkt[at + 3]]),
            )
        });
    Some(Inspected {
        dscp: ip.traffic_class(pkt) >> 2,
        protocol,
        source,
        destination,
        ports,
    })
}

/// Keyed hash of the 5-tuple (FNV-1a over key and fields, then a 64-bit
/// finaliser): cheap, and unpredictable without `key`.
pub fn flow_hash(p: &Inspected<'_>, key: u64) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ key;
    let mut eat = |b: u8| {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    };
    p.source.iter().for_each(|b| eat(*b));
    p.destination.iter().for_each(|b| eat(*b));
    eat(p.protocol);
    if let Some((s, d)) = p.ports {
        s.to_be_bytes()
            .iter()
            .chain(&d.to_be_bytes())
            .for_each(|b| eat(*b));
    }
    // splitmix64 finaliser: spreads FNV's weak low bits.
    let mut z = h ^ key.rotate_left(17);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// IPv4 UDP 10.0.0.1:5004 → 10.0.0.2:6000 with TOS `tos`.
    fn udp4(tos: u8) -> Vec<u8> {
        let mut p = vec![
            0x45, tos, 0, 36, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, 0x13, 0x8c, 0x17,
            0x70, 0, 16, 0, 0,
        ];
        p.extend_from_slice(&[0; 8]);
        p
    }

    #[test]
    fn reads_dscp_protocol_ports_and_addresses() {
        let p = udp4(0xb8);
        let i = inspect(&p).unwrap();
        assert_eq!(i.dscp, 46, "EF");
        assert_eq!(i.protocol, 17);
        assert_eq!(i.ports, Some((5004, 6000)));
        assert_eq!(i.source, &[10, 0, 0, 1]);
        // A later fragment has no ports.
        let mut f = p.clone();
        f[7] = 10;
        assert_eq!(inspect(&f).unwrap().ports, None);
        // Truncated transport header: no ports, no panic.
        assert_eq!(inspect(&p[..22]).unwrap().ports, None);
        assert!(inspect(&[0x60; 10]).is_none());
    }

    #[test]
    fn every_set_criterion_must_hold() {
        let p = udp4(0);
        let i = inspect(&p).unwrap();
        let net = |s: &str, len| Prefix {
            addr: s.parse().unwrap(),
            len,
        };
        let m = ClassMatch {
            protocol: Some(17),
            ports: vec![(6000, 6010)],
            destination: vec![net("10.0.0.0", 24)],
            ..ClassMatch::default()
        };
        assert!(m.matches(&i));
        let wrong_net = ClassMatch {
            destination: vec![net("10.0.1.0", 24)],
            ..m.clone()
        };
        assert!(!wrong_net.matches(&i));
        let tcp = ClassMatch {
            protocol: Some(6),
            ..m.clone()
        };
        assert!(!tcp.matches(&i));
        let ef = ClassMatch {
            dscp: vec![46],
            ..ClassMatch::default()
        };
        assert!(!ef.matches(&i));
        assert!(ClassMatch::default().is_catch_all());
        assert!(net("10.0.0.0", 25).contains(&[10, 0, 0, 127]));
        assert!(!net("10.0.0.0", 25).contains(&[10, 0, 0, 128]));
        assert!(net("0.0.0.0", 0).contains(&[1, 2, 3, 4]));
        assert!(!net("::", 0).contains(&[1, 2, 3, 4]), "families differ");
    }

    #[test]
    fn flows_differ_by_port_and_key() {
        let a = udp4(0);
        let mut b = a.clone();
        b[21] ^= 1;
        let (ia, ib) = (inspect(&a).unwrap(), inspect(&b).unwrap());
        assert_eq!(flow_hash(&ia, 7), flow_hash(&ia, 7));
        assert_ne!(flow_hash(&ia, 7), flow_hash(&ib, 7));
        assert_ne!(flow_hash(&ia, 7), flow_hash(&ia, 8));
    }
}
