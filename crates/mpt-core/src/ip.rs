//! Field views over inner IP packets: IPv4 (RFC 791), IPv6 (RFC 8200), TCP
//! (RFC 9293) and UDP (RFC 768) headers, in the style of smoltcp's
//! `wire` module: a view wraps a byte buffer, checks its length once in
//! `new_checked`, and then reads and writes fields by name. The core uses
//! them to classify inner packets; the I/O layer's TUN offloads use them to
//! cut and merge super-packets.
//!
//! Invariants:
//! * after `new_checked` succeeds every accessor is in bounds (no panics
//!   on any input);
//! * [`Ip::parse_simple`] accepts only what offloads may touch: IPv4
//!   without options or fragmentation, IPv6 without extension headers, of
//!   the requested transport protocol, with that protocol's header present.

/// IP protocol numbers (IANA).
pub const PROTO_TCP: u8 = 6;
pub const PROTO_UDP: u8 = 17;
pub const IPV4_HEADER_LEN: usize = 20;
pub const IPV6_HEADER_LEN: usize = 40;
pub const TCP_HEADER_LEN: usize = 20;
pub const UDP_HEADER_LEN: usize = 8;

/// TCP flags (RFC 9293 §3.1).
pub mod tcp_flags {
    pub const FIN: u8 = 0x01;
    pub const PSH: u8 = 0x08;
    pub const ACK: u8 = 0x10;
    pub const CWR: u8 = 0x80;
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

/// An IP packet's version and header, checked once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ip {
    /// 4 or 6.
    pub version: u8,
    /// Length of the IP header (20 for IPv4 without options, 40 for IPv6).
    pub header_len: usize,
}

impl Ip {
    /// Version and header length of an IPv4 or IPv6 packet, if its fixed
    /// header is complete.
    pub fn parse(pkt: &[u8]) -> Option<Ip> {
        match pkt.first()? >> 4 {
            4 if pkt.len() >= IPV4_HEADER_LEN => {
                let ihl = usize::from(pkt[0] & 0x0f) * 4;
                (ihl >= IPV4_HEADER_LEN && ihl <= pkt.len()).then_some(Ip {
                    version: 4,
                    header_len: ihl,
                })
            }
            6 if pkt.len() >= IPV6_HEADER_LEN => Some(Ip {
                version: 6,
                header_len: IPV6_HEADER_LEN,
            }),
            _ => None,
        }
    }

    /// Like [`Ip::parse`], for a packet of protocol `proto` whose transport
    /// header of at least `l4_len` bytes follows a plain IP header (no IPv4
    /// options or fragmentation, no IPv6 extension headers).
    pub fn parse_simple(pkt: &[u8], proto: u8, l4_len: usize) -> Option<Ip> {
        let ip = Ip::parse(pkt)?;
        let ok = match ip.version {
            4 => {
                let frag = be16(pkt, 6);
                ip.header_len == IPV4_HEADER_LEN && pkt[9] == proto && frag & 0x3fff == 0
            }
            _ => pkt[6] == proto,
        };
        (ok && pkt.len() >= ip.header_len + l4_len).then_some(ip)
    }

    /// The packet's length according to its IP header.
    pub fn total_len(&self, pkt: &[u8]) -> usize {
        match self.version {
            4 => usize::from(be16(pkt, 2)),
            _ => IPV6_HEADER_LEN + usize::from(be16(pkt, 4)),
        }
    }

    /// Set the length fields for a packet of `len` bytes; IPv4 also gets
    /// identification `ident` (if given) and a fresh header checksum.
    pub fn set_total_len(&self, pkt: &mut [u8], len: usize, ident: Option<u16>) {
        if self.version == 4 {
            put16(pkt, 2, len as u16);
            if let Some(id) = ident {
                put16(pkt, 4, id);
            }
            ipv4_fill_checksum(&mut pkt[..self.header_len]);
        } else {
            put16(pkt, 4, (len - IPV6_HEADER_LEN) as u16);
        }
    }

    /// IPv4 identification (0 for IPv6, which has none in its header).
    pub fn ident(&self, pkt: &[u8]) -> u16 {
        if self.version == 4 {
            be16(pkt, 4)
        } else {
            0
        }
    }

    /// Source and destination addresses as bytes.
    pub fn addresses<'a>(&self, pkt: &'a [u8]) -> (&'a [u8], &'a [u8]) {
        if self.version == 4 {
            (&pkt[12..16], &pkt[16..20])
        } else {
            (&pkt[8..24], &pkt[24..40])
        }
    }

    /// The DSCP/ECN byte (IPv4 TOS, IPv6 traffic class).
    pub fn traffic_class(&self, pkt: &[u8]) -> u8 {
        if self.version == 4 {
            pkt[1]
        } else {
            (pkt[0] << 4) | (pkt[1] >> 4)
        }
    }

    /// Whether two packets of this header shape may be merged into one
    /// super-packet: same addresses, and IPv4 TOS/TTL/DF or IPv6 traffic
    /// class, flow label and hop limit.
    pub fn same_flow_fields(&self, a: &[u8], b: &[u8]) -> bool {
        if self.version == 4 {
            a[1] == b[1] && a[6] & 0x40 == b[6] & 0x40 && a[8] == b[8] && a[12..20] == b[12..20]
        } else {
            a[0..4] == b[0..4] && a[7] == b[7] && a[8..40] == b[8..40]
        }
    }
}

