//! TCP offloads: cutting a TSO super-packet into segments as a NIC would
//! (RFC 9293 sequence numbers, FIN/PSH only on the last segment, CWR only
//! on the first, IPv4 identification incremented per segment, full
//! checksums), and the TCP rules of coalescing (Linux GRO): only pure ACK
//! or ACK+PSH data segments, in sequence, with equal headers apart from
//! sequence number, flags and checksum; a PSH or short segment ends the
//! super-packet and its PSH is carried on it.
//!
//! Invariants: see `offload/mod.rs`.

use mpt_core::ip::checksum::{fold, pseudo, sum16};
use mpt_core::ip::{tcp_flags, Ip, Tcp, PROTO_TCP, TCP_HEADER_LEN};

use super::{cut, finish_super, Flow, Geometry, Head, OffloadError, VnetHdr, GSO_TCPV4, GSO_TCPV6};

/// The IP and TCP headers of a packet we can segment or coalesce.
fn parse(pkt: &[u8]) -> Option<(Ip, Tcp)> {
    let ip = Ip::parse_simple(pkt, PROTO_TCP, TCP_HEADER_LEN)?;
    Some((ip, Tcp::parse(pkt, &ip)?))
}

/// Geometry of a TCP super-packet.
pub fn segments(pkt: &[u8], h: &VnetHdr) -> Result<Geometry, OffloadError> {
    let ip = Ip::parse_simple(pkt, PROTO_TCP, TCP_HEADER_LEN).ok_or(OffloadError::Unsupported)?;
    if usize::from(h.csum_start) != ip.header_len {
        return Err(OffloadError::Unsupported);
    }
    let tcp = Tcp::parse(pkt, &ip).ok_or(OffloadError::Malformed)?;
    let headers = tcp.payload_at();
    let mss = usize::from(h.gso_size);
    if pkt.len() <= headers || mss == 0 {
        return Err(OffloadError::Malformed);
    }
    Ok(Geometry {
        head: Head { ip, headers },
        segment: mss,
        count: (pkt.len() - headers).div_ceil(mss),
    })
}

/// Build segment `i` of a TCP super-packet into `out`; returns its length.
pub fn segment_at(
    pkt: &[u8],
    h: &VnetHdr,
    i: usize,
    out: &mut [u8],
) -> Result<usize, OffloadError> {
    let g = segments(pkt, h)?;
    let len = cut(pkt, &g, i, out)?;
    let ip = g.head.ip;
    let tcp = Tcp::parse(pkt, &ip).ok_or(OffloadError::Malformed)?;
    let id = ip.ident(pkt).wrapping_add(i as u16);
    ip.set_total_len(out, len, (ip.version == 4).then_some(id));
    let seq = tcp.seq(pkt).wrapping_add((i * g.segment) as u32);
    tcp.set_seq(out, seq);
    let mut fl = tcp.flags(pkt);
    if i + 1 < g.count {
        fl &= !(tcp_flags::FIN | tcp_flags::PSH);
    }
    if i > 0 {
        fl &= !tcp_flags::CWR;
    }
    tcp.set_flags(out, fl);
    let at = tcp.checksum_at();
    out[at..at + 2].fill(0);
    let l4 = len - ip.header_len;
    let c = !fold(sum16(
        &out[ip.header_len..len],
        pseudo(out, &ip, PROTO_TCP, l4),
    ));
    out[at..at + 2].copy_from_slice(&c.to_be_bytes());
    Ok(len)
}

/// Cut a TCP super-packet into segments, each built in `out` and passed to
/// `f`. Returns the number of segments.
pub fn segment(
    pkt: &[u8],
    h: &VnetHdr,
    out: &mut [u8],
    mut f: impl FnMut(&mut [u8]),
) -> Result<usize, OffloadError> {
    let n = segments(pkt, h)?.count;
    for i in 0..n {
        let len = segment_at(pkt, h, i, out)?;
        f(&mut out[..len]);
    }
    Ok(n)
}

/// TCP's coalescing rules; the state is the next expected sequence number.
#[derive(Debug, Default)]
pub struct TcpFlow {
    next_seq: u32,
}

impl Flow for TcpFlow {
    fn candidate(pkt: &[u8]) -> Option<Head> {
        let (ip, tcp) = parse(pkt)?;
        let headers = tcp.payload_at();
        let flags = tcp.flags(pkt);
        let ok = ip.total_len(pkt) == pkt.len()
            && pkt.len() > headers
            && flags & !tcp_flags::PSH == tcp_flags::ACK;
        ok.then_some(Head { ip, headers })
    }

    fn continues(&self, first: &[u8], pkt: &[u8], head: &Head) -> bool {
        let tcp = Tcp {
            at: head.ip.header_len,
            header_len: head.headers - head.ip.header_len,
        };
        tcp.same_flow_fields(first, pkt) && tcp.seq(pkt) == self.next_seq
    }

    fn accept(&mut self, first: &mut [u8], pkt: &[u8], head: &Head) -> bool {
        let tcp = Tcp {
            at: head.ip.header_len,
            header_len: head.headers - head.ip.header_len,
        };
        let payload = pkt.len() - head.headers;
        self.next_seq = tcp.seq(pkt).wrapping_add(payload as u32);
        let psh = tcp.flags(pkt) & tcp_flags::PSH;
        if psh != 0 {
            tcp.set_flags(first, tcp.flags(first) | psh);
        }
        psh != 0
    }

    fn finish(pkt: &mut [u8], head: &Head, gso_size: usize) -> VnetHdr {
        let gso_type = if head.ip.version == 4 {
            GSO_TCPV4
        } else {
            GSO_TCPV6
        };
        finish_super(pkt, head, PROTO_TCP, 16, gso_type, gso_size)
    }
}

#[cfg(test)]
#[path = "tcp_tests.rs"]
pub(crate) mod tests;
