//! TUN offloads: segmentation of super-packets read from the TUN (TCP TSO,
//! UDP USO) and coalescing of packets written to it (GRO).
//!
//! With `IFF_VNET_HDR` every TUN read and write carries a 10-byte
//! `virtio_net_hdr` (include/uapi/linux/virtio_net.h). After
//! `TUNSETOFFLOAD` the kernel hands us TCP or UDP packets of up to 64 KiB
//! with a partial checksum, which [`segment_at`] cuts into MSS-sized
//! packets with full checksums, as a NIC would. In the other direction a
//! [`Coalescer`] merges consecutive packets of one flow into one
//! super-packet with a GSO header, as Linux GRO does, so the receiving
//! kernel handles one packet instead of dozens. The protocol-specific rules
//! live in `tcp.rs` and `udp.rs` behind the [`Flow`] trait; this file holds
//! the virtio header, the geometry of a super-packet and the one coalescer
//! skeleton both share. Headers are read and written through the views of
//! [`mpt_core::ip`].
//!
//! Invariants: pure byte manipulation, no I/O; every function checks
//! lengths before indexing and refuses (returns an error or `false`)
//! anything it does not fully understand (IPv4 options, IPv6 extension
//! headers, fragments), which then travels unmodified; a coalesced packet
//! never exceeds [`MAX_SUPER_PACKET`] bytes or [`MAX_SEGMENTS`] segments.

use mpt_core::ip::checksum::{fold, pseudo, sum16};
use mpt_core::ip::Ip;

pub mod tcp;
pub mod udp;

pub use tcp::TcpFlow;
pub use udp::UdpFlow;

/// Length of `struct virtio_net_hdr`.
pub const VNET_HDR_LEN: usize = 10;
pub const VIRTIO_NET_HDR_F_NEEDS_CSUM: u8 = 1;
pub const GSO_NONE: u8 = 0;
pub const GSO_TCPV4: u8 = 1;
pub const GSO_TCPV6: u8 = 4;
/// `VIRTIO_NET_HDR_GSO_UDP_L4`: UDP segmentation (USO), Linux ≥ 6.2 on TUN.
pub const GSO_UDP_L4: u8 = 5;
/// Largest IP packet handled as a super-packet (the IPv4 length field).
pub const MAX_SUPER_PACKET: usize = 65_535;
/// Most packets merged into one super-packet (the kernel's UDP GSO limit;
/// TCP never reaches it with a real MSS).
pub const MAX_SEGMENTS: usize = 64;

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

/// The headers of a packet: its IP header and where the payload starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    pub ip: Ip,
    /// IP and transport headers together.
    pub headers: usize,
}

/// How a super-packet is cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    pub head: Head,
    /// Payload bytes per segment (the last may be shorter).
    pub segment: usize,
    /// Number of segments.
    pub count: usize,
}

/// The geometry of a TCP or UDP super-packet (by `h.gso_type`).
pub fn segments(pkt: &[u8], h: &VnetHdr) -> Result<Geometry, OffloadError> {
    if h.gso_type == GSO_UDP_L4 {
        udp::segments(pkt, h)
    } else {
        tcp::segments(pkt, h)
    }
}

/// Build segment `i` of a TCP or UDP super-packet into `out`; returns its
/// length.
pub fn segment_at(
    pkt: &[u8],
    h: &VnetHdr,
    i: usize,
    out: &mut [u8],
) -> Result<usize, OffloadError> {
    if h.gso_type == GSO_UDP_L4 {
        udp::segment_at(pkt, h, i, out)
    } else {
        tcp::segment_at(pkt, h, i, out)
    }
}

/// Copy segment `i` of `g` (headers, then its piece of payload) into
/// `out`; returns its length. The caller fixes lengths and checksums.
fn cut(pkt: &[u8], g: &Geometry, i: usize, out: &mut [u8]) -> Result<usize, OffloadError> {
    if i >= g.count {
        return Err(OffloadError::Malformed);
    }
    let hdrs = g.head.headers;
    let start = hdrs + i * g.segment;
    let chunk = &pkt[start..(start + g.segment).min(pkt.len())];
    let len = hdrs + chunk.len();
    if out.len() < len {
        return Err(OffloadError::Malformed);
    }
    out[..hdrs].copy_from_slice(&pkt[..hdrs]);
    out[hdrs..len].copy_from_slice(chunk);
    Ok(len)
}