/// IPv4 header checksum (RFC 791) over `iph`, with its field zeroed first.
pub fn ipv4_fill_checksum(iph: &mut [u8]) {
    iph[10] = 0;
    iph[11] = 0;
    let c = !checksum::fold(checksum::sum16(iph, 0));
    put16(iph, 10, c);
}

/// A TCP header view at offset `at` of a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tcp {
    pub at: usize,
    /// Header length including options.
    pub header_len: usize,
}

impl Tcp {
    /// The TCP header of `pkt` after an IP header of `ip`, if complete.
    pub fn parse(pkt: &[u8], ip: &Ip) -> Option<Tcp> {
        let at = ip.header_len;
        let header_len = usize::from(*pkt.get(at + 12)? >> 4) * 4;
        (header_len >= TCP_HEADER_LEN && pkt.len() >= at + header_len)
            .then_some(Tcp { at, header_len })
    }
    /// Offset of the payload.
    pub fn payload_at(&self) -> usize {
        self.at + self.header_len
    }
    pub fn seq(&self, pkt: &[u8]) -> u32 {
        be32(pkt, self.at + 4)
    }
    pub fn set_seq(&self, pkt: &mut [u8], seq: u32) {
        pkt[self.at + 4..self.at + 8].copy_from_slice(&seq.to_be_bytes());
    }
    pub fn flags(&self, pkt: &[u8]) -> u8 {
        pkt[self.at + 13]
    }
    pub fn set_flags(&self, pkt: &mut [u8], flags: u8) {
        pkt[self.at + 13] = flags;
    }
    /// Offset of the checksum field.
    pub fn checksum_at(&self) -> usize {
        self.at + 16
    }
    /// Whether two segments' headers agree on everything but sequence
    /// number, flags and checksum (ports, ack, offset, window, urgent
    /// pointer, options).
    pub fn same_flow_fields(&self, a: &[u8], b: &[u8]) -> bool {
        let t = self.at;
        a[t..t + 4] == b[t..t + 4]
            && a[t + 8..t + 13] == b[t + 8..t + 13]
            && a[t + 14..t + 16] == b[t + 14..t + 16]
            && a[t + 18..t + self.header_len] == b[t + 18..t + self.header_len]
    }
}

/// A UDP header view at offset `at` of a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Udp {
    pub at: usize,
}

impl Udp {
    /// The UDP header of `pkt` after an IP header of `ip`, if complete.
    pub fn parse(pkt: &[u8], ip: &Ip) -> Option<Udp> {
        (pkt.len() >= ip.header_len + UDP_HEADER_LEN).then_some(Udp { at: ip.header_len })
    }
    pub fn payload_at(&self) -> usize {
        self.at + UDP_HEADER_LEN
    }
    /// The length field (header and payload).
    pub fn len(&self, pkt: &[u8]) -> usize {
        usize::from(be16(pkt, self.at + 4))
    }
    pub fn set_len(&self, pkt: &mut [u8], len: usize) {
        put16(pkt, self.at + 4, len as u16);
    }
    pub fn checksum_at(&self) -> usize {
        self.at + 6
    }
    /// Whether two datagrams have the same ports.
    pub fn same_ports(&self, a: &[u8], b: &[u8]) -> bool {
        a[self.at..self.at + 4] == b[self.at..self.at + 4]
    }
}

/// The Internet checksum (RFC 1071) and the pseudo-headers of TCP and UDP
/// (RFC 9293 §3.1, RFC 768, RFC 8200 §8.1).
pub mod checksum {
    use super::Ip;

    /// One's-complement sum of 16-bit big-endian words, unfolded.
    ///
    /// Sums 64-bit native-endian words into two 128-bit accumulators (two
    /// add-with-carry chains side by side; no carry can be lost below 2^64
    /// words), folds to 16 bits and swaps to big-endian at the end: the
    /// one's-complement sum is byte-order independent and may be taken over
    /// any word size that is a multiple of 16 bits (RFC 1071 §2(B), (C)).
    /// `acc` is a big-endian partial sum, as returned.
    pub fn sum16(data: &[u8], acc: u64) -> u64 {
        let (mut a, mut b) = (0u128, 0u128);
        let mut pairs = data.chunks_exact(16);
        for w in &mut pairs {
            let (x, y) = w.split_at(8);
            a += u128::from(u64::from_ne_bytes(x.try_into().expect("8 bytes")));
            b += u128::from(u64::from_ne_bytes(y.try_into().expect("8 bytes")));
        }
        // Each folds below 2^34; the 32-bit words after them add below 2^2.
        let mut wide = quarters(a) + quarters(b);
        let mut words = pairs.remainder().chunks_exact(4);
        for w in &mut words {
            wide += u64::from(u32::from_ne_bytes([w[0], w[1], w[2], w[3]]));
        }
        let native = fold(wide);
        let mut be = u64::from(if cfg!(target_endian = "little") {
            native.swap_bytes()
        } else {
            native
        });
        let rest = words.remainder();
        let mut pairs = rest.chunks_exact(2);
        for c in &mut pairs {
            be += u64::from(u16::from_be_bytes([c[0], c[1]]));
        }
        if let [last] = pairs.remainder() {
            be += u64::from(*last) << 8;
        }
        acc + be
    }

