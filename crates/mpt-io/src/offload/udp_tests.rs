//! Tests of the UDP offloads: a vector computed independently (Python,
//! RFC 768/791 checksums), round trips through segmentation and
//! coalescing, and refusals.

use mpt_core::ip::checksum::{fold, sum16};
use mpt_core::ip::ipv4_fill_checksum;

use super::*;
use crate::offload::{
    UdpCoalescer, GSO_NONE, MAX_SEGMENTS, VIRTIO_NET_HDR_F_NEEDS_CSUM, VNET_HDR_LEN,
};

/// Pseudo-header sum for protocol `proto` over `pkt`'s IP version.
fn pseudo_for(pkt: &[u8], proto: u8, l4_len: usize) -> u64 {
    pseudo(pkt, &Ip::parse(pkt).unwrap(), proto, l4_len)
}

/// IPv4 UDP super-packet 192.0.2.1:4000 → 192.0.2.2:5000, id 0x100, DF,
/// TTL 64, payload "abcdef", with the partial checksum the kernel leaves.
fn vector_super_packet() -> Vec<u8> {
    udp_super(false, b"abcdef", 0x100)
}

fn udp_super(v6: bool, payload: &[u8], id: u16) -> Vec<u8> {
    let iph = if v6 { 40 } else { 20 };
    let mut p = vec![0u8; iph + 8 + payload.len()];
    let len = p.len();
    if v6 {
        p[0] = 0x60;
        p[4..6].copy_from_slice(&((len - 40) as u16).to_be_bytes());
        p[6] = 17;
        p[7] = 64;
        p[8..24].copy_from_slice(&[0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        p[24..40].copy_from_slice(&[0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    } else {
        p[0] = 0x45;
        p[2..4].copy_from_slice(&(len as u16).to_be_bytes());
        p[4..6].copy_from_slice(&id.to_be_bytes());
        p[6] = 0x40;
        p[8] = 64;
        p[9] = 17;
        p[12..16].copy_from_slice(&[192, 0, 2, 1]);
        p[16..20].copy_from_slice(&[192, 0, 2, 2]);
        ipv4_fill_checksum(&mut p[..20]);
    }
    p[iph..iph + 2].copy_from_slice(&4000u16.to_be_bytes());
    p[iph + 2..iph + 4].copy_from_slice(&5000u16.to_be_bytes());
    p[iph + 4..iph + 6].copy_from_slice(&((len - iph) as u16).to_be_bytes());
    p[iph + 8..].copy_from_slice(payload);
    let ps = fold(pseudo_for(&p, 17, len - iph));
    p[iph + 6..iph + 8].copy_from_slice(&ps.to_be_bytes());
    p
}

fn hdr(size: u16) -> VnetHdr {
    VnetHdr {
        flags: VIRTIO_NET_HDR_F_NEEDS_CSUM,
        gso_type: GSO_UDP_L4,
        hdr_len: 28,
        gso_size: size,
        csum_start: 20,
        csum_offset: 6,
    }
}

#[test]
fn segments_match_the_independent_vector() {
    let sp = vector_super_packet();
    let h = hdr(4);
    let g = segments(&sp, &h).unwrap();
    assert_eq!((g.head.ip.header_len, g.segment, g.count), (20, 4, 2));
    let mut out = [0u8; 64];
    let n = segment_at(&sp, &h, 0, &mut out).unwrap();
    assert_eq!(
        &out[..n],
        &[
            0x45, 0x00, 0x00, 0x20, 0x01, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb5, 0xc9, 0xc0, 0x00,
            0x02, 0x01, 0xc0, 0x00, 0x02, 0x02, 0x0f, 0xa0, 0x13, 0x88, 0x00, 0x0c, 0x93, 0xe3,
            0x61, 0x62, 0x63, 0x64
        ]
    );
    let n = segment_at(&sp, &h, 1, &mut out).unwrap();
    assert_eq!(
        &out[..n],
        &[
            0x45, 0x00, 0x00, 0x1e, 0x01, 0x01, 0x40, 0x00, 0x40, 0x11, 0xb5, 0xca, 0xc0, 0x00,
            0x02, 0x01, 0xc0, 0x00, 0x02, 0x02, 0x0f, 0xa0, 0x13, 0x88, 0x00, 0x0a, 0xf3, 0x47,
            0x65, 0x66
        ]
    );
    assert_eq!(
        segment_at(&sp, &h, 2, &mut out),
        Err(OffloadError::Malformed)
    );
}

#[test]
fn segment_then_coalesce_gives_the_super_packet_back() {
    for v6 in [false, true] {
        let iph = if v6 { 40 } else { 20 };
        for (total, size) in [
            (1400usize * 10, 1400usize),
            (1400 * 7 + 3, 1400),
            (100, 7),
            (5, 100),
        ] {
            let payload: Vec<u8> = (0..total).map(|i| (i * 13 + 1) as u8).collect();
            let sp = udp_super(v6, &payload, 0x4242);
            let h = VnetHdr {
                csum_start: iph as u16,
                hdr_len: (iph + 8) as u16,
                ..hdr(size as u16)
            };
            let n = segments(&sp, &h).unwrap().count;
            assert_eq!(n, total.div_ceil(size));
            let mut c = UdpCoalescer::default();
            let mut out = vec![0u8; 2048];
            let mut joined = vec![];
            for i in 0..n {
                let len = segment_at(&sp, &h, i, &mut out).unwrap();
                let seg = &out[..len];
                // Valid UDP checksum over the pseudo-header.
                assert_eq!(
                    fold(sum16(&seg[iph..], pseudo_for(seg, 17, len - iph))),
                    0xffff
                );
                joined.extend_from_slice(&seg[iph + 8..]);
                assert!(c.push(seg), "v6 {v6} segment {i} joins");
            }
            assert_eq!(joined, payload);
            let back = c.take().unwrap();
            let vh = VnetHdr::parse(back).unwrap();
            if n > 1 {
                assert_eq!(vh.gso_type, GSO_UDP_L4);
                assert_eq!(usize::from(vh.gso_size), size);
                assert_eq!(&back[VNET_HDR_LEN..], &sp[..], "v6 {v6} total {total}");
            } else {
                assert_eq!(vh.gso_type, GSO_NONE);
            }
            assert!(c.is_empty());
        }
    }
}

#[test]
fn coalescer_refuses_what_it_must_not_merge() {
    let seg = |payload: &[u8], port: u16| {
        let mut p = udp_super(false, payload, 1);
        p[20..22].copy_from_slice(&port.to_be_bytes());
        p
    };
    let mut c = UdpCoalescer::default();
    assert!(c.push(&seg(&[1; 100], 4000)));
    assert!(!c.push(&seg(&[1; 100], 4001)), "other flow");
    assert!(!c.push(&seg(&[1; 101], 4000)), "larger than the first");
    assert!(c.push(&seg(&[1; 50], 4000)), "a shorter last one");
    assert!(!c.push(&seg(&[1; 50], 4000)), "nothing after a short one");
    assert!(c.take().is_some());
    for _ in 0..MAX_SEGMENTS {
        assert!(c.push(&seg(&[2; 10], 4000)));
    }
    assert!(!c.push(&seg(&[2; 10], 4000)), "segment limit");
    let _ = c.take();
    // Not candidates: fragment, IPv4 options, length mismatch, TCP, empty.
    let mut frag = seg(&[1; 10], 4000);
    frag[6] = 0x20;
    let mut opts = seg(&[1; 10], 4000);
    opts[0] = 0x46;
    let mut badlen = seg(&[1; 10], 4000);
    badlen[24..26].copy_from_slice(&9u16.to_be_bytes());
    let mut tcp = seg(&[1; 10], 4000);
    tcp[9] = 6;
    let empty = seg(&[], 4000);
    for (what, p) in [
        ("fragment", frag),
        ("options", opts),
        ("udp length", badlen),
        ("tcp", tcp),
        ("empty", empty),
    ] {
        assert!(!c.push(&p), "{what}");
        assert!(c.is_empty(), "{what}");
    }
}

#[test]
fn malformed_super_packets_are_refused() {
    let sp = vector_super_packet();
    let mut out = [0u8; 64];
    assert_eq!(segments(&sp, &hdr(0)), Err(OffloadError::Malformed));
    assert_eq!(segments(&sp[..27], &hdr(4)), Err(OffloadError::Unsupported));
    let mut short_ip = sp.clone();
    short_ip[2..4].copy_from_slice(&30u16.to_be_bytes());
    assert_eq!(segments(&short_ip, &hdr(4)), Err(OffloadError::Malformed));
    assert_eq!(
        segment_at(&sp, &hdr(4), 0, &mut out[..31]),
        Err(OffloadError::Malformed)
    );
}

#[test]
fn oversized_packets_are_refused_not_copied() {
    // An IPv6 packet may claim 40 + 65535 bytes: more than a super-packet.
    let mut p = udp_super(true, &vec![0u8; 65_535 - 8], 0);
    assert_eq!(p.len(), 65_575);
    let mut c = UdpCoalescer::default();
    assert!(!c.push(&p));
    p[6] = 6; // TCP next header: the TCP coalescer refuses it as well
    assert!(!crate::offload::TcpCoalescer::default().push(&p));
}
