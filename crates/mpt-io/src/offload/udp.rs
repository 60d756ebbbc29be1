//! UDP offloads: cutting a USO super-packet (`VIRTIO_NET_HDR_GSO_UDP_L4`,
//! sent by applications that use `UDP_SEGMENT`) into datagrams, and the UDP
//! rules of coalescing consecutive datagrams of one flow, as Linux UDP GRO
//! does for forwarded traffic (the receiving kernel cuts it again at the
//! socket).
//!
//! A UDP super-packet is one IP header, one UDP header and a payload of
//! whole `gso_size` pieces plus possibly a shorter last one; each piece is
//! one datagram with the same addresses and ports (RFC 768 lengths and
//! checksums, computed per datagram; a zero checksum is sent as 0xffff).
//! The super-packet's UDP length covers the whole payload and its checksum
//! field holds the pseudo-header sum over that length (`NEEDS_CSUM`), the
//! form the kernel produces and expects.
//!
//! Invariants: see `offload/mod.rs`; a UDP length that disagrees with the
//! IP length is refused.

use mpt_core::ip::checksum::{fold, pseudo, sum16};
use mpt_core::ip::{Ip, Udp, PROTO_UDP, UDP_HEADER_LEN};

use super::{cut, finish_super, Flow, Geometry, Head, OffloadError, VnetHdr, GSO_UDP_L4};

/// Geometry of a UDP super-packet.
pub fn segments(pkt: &[u8], h: &VnetHdr) -> Result<Geometry, OffloadError> {
    let ip = Ip::parse_simple(pkt, PROTO_UDP, UDP_HEADER_LEN).ok_or(OffloadError::Unsupported)?;
    let headers = ip.header_len + UDP_HEADER_LEN;
    let size = usize::from(h.gso_size);
    let payload = pkt.len() - headers;
    if size == 0 || payload == 0 || ip.total_len(pkt) != pkt.len() {
        return Err(OffloadError::Malformed);
    }
    Ok(Geometry {
        head: Head { ip, headers },
        segment: size,
        count: payload.div_ceil(size),
    })
}

/// Build datagram `i` of a UDP super-packet into `out`; returns its length.
pub fn segment_at(
    pkt: &[u8],
    h: &VnetHdr,
    i: usize,
    out: &mut [u8],
) -> Result<usize, OffloadError> {
    let g = segments(pkt, h)?;
    let len = cut(pkt, &g, i, out)?;
    let ip = g.head.ip;
    let id = ip.ident(pkt).wrapping_add(i as u16);
    ip.set_total_len(out, len, (ip.version == 4).then_some(id));
    let udp = Udp { at: ip.header_len };
    let l4 = len - ip.header_len;
    udp.set_len(out, l4);
    let at = udp.checksum_at();
    out[at..at + 2].fill(0);
    let mut c = !fold(sum16(
        &out[ip.header_len..len],
        pseudo(out, &ip, PROTO_UDP, l4),
    ));
    if c == 0 {
        c = 0xffff;
    }
    out[at..at + 2].copy_from_slice(&c.to_be_bytes());
    Ok(len)
}

/// Whether `pkt` is a UDP datagram the coalescer may take.
pub fn is_candidate(pkt: &[u8]) -> bool {
    UdpFlow::candidate(pkt).is_some()
}

/// UDP's coalescing rules (no state: equal ports are enough).
#[derive(Debug, Default)]
pub struct UdpFlow;

impl Flow for UdpFlow {
    fn candidate(pkt: &[u8]) -> Option<Head> {
        let ip = Ip::parse_simple(pkt, PROTO_UDP, UDP_HEADER_LEN)?;
        let udp = Udp::parse(pkt, &ip)?;
        let l4 = udp.len(pkt);
        let ok = ip.total_len(pkt) == pkt.len()
            && l4 == pkt.len() - ip.header_len
            && l4 > UDP_HEADER_LEN;
        ok.then_some(Head {
            ip,
            headers: udp.payload_at(),
        })
    }

    fn continues(&self, first: &[u8], pkt: &[u8], head: &Head) -> bool {
        Udp {
            at: head.ip.header_len,
        }
        .same_ports(first, pkt)
    }

    fn accept(&mut self, _first: &mut [u8], _pkt: &[u8], _head: &Head) -> bool {
        false
    }

    fn finish(pkt: &mut [u8], head: &Head, gso_size: usize) -> VnetHdr {
        let udp = Udp {
            at: head.ip.header_len,
        };
        udp.set_len(pkt, pkt.len() - head.ip.header_len);
        finish_super(pkt, head, PROTO_UDP, 6, GSO_UDP_L4, gso_size)
    }
}

#[cfg(test)]
#[path = "udp_tests.rs"]
mod tests;