    /// The sum of a 128-bit accumulator's four 32-bit quarters (the same
    /// one's-complement sum, below 2^34).
    fn quarters(x: u128) -> u64 {
        let m = u128::from(u32::MAX);
        ((x & m) + ((x >> 32) & m) + ((x >> 64) & m) + (x >> 96)) as u64
    }

    /// Reference for [`sum16`]: one 16-bit word at a time.
    pub fn sum16_reference(data: &[u8], mut acc: u64) -> u64 {
        let mut chunks = data.chunks_exact(2);
        for c in &mut chunks {
            acc += u64::from(u16::from_be_bytes([c[0], c[1]]));
        }
        if let [last] = chunks.remainder() {
            acc += u64::from(*last) << 8;
        }
        acc
    }

    /// Fold a sum to 16 bits.
    pub fn fold(mut s: u64) -> u16 {
        while s >> 16 != 0 {
            s = (s & 0xffff) + (s >> 16);
        }
        s as u16
    }

    /// Pseudo-header sum of `pkt` (whose IP header is `ip`) for protocol
    /// `proto` and a transport length of `l4_len`.
    pub fn pseudo(pkt: &[u8], ip: &Ip, proto: u8, l4_len: usize) -> u64 {
        let (src, dst) = ip.addresses(pkt);
        sum16(dst, sum16(src, u64::from(proto) + l4_len as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// IPv4/TCP test vector: 10.0.0.1:5201 → 10.0.0.2:40000, seq 7, ACK.
    const V4_TCP: [u8; 40] = [
        0x45, 0x00, 0x00, 0x28, 0x12, 0x34, 0x40, 0x00, 0x40, 0x06, 0x00, 0x00, 10, 0, 0, 1, 10, 0,
        0, 2, 0x14, 0x51, 0x9c, 0x40, 0, 0, 0, 7, 0, 0, 0, 9, 0x50, 0x10, 0x02, 0x00, 0, 0, 0, 0,
    ];

    #[test]
    fn views_read_the_vector() {
        let ip = Ip::parse_simple(&V4_TCP, PROTO_TCP, TCP_HEADER_LEN).unwrap();
        assert_eq!((ip.version, ip.header_len), (4, 20));
        assert_eq!(ip.total_len(&V4_TCP), 40);
        assert_eq!(ip.ident(&V4_TCP), 0x1234);
        let tcp = Tcp::parse(&V4_TCP, &ip).unwrap();
        assert_eq!((tcp.seq(&V4_TCP), tcp.flags(&V4_TCP)), (7, tcp_flags::ACK));
        assert_eq!(tcp.payload_at(), 40);
        assert!(
            Ip::parse_simple(&V4_TCP, PROTO_UDP, 8).is_none(),
            "wrong protocol"
        );
    }

    #[test]
    fn checksum_of_the_vector_verifies() {
        let mut p = V4_TCP;
        let ip = Ip::parse(&p).unwrap();
        ip.set_total_len(&mut p, 40, None);
        assert_eq!(checksum::fold(checksum::sum16(&p[..20], 0)), 0xffff);
    }

    #[test]
    fn options_fragments_and_short_input_are_refused() {
        let mut p = V4_TCP;
        p[0] = 0x46; // options
        assert!(Ip::parse_simple(&p, PROTO_TCP, 20).is_none());
        let mut p = V4_TCP;
        p[6] = 0x20; // more fragments
        assert!(Ip::parse_simple(&p, PROTO_TCP, 20).is_none());
        for n in 0..V4_TCP.len() {
            if let Some(ip) = Ip::parse(&V4_TCP[..n]) {
                let _ = Tcp::parse(&V4_TCP[..n], &ip);
            }
        }
        assert!(Ip::parse(&[0x60; 39]).is_none());
    }

    #[test]
    fn fast_checksum_matches_the_word_by_word_reference() {
        // Deterministic xorshift bytes; every length from 0 to 300 plus MTU
        // sizes, every alignment of the start, and a non-zero carried-in sum.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let data: Vec<u8> = (0..65_540)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let lens = (0..300).chain([1399, 1400, 1448, 1500, 1599, 11_440, 65_535]);
        for len in lens {
            for start in 0..4 {
                let d = &data[start..start + len];
                for acc in [0u64, 6, 0x1_fffe] {
                    assert_eq!(
                        checksum::fold(checksum::sum16(d, acc)),
                        checksum::fold(checksum::sum16_reference(d, acc)),
                        "len {len} start {start} acc {acc}"
                    );
                }
            }
        }
        let ones = vec![0xffu8; 1500];
        assert_eq!(
            checksum::fold(checksum::sum16(&ones, 0)),
            checksum::fold(checksum::sum16_reference(&ones, 0))
        );
    }
}
