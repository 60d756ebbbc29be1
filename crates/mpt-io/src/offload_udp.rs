//! UDP offloads on the TUN: segmentation of UDP super-packets read from it
//! (USO, `VIRTIO_NET_HDR_GSO_UDP_L4`, sent by applications that use
//! `UDP_SEGMENT`) and coalescing of consecutive datagrams of one UDP flow
//! into one super-packet on the way back, as Linux UDP GRO does for
//! forwarded traffic (the receiving kernel cuts it again at the socket).
//!
//! A UDP super-packet is one IP header, one UDP header and a payload of
//! whole `gso_size` pieces plus possibly a shorter last one; each piece is
//! one datagram with the same addresses and ports (RFC 768 lengths and
//! checksums, computed per datagram; a zero checksum is sent as 0xffff).
//! The super-packet's UDP length covers the whole payload and its checksum
//! field holds the pseudo-header sum over that length (`NEEDS_CSUM`), the
//! form the kernel produces and expects.
//!
//! Invariants: pure byte manipulation, lengths checked before indexing;
//! anything not understood (IPv4 options, IPv6 extension headers,
//! fragments, a UDP length that disagrees with the IP length) is refused
//! and travels unmodified or is counted as an offload error.

use super::offload::{
    fold, ip_header_len, ipv4_checksum, pseudo_for, same_ip_fields, sum16, OffloadError, VnetHdr,
    GSO_NONE, GSO_UDP_L4, MAX_SUPER_PACKET, VIRTIO_NET_HDR_F_NEEDS_CSUM, VNET_HDR_LEN,
};

const UDP: u8 = 17;
const UDP_HDR: usize = 8;
/// Most datagrams merged into one super-packet (the kernel's UDP GSO limit).
pub const MAX_SEGMENTS: usize = 64;

/// IP length field value check: total length of the packet per its header.
fn ip_total(pkt: &[u8], iph: usize) -> usize {
    if iph == 20 {
        usize::from(u16::from_be_bytes([pkt[2], pkt[3]]))
    } else {
        40 + usize::from(u16::from_be_bytes([pkt[4], pkt[5]]))
    }
}

/// Set the IP length fields of a packet of `len` bytes (IPv4 also gets its
/// identification `id` and header checksum).
fn set_ip_len(out: &mut [u8], iph: usize, len: usize, id: Option<u16>) {
    if iph == 20 {
        out[2..4].copy_from_slice(&(len as u16).to_be_bytes());
        if let Some(id) = id {
            out[4..6].copy_from_slice(&id.to_be_bytes());
        }
        ipv4_checksum(&mut out[..20]);
    } else {
        out[4..6].copy_from_slice(&((len - 40) as u16).to_be_bytes());
    }
}

/// Geometry of a UDP super-packet: (IP header length, segment payload
/// size, number of segments).
pub fn segments(pkt: &[u8], h: &VnetHdr) -> Result<(usize, usize, usize), OffloadError> {
    let iph = ip_header_len(pkt, UDP, UDP_HDR).ok_or(OffloadError::Unsupported)?;
    let size = usize::from(h.gso_size);
    let payload = pkt.len() - iph - UDP_HDR;
    if size == 0 || payload == 0 || ip_total(pkt, iph) != pkt.len() {
        return Err(OffloadError::Malformed);
    }
    Ok((iph, size, payload.div_ceil(size)))
}

/// Build datagram `i` of a UDP super-packet into `out`; returns its length.
pub fn segment_at(
    pkt: &[u8],
    h: &VnetHdr,
    i: usize,
    out: &mut [u8],
) -> Result<usize, OffloadError> {
    let (iph, size, n) = segments(pkt, h)?;
    if i >= n {
        return Err(OffloadError::Malformed);
    }
    let hdrs = iph + UDP_HDR;
    let start = hdrs + i * size;
    let chunk = &pkt[start..(start + size).min(pkt.len())];
    let len = hdrs + chunk.len();
    if out.len() < len {
        return Err(OffloadError::Malformed);
    }
    out[..hdrs].copy_from_slice(&pkt[..hdrs]);
    out[hdrs..len].copy_from_slice(chunk);
    let id0 = u16::from_be_bytes([pkt[4], pkt[5]]);
    set_ip_len(
        out,
        iph,
        len,
        (iph == 20).then(|| id0.wrapping_add(i as u16)),
    );
    let udp_len = len - iph;
    out[iph + 4..iph + 6].copy_from_slice(&(udp_len as u16).to_be_bytes());
    out[iph + 6] = 0;
    out[iph + 7] = 0;
    let mut c = !fold(sum16(&out[iph..len], pseudo_for(out, UDP, udp_len)));
    if c == 0 {
        c = 0xffff;
    }
    out[iph + 6..iph + 8].copy_from_slice(&c.to_be_bytes());
    Ok(len)
}

