//! TUN offloads: TCP segmentation of super-packets read from the TUN (TSO)
//! and coalescing of in-order TCP segments written to it (GRO).
//!
//! With `IFF_VNET_HDR` every TUN read and write carries a 10-byte
//! `virtio_net_hdr` (include/uapi/linux/virtio_net.h). After
//! `TUNSETOFFLOAD(TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6)` the kernel hands us
//! TCP packets of up to 64 KiB with a partial checksum; [`segment`] cuts
//! them into MSS-sized packets with full checksums, as a NIC would
//! (RFC 9293 sequence numbers, FIN/PSH only on the last segment, CWR only
//! on the first, IPv4 identification incremented per segment). In the other
//! direction, [`Coalescer`] merges consecutive segments of one TCP flow into
//! one super-packet with a GSO header, as Linux GRO does, so the receiving
//! kernel handles one packet instead of dozens.
//!
//! UDP (USO on read, coalescing on write) lives in `offload_udp.rs`.
//!
//! Invariants: pure byte manipulation, no I/O; every function checks
//! lengths before indexing and refuses (returns an error or `false`)
//! anything it does not fully understand (IPv4 options, IPv6 extension
//! headers, fragments), which then travels unmodified.

/// Length of `struct virtio_net_hdr`.
pub const VNET_HDR_LEN: usize = 10;
pub const VIRTIO_NET_HDR_F_NEEDS_CSUM: u8 = 1;
pub const GSO_NONE: u8 = 0;
pub const GSO_TCPV4: u8 = 1;
pub const GSO_TCPV6: u8 = 4;
/// `VIRTIO_NET_HDR_GSO_UDP_L4`: UDP segmentation (USO), Linux ≥ 6.2 on TUN.
pub const GSO_UDP_L4: u8 = 5;
/// Largest IP packet the TUN accepts with a GSO header.
pub const MAX_SUPER_PACKET: usize = 65_535;

const TCP_FIN: u8 = 0x01;
const TCP_PSH: u8 = 0x08;
const TCP_ACK: u8 = 0x10;
const TCP_CWR: u8 = 0x80;

/// The virtio-net header (little-endian fields, as the kernel's TUN uses on
/// little-endian hosts without TUNSETVNETBE).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VnetHdr {
    pub flags: u8,
    pub gso_type: u8,
    pub hdr_len: u16,
    pub gso_size: u16,
    pub csum_start: u16,
    pub csum_offset: u16,
}

impl VnetHdr {
    pub fn parse(b: &[u8]) -> Option<Self> {
        if b.len() < VNET_HDR_LEN {
            return None;
        }
        let u = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
        Some(Self {
            flags: b[0],
            gso_type: b[1],
            hdr_len: u(2),
            gso_size: u(4),
            csum_start: u(6),
            csum_offset: u(8),
        })
    }

    pub fn write(&self, b: &mut [u8]) {
        b[0] = self.flags;
        b[1] = self.gso_type;
        b[2..4].copy_from_slice(&self.hdr_len.to_le_bytes());
        b[4..6].copy_from_slice(&self.gso_size.to_le_bytes());
        b[6..8].copy_from_slice(&self.csum_start.to_le_bytes());
        b[8..10].copy_from_slice(&self.csum_offset.to_le_bytes());
    }
}

/// Why a super-packet could not be handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffloadError {
    Malformed,
    Unsupported,
}