/// Make a merged packet a valid super-packet for the TUN: IP length, the
/// transport checksum field holding the folded pseudo-header sum (a partial
/// checksum, `NEEDS_CSUM`), and the virtio header that describes it. The
/// caller has set protocol-specific lengths first.
fn finish_super(
    pkt: &mut [u8],
    head: &Head,
    proto: u8,
    csum_offset: usize,
    gso_type: u8,
    gso_size: usize,
) -> VnetHdr {
    let ip = head.ip;
    let len = pkt.len();
    ip.set_total_len(pkt, len, None);
    let p = fold(pseudo(pkt, &ip, proto, len - ip.header_len));
    let at = ip.header_len + csum_offset;
    pkt[at..at + 2].copy_from_slice(&p.to_be_bytes());
    VnetHdr {
        flags: VIRTIO_NET_HDR_F_NEEDS_CSUM,
        gso_type,
        hdr_len: head.headers as u16,
        gso_size: gso_size as u16,
        csum_start: ip.header_len as u16,
        csum_offset: csum_offset as u16,
    }
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

/// The protocol-specific half of a [`Coalescer`].
pub trait Flow: Default {
    /// The packet's headers, if it may be coalesced at all.
    fn candidate(pkt: &[u8]) -> Option<Head>;
    /// Whether `pkt` continues the pending super-packet whose first packet's
    /// headers are `first` (addresses, sizes and limits are checked by the
    /// skeleton).
    fn continues(&self, first: &[u8], pkt: &[u8], head: &Head) -> bool;
    /// Take `pkt` in (`first` is the pending packet, its headers editable);
    /// returns whether nothing may follow it.
    fn accept(&mut self, first: &mut [u8], pkt: &[u8], head: &Head) -> bool;
    /// Turn the merged packet (more than one segment of `gso_size` payload
    /// bytes) into a valid super-packet; returns its virtio header.
    fn finish(pkt: &mut [u8], head: &Head, gso_size: usize) -> VnetHdr;
}

/// Merges consecutive packets of one flow (equal payload sizes, the last
/// may be shorter) into one super-packet with a virtio header, for a TUN
/// write.
pub struct Coalescer<F> {
    /// The virtio header, then the IP packet being built.
    buf: Vec<u8>,
    /// Bytes of IP packet; 0 when empty.
    len: usize,
    segs: usize,
    head: Option<Head>,
    gso_size: usize,
    closed: bool,
    flow: F,
}

/// Coalescers for TCP and UDP.
pub type TcpCoalescer = Coalescer<TcpFlow>;
pub type UdpCoalescer = Coalescer<UdpFlow>;

impl<F: Flow> Default for Coalescer<F> {
    fn default() -> Self {
        Self {
            buf: vec![0u8; VNET_HDR_LEN + MAX_SUPER_PACKET],
            len: 0,
            segs: 0,
            head: None,
            gso_size: 0,
            closed: false,
            flow: F::default(),
        }
    }
}

impl<F: Flow> Coalescer<F> {
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
        let Some(head) = F::candidate(pkt) else {
            return false;
        };
        let payload = pkt.len() - head.headers;
        if self.len == 0 {
            self.buf[VNET_HDR_LEN..VNET_HDR_LEN + pkt.len()].copy_from_slice(pkt);
            (self.len, self.segs, self.head, self.gso_size) = (pkt.len(), 1, Some(head), payload);
            self.flow = F::default();
            let first = &mut self.buf[VNET_HDR_LEN..VNET_HDR_LEN + pkt.len()];
            self.closed = self.flow.accept(first, pkt, &head);
            return true;
        }
        let first = &self.buf[VNET_HDR_LEN..VNET_HDR_LEN + self.len];
        let joins = !self.closed
            && self.head == Some(head)
            && head.ip.same_flow_fields(first, pkt)
            && self.flow.continues(first, pkt, &head)
            && payload <= self.gso_size
            && self.segs < MAX_SEGMENTS
            && self.len + payload <= MAX_SUPER_PACKET;
        if !joins {
            return false;
        }
        let at = VNET_HDR_LEN + self.len;
        self.buf[at..at + payload].copy_from_slice(&pkt[head.headers..]);
        self.len += payload;
        self.segs += 1;
        let first = &mut self.buf[VNET_HDR_LEN..VNET_HDR_LEN + head.headers];
        let ends = self.flow.accept(first, pkt, &head);
        self.closed = ends || payload < self.gso_size;
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
        let h = match self.head {
            Some(head) if self.segs > 1 => F::finish(
                &mut self.buf[VNET_HDR_LEN..VNET_HDR_LEN + len],
                &head,
                self.gso_size,
            ),
            _ => VnetHdr::default(),
        };
        h.write(&mut self.buf[..VNET_HDR_LEN]);
        Some(&self.buf[..VNET_HDR_LEN + len])
    }
}