/// Merges consecutive datagrams of one UDP flow (equal sizes, the last may
/// be shorter) into one super-packet with a virtio header.
pub struct UdpCoalescer {
    /// virtio header, then the IP packet being built.
    buf: Vec<u8>,
    len: usize,
    segs: usize,
    iph: usize,
    gso_size: usize,
    closed: bool,
}

impl Default for UdpCoalescer {
    fn default() -> Self {
        Self {
            buf: vec![0u8; VNET_HDR_LEN + MAX_SUPER_PACKET],
            len: 0,
            segs: 0,
            iph: 0,
            gso_size: 0,
            closed: false,
        }
    }
}

/// Whether `pkt` is a UDP datagram we may coalesce; its IP header length.
pub fn candidate(pkt: &[u8]) -> Option<usize> {
    let iph = ip_header_len(pkt, UDP, UDP_HDR)?;
    let udp_len = usize::from(u16::from_be_bytes([pkt[iph + 4], pkt[iph + 5]]));
    let ok = ip_total(pkt, iph) == pkt.len() && udp_len == pkt.len() - iph && udp_len > UDP_HDR;
    ok.then_some(iph)
}

impl UdpCoalescer {
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Add `pkt`. `false`: it cannot join (flush with [`Self::take`] and
    /// call again) or cannot be coalesced at all (write it as is).
    pub fn push(&mut self, pkt: &[u8]) -> bool {
        if pkt.len() > MAX_SUPER_PACKET {
            return false;
        }
        let Some(iph) = candidate(pkt) else {
            return false;
        };
        let payload = pkt.len() - iph - UDP_HDR;
        if self.len == 0 {
            self.buf[VNET_HDR_LEN..VNET_HDR_LEN + pkt.len()].copy_from_slice(pkt);
            (self.len, self.segs, self.iph, self.gso_size) = (pkt.len(), 1, iph, payload);
            self.closed = false;
            return true;
        }
        let cur = &self.buf[VNET_HDR_LEN..VNET_HDR_LEN + self.len];
        let joins = iph == self.iph
            && !self.closed
            && same_ip_fields(cur, pkt, iph)
            && cur[iph..iph + 4] == pkt[iph..iph + 4]
            && payload <= self.gso_size
            && self.segs < MAX_SEGMENTS
            && self.len + payload <= MAX_SUPER_PACKET;
        if !joins {
            return false;
        }
        let at = VNET_HDR_LEN + self.len;
        self.buf[at..at + payload].copy_from_slice(&pkt[iph + UDP_HDR..]);
        self.len += payload;
        self.segs += 1;
        self.closed = payload < self.gso_size;
        true
    }

    /// The pending packet with its virtio header, ready to write; empties
    /// the coalescer. `None` when empty.
    pub fn take(&mut self) -> Option<&[u8]> {
        if self.len == 0 {
            return None;
        }
        let (len, iph) = (self.len, self.iph);
        self.len = 0;
        let mut h = VnetHdr::default();
        if self.segs > 1 {
            let pkt = &mut self.buf[VNET_HDR_LEN..VNET_HDR_LEN + len];
            set_ip_len(pkt, iph, len, None);
            let udp_len = len - iph;
            pkt[iph + 4..iph + 6].copy_from_slice(&(udp_len as u16).to_be_bytes());
            let p = fold(pseudo_for(pkt, UDP, udp_len));
            pkt[iph + 6..iph + 8].copy_from_slice(&p.to_be_bytes());
            h = VnetHdr {
                flags: VIRTIO_NET_HDR_F_NEEDS_CSUM,
                gso_type: GSO_UDP_L4,
                hdr_len: (iph + UDP_HDR) as u16,
                gso_size: self.gso_size as u16,
                csum_start: iph as u16,
                csum_offset: 6,
            };
        } else {
            h.gso_type = GSO_NONE;
        }
        h.write(&mut self.buf[..VNET_HDR_LEN]);
        Some(&self.buf[..VNET_HDR_LEN + len])
    }
}

#[cfg(test)]
#[path = "offload_udp_tests.rs"]
mod tests;