/// One's-complement sum of 16-bit big-endian words (RFC 1071), unfolded.
///
/// Sums 32-bit native-endian words into a 64-bit accumulator (no carry can
/// be lost below 2^32 words), folds to 16 bits and swaps to big-endian at
/// the end: the one's-complement sum is byte-order independent (RFC 1071
/// §2(B)). `acc` is a big-endian partial sum, as returned.
pub fn sum16(data: &[u8], acc: u64) -> u64 {
    let mut wide = 0u64;
    let mut words = data.chunks_exact(4);
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

/// Reference for [`sum16`]: one 16-bit word at a time.
#[cfg(test)]
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

pub fn fold(mut s: u64) -> u16 {
    while s >> 16 != 0 {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

/// Pseudo-header sum for TCP over the packet's IP version (RFC 9293 §3.1,
/// RFC 8200 §8.1).
fn pseudo(pkt: &[u8], l4_len: usize) -> u64 {
    pseudo_for(pkt, 6, l4_len)
}

/// Pseudo-header sum for protocol `proto` (6 TCP, 17 UDP).
pub(crate) fn pseudo_for(pkt: &[u8], proto: u8, l4_len: usize) -> u64 {
    let (src, dst) = if pkt[0] >> 4 == 4 {
        (&pkt[12..16], &pkt[16..20])
    } else {
        (&pkt[8..24], &pkt[24..40])
    };
    sum16(dst, sum16(src, u64::from(proto) + l4_len as u64))
}

/// IPv4 header checksum (RFC 791) over `iph`, with its field zeroed first.
pub(crate) fn ipv4_checksum(iph: &mut [u8]) {
    iph[10] = 0;
    iph[11] = 0;
    let c = !fold(sum16(iph, 0));
    iph[10..12].copy_from_slice(&c.to_be_bytes());
}

/// Complete a partial checksum (`NEEDS_CSUM` without GSO): the field at
/// `csum_start + csum_offset` holds the pseudo-header sum.
pub fn finish_checksum(pkt: &mut [u8], h: &VnetHdr) -> Result<(), OffloadError> {
    let start = usize::from(h.csum_start);
    let field = start + usize::from(h.csum_offset);
    if field + 2 > pkt.len() {
        return Err(OffloadError::Malformed);
    }
    let c = !fold(sum16(&pkt[start..], 0));
    pkt[field..field + 2].copy_from_slice(&c.to_be_bytes());
    Ok(())
}

/// IP header length of a TCP packet we can segment or coalesce, or `None`.
fn tcp_ip_header_len(pkt: &[u8]) -> Option<usize> {
    ip_header_len(pkt, 6, 20)
}

/// IP header length of a packet of protocol `proto` with at least `l4`
/// bytes after the IP header, without IPv4 options, IPv6 extension headers
/// or fragmentation; `None` otherwise.
pub(crate) fn ip_header_len(pkt: &[u8], proto: u8, l4: usize) -> Option<usize> {
    match pkt.first()? >> 4 {
        4 if pkt.len() >= 20 + l4 => {
            let ihl = usize::from(pkt[0] & 0x0f) * 4;
            let frag = u16::from_be_bytes([pkt[6], pkt[7]]);
            (ihl == 20 && pkt[9] == proto && frag & 0x3fff == 0).then_some(20)
        }
        6 if pkt.len() >= 40 + l4 => (pkt[6] == proto).then_some(40),
        _ => None,
    }
}

/// Geometry of a TCP super-packet: (IP header length, all headers length,
/// segment payload size, number of segments).
pub fn segments(pkt: &[u8], h: &VnetHdr) -> Result<(usize, usize, usize, usize), OffloadError> {
    let iph = tcp_ip_header_len(pkt).ok_or(OffloadError::Unsupported)?;
    if usize::from(h.csum_start) != iph || pkt.len() < iph + 20 {
        return Err(OffloadError::Unsupported);
    }
    let tcph = usize::from(pkt[iph + 12] >> 4) * 4;
    let hdrs = iph + tcph;
    let mss = usize::from(h.gso_size);
    if tcph < 20 || pkt.len() <= hdrs || mss == 0 {
        return Err(OffloadError::Malformed);
    }
    Ok((iph, hdrs, mss, (pkt.len() - hdrs).div_ceil(mss)))
}

/// Build segment `i` of a TCP super-packet into `out`; returns its length.
pub fn segment_at(
    pkt: &[u8],
    h: &VnetHdr,
    i: usize,
    out: &mut [u8],
) -> Result<usize, OffloadError> {
    let (iph, hdrs, mss, n) = segments(pkt, h)?;
    if i >= n {
        return Err(OffloadError::Malformed);
    }
    let start = hdrs + i * mss;
    let chunk = &pkt[start..(start + mss).min(pkt.len())];
    let len = hdrs + chunk.len();
    if out.len() < len {
        return Err(OffloadError::Malformed);
    }
    out[..hdrs].copy_from_slice(&pkt[..hdrs]);
    out[hdrs..len].copy_from_slice(chunk);
    if iph == 20 {
        let id0 = u16::from_be_bytes([pkt[4], pkt[5]]);
        out[2..4].copy_from_slice(&(len as u16).to_be_bytes());
        out[4..6].copy_from_slice(&id0.wrapping_add(i as u16).to_be_bytes());
        ipv4_checksum(&mut out[..20]);
    } else {
        out[4..6].copy_from_slice(&((len - 40) as u16).to_be_bytes());
    }
    let seq0 = u32::from_be_bytes([pkt[iph + 4], pkt[iph + 5], pkt[iph + 6], pkt[iph + 7]]);
    out[iph + 4..iph + 8].copy_from_slice(&seq0.wrapping_add((i * mss) as u32).to_be_bytes());
    let mut fl = pkt[iph + 13];
    if i + 1 < n {
        fl &= !(TCP_FIN | TCP_PSH);
    }
    if i > 0 {
        fl &= !TCP_CWR;
    }
    out[iph + 13] = fl;
    out[iph + 16] = 0;
    out[iph + 17] = 0;
    let c = !fold(sum16(&out[iph..len], pseudo(out, len - iph)));
    out[iph + 16..iph + 18].copy_from_slice(&c.to_be_bytes());
    Ok(len)
}

/// Cut a TCP super-packet (`h.gso_type` TCPV4/TCPV6) into segments of
/// `h.gso_size` payload bytes, each built in `out` and passed to `f`.
/// Returns the number of segments.
pub fn segment(
    pkt: &[u8],
    h: &VnetHdr,
    out: &mut [u8],
    mut f: impl FnMut(&mut [u8]),
) -> Result<usize, OffloadError> {
    let (_, _, _, n) = segments(pkt, h)?;
    for i in 0..n {
        let len = segment_at(pkt, h, i, out)?;
        f(&mut out[..len]);
    }
    Ok(n)
}

/// Coalesces consecutive in-order segments of one TCP flow into a GSO
/// super-packet for the TUN (write side). The buffer starts with room for
/// the virtio header.
pub struct Coalescer {
    buf: Vec<u8>,
    /// Bytes of IP packet in `buf[VNET_HDR_LEN..]`; 0 when empty.
    len: usize,
    segs: usize,
    iph: usize,
    hdrs: usize,
    gso_size: usize,
    next_seq: u32,
    closed: bool,
}

impl Default for Coalescer {
    fn default() -> Self {
        Self {
            buf: vec![0u8; VNET_HDR_LEN + MAX_SUPER_PACKET],
            len: 0,
            segs: 0,
            iph: 0,
            hdrs: 0,
            gso_size: 0,
            next_seq: 0,
            closed: false,
        }
    }
}

/// Whether `pkt` is a TCP data segment we may coalesce: pure ACK or
/// ACK+PSH with payload; returns (IP header length, all headers length).
fn candidate(pkt: &[u8]) -> Option<(usize, usize)> {
    let iph = tcp_ip_header_len(pkt)?;
    let tcph = usize::from(*pkt.get(iph + 12)? >> 4) * 4;
    let hdrs = iph + tcph;
    let flags = *pkt.get(iph + 13)?;
    let total = if iph == 20 {
        usize::from(u16::from_be_bytes([pkt[2], pkt[3]]))
    } else {
        40 + usize::from(u16::from_be_bytes([pkt[4], pkt[5]]))
    };
    let ok = tcph >= 20 && total == pkt.len() && pkt.len() > hdrs && flags & !TCP_PSH == TCP_ACK;
    ok.then_some((iph, hdrs))
}

impl Coalescer {
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Add `pkt`. Returns `false` if it cannot join the pending super-packet
    /// (the caller then flushes with [`Coalescer::take`] and calls again)
    /// or cannot be coalesced at all (empty coalescer: write it as is).
    pub fn push(&mut self, pkt: &[u8]) -> bool {
        if pkt.len() > MAX_SUPER_PACKET {
            return false;
        }
        let Some((iph, hdrs)) = candidate(pkt) else {
            return false;
        };
        let seq = u32::from_be_bytes([pkt[iph + 4], pkt[iph + 5], pkt[iph + 6], pkt[iph + 7]]);
        let payload = pkt.len() - hdrs;
        if self.len == 0 {
            self.buf[VNET_HDR_LEN..VNET_HDR_LEN + pkt.len()].copy_from_slice(pkt);
            (self.len, self.segs, self.iph, self.hdrs, self.gso_size) =
                (pkt.len(), 1, iph, hdrs, payload);
            self.next_seq = seq.wrapping_add(payload as u32);
            self.closed = pkt[iph + 13] & TCP_PSH != 0;
            return true;
        }
        let cur = &self.buf[VNET_HDR_LEN..VNET_HDR_LEN + self.len];
        let same_flow = iph == self.iph
            && hdrs == self.hdrs
            && same_ip_fields(cur, pkt, iph)
            // Ports, ack, data offset, window, urgent pointer and options equal.
            && cur[iph..iph + 4] == pkt[iph..iph + 4]
            && cur[iph + 8..iph + 13] == pkt[iph + 8..iph + 13]
            && cur[iph + 14..iph + 16] == pkt[iph + 14..iph + 16]
            && cur[iph + 18..hdrs] == pkt[iph + 18..hdrs];
        let fits = !self.closed
            && seq == self.next_seq
            && payload <= self.gso_size
            && self.len + payload <= MAX_SUPER_PACKET - VNET_HDR_LEN;
        if !(same_flow && fits) {
            return false;
        }
        let at = VNET_HDR_LEN + self.len;
        self.buf[at..at + payload].copy_from_slice(&pkt[hdrs..]);
        self.len += payload;
        self.segs += 1;
        self.next_seq = seq.wrapping_add(payload as u32);
        if payload < self.gso_size || pkt[iph + 13] & TCP_PSH != 0 {
            // A short or PSH segment ends the super-packet (as Linux GRO).
            self.closed = true;
            self.buf[VNET_HDR_LEN + iph + 13] |= pkt[iph + 13] & TCP_PSH;
        }
        true
    }

    /// The pending packet with its virtio header, ready to write; empties
    /// the coalescer. `None` when empty.
    pub fn take(&mut self) -> Option<&[u8]> {
        if self.len == 0 {
            return None;
        }
        let len = self.len;
        self.len = 0;
        let (iph, hdrs) = (self.iph, self.hdrs);
        let mut h = VnetHdr::default();
        if self.segs > 1 {
            let pkt = &mut self.buf[VNET_HDR_LEN..VNET_HDR_LEN + len];
            if iph == 20 {
                pkt[2..4].copy_from_slice(&(len as u16).to_be_bytes());
                ipv4_checksum(&mut pkt[..20]);
            } else {
                pkt[4..6].copy_from_slice(&((len - 40) as u16).to_be_bytes());
            }
            // Partial checksum: the field holds the folded pseudo-header sum.
            let p = fold(pseudo(pkt, len - iph));
            pkt[iph + 16..iph + 18].copy_from_slice(&p.to_be_bytes());
            h = VnetHdr {
                flags: VIRTIO_NET_HDR_F_NEEDS_CSUM,
                gso_type: if iph == 20 { GSO_TCPV4 } else { GSO_TCPV6 },
                hdr_len: hdrs as u16,
                gso_size: self.gso_size as u16,
                csum_start: iph as u16,
                csum_offset: 16,
            };
        }
        h.write(&mut self.buf[..VNET_HDR_LEN]);
        Some(&self.buf[..VNET_HDR_LEN + len])
    }
}

/// IP fields that must match for coalescing: addresses, and IPv4
/// TOS/TTL/DF or IPv6 traffic class, flow label and hop limit.
pub(crate) fn same_ip_fields(a: &[u8], b: &[u8], iph: usize) -> bool {
    if iph == 20 {
        a[1] == b[1] && a[6] & 0x40 == b[6] & 0x40 && a[8] == b[8] && a[12..20] == b[12..20]
    } else {
        a[0..4] == b[0..4] && a[7] == b[7] && a[8..40] == b[8..40]
    }
}

#[cfg(test)]
#[path = "offload_tests.rs"]
pub(crate) mod tests;
