//! Offload tests: segmentation produces valid TCP/IP packets, and
//! coalescing the segments back yields the original super-packet.

use mpt_core::ip::checksum::{fold, sum16};
use mpt_core::ip::{ipv4_fill_checksum, Ip};

use super::*;
use crate::offload::{
    finish_checksum, TcpCoalescer as Coalescer, VIRTIO_NET_HDR_F_NEEDS_CSUM, VNET_HDR_LEN,
};

const TCP_ACK: u8 = tcp_flags::ACK;
const TCP_PSH: u8 = tcp_flags::PSH;

/// Pseudo-header sum for TCP over `pkt`'s IP version.
fn pseudo_tcp(pkt: &[u8], l4_len: usize) -> u64 {
    pseudo(pkt, &Ip::parse(pkt).unwrap(), PROTO_TCP, l4_len)
}

pub(crate) fn super_packet(v6: bool, payload_len: usize, flags: u8) -> Vec<u8> {
    super_packet_between(v6, payload_len, flags, [10, 99, 0, 1], [10, 99, 0, 2])
}

/// [`super_packet`] from `src` to `dst` (IPv4; a v6 one keeps its own).
pub(crate) fn super_packet_between(
    v6: bool,
    payload_len: usize,
    flags: u8,
    src: [u8; 4],
    dst: [u8; 4],
) -> Vec<u8> {
    let iph = if v6 { 40 } else { 20 };
    let mut p = vec![0u8; iph + 32 + payload_len];
    let len = p.len();
    if v6 {
        p[0] = 0x60;
        p[4..6].copy_from_slice(&((len - 40) as u16).to_be_bytes());
        p[6] = 6;
        p[7] = 64;
        p[8..24].copy_from_slice(&[0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        p[24..40].copy_from_slice(&[0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    } else {
        p[0] = 0x45;
        p[2..4].copy_from_slice(&(len as u16).to_be_bytes());
        p[4..6].copy_from_slice(&0x1234u16.to_be_bytes());
        p[6] = 0x40; // DF
        p[8] = 64;
        p[9] = 6;
        p[12..16].copy_from_slice(&src);
        p[16..20].copy_from_slice(&dst);
        ipv4_fill_checksum(&mut p[..20]);
    }
    let t = iph;
    p[t..t + 2].copy_from_slice(&5201u16.to_be_bytes());
    p[t + 2..t + 4].copy_from_slice(&40000u16.to_be_bytes());
    p[t + 4..t + 8].copy_from_slice(&0xfffff000u32.to_be_bytes()); // wraps
    p[t + 8..t + 12].copy_from_slice(&77u32.to_be_bytes());
    p[t + 12] = 8 << 4; // 32-byte header (timestamps)
    p[t + 13] = flags;
    p[t + 14..t + 16].copy_from_slice(&512u16.to_be_bytes());
    p[t + 20..t + 32].copy_from_slice(&[1, 1, 8, 10, 0, 0, 0, 5, 0, 0, 0, 9]);
    for (i, b) in p[t + 32..].iter_mut().enumerate() {
        *b = (i * 7) as u8;
    }
    let ps = fold(pseudo_tcp(&p, len - iph));
    p[t + 16..t + 18].copy_from_slice(&ps.to_be_bytes());
    p
}

pub(crate) fn hdr(v6: bool) -> VnetHdr {
    VnetHdr {
        flags: VIRTIO_NET_HDR_F_NEEDS_CSUM,
        gso_type: if v6 { GSO_TCPV6 } else { GSO_TCPV4 },
        hdr_len: if v6 { 72 } else { 52 },
        gso_size: 1368,
        csum_start: if v6 { 40 } else { 20 },
        csum_offset: 16,
    }
}

fn tcp_checksum_ok(seg: &[u8], iph: usize) -> bool {
    fold(sum16(&seg[iph..], pseudo_tcp(seg, seg.len() - iph))) == 0xffff
}

#[test]
fn segments_are_valid_and_coalesce_back() {
    for v6 in [false, true] {
        let iph = if v6 { 40 } else { 20 };
        let sp = super_packet(v6, 5000, TCP_ACK | TCP_PSH);
        let mut out = vec![0u8; 2000];
        let mut segs = vec![];
        let n = segment(&sp, &hdr(v6), &mut out, |s| segs.push(s.to_vec())).unwrap();
        assert_eq!(n, 4);
        assert_eq!(
            segs.iter().map(|s| s.len() - iph - 32).collect::<Vec<_>>(),
            vec![1368, 1368, 1368, 896]
        );
        for (i, s) in segs.iter().enumerate() {
            assert!(tcp_checksum_ok(s, iph), "segment {i} TCP checksum");
            if !v6 {
                assert_eq!(fold(sum16(&s[..20], 0)), 0xffff, "IPv4 header checksum");
                assert_eq!(u16::from_be_bytes([s[4], s[5]]), 0x1234 + i as u16);
            }
            let seq = u32::from_be_bytes(s[iph + 4..iph + 8].try_into().unwrap());
            assert_eq!(seq, 0xfffff000u32.wrapping_add(1368 * i as u32));
            let psh = s[iph + 13] & TCP_PSH != 0;
            assert_eq!(psh, i == 3, "PSH only on the last segment");
        }
        let mut c = Coalescer::default();
        for s in &segs {
            assert!(c.push(s));
        }
        let merged = c.take().unwrap().to_vec();
        let h = VnetHdr::parse(&merged).unwrap();
        assert_eq!(h.gso_type, hdr(v6).gso_type);
        assert_eq!(h.gso_size, 1368);
        assert_eq!((h.csum_start, h.csum_offset), (iph as u16, 16));
        assert_eq!(
            &merged[VNET_HDR_LEN..],
            &sp[..],
            "coalescing restores the super-packet"
        );
        assert!(c.is_empty() && c.take().is_none());
    }
}

#[test]
fn coalescer_refuses_what_it_must_not_merge() {
    let sp = super_packet(false, 4000, TCP_ACK);
    let mut out = vec![0u8; 2000];
    let mut segs = vec![];
    segment(&sp, &hdr(false), &mut out, |s| segs.push(s.to_vec())).unwrap();
    let mut c = Coalescer::default();
    assert!(c.push(&segs[0]));
    // A gap in the sequence.
    assert!(!c.push(&segs[2]));
    // Another flow (different port).
    let mut other = segs[1].clone();
    other[20] ^= 1;
    assert!(!c.push(&other));
    // A different ack number.
    let mut ack = segs[1].clone();
    ack[28] ^= 1;
    assert!(!c.push(&ack));
    assert!(c.push(&segs[1]));
    // A SYN, an IPv4 packet with options, a fragment: never candidates.
    let mut syn = segs[0].clone();
    syn[33] = 0x02;
    assert!(!Coalescer::default().push(&syn));
    let mut frag = segs[0].clone();
    frag[6] = 0x20;
    assert!(!Coalescer::default().push(&frag));
    let mut opts = segs[0].clone();
    opts[0] = 0x46;
    assert!(!Coalescer::default().push(&opts));
    // A single segment is written without GSO.
    let mut one = Coalescer::default();
    assert!(one.push(&segs[0]));
    let w = one.take().unwrap();
    assert_eq!(VnetHdr::parse(w).unwrap(), VnetHdr::default());
    assert_eq!(&w[VNET_HDR_LEN..], &segs[0][..]);
}

#[test]
fn partial_checksum_is_finished() {
    let sp = super_packet(false, 100, TCP_ACK);
    let mut p = sp.clone();
    finish_checksum(&mut p, &hdr(false)).unwrap();
    assert!(tcp_checksum_ok(&p, 20));
    assert_eq!(
        finish_checksum(&mut p[..30].to_vec(), &hdr(false)),
        Err(OffloadError::Malformed)
    );
}

#[test]
fn malformed_super_packets_are_refused() {
    let mut out = vec![0u8; 2000];
    assert!(segment(&[0u8; 10], &hdr(false), &mut out, |_| {}).is_err());
    let sp = super_packet(false, 3000, TCP_ACK);
    let mut h = hdr(false);
    h.gso_size = 0;
    assert!(segment(&sp, &h, &mut out, |_| {}).is_err());
    let mut h = hdr(false);
    h.csum_start = 24;
    assert!(segment(&sp, &h, &mut out, |_| {}).is_err());
    assert!(segment(&sp, &hdr(false), &mut [0u8; 10], |_| {}).is_err());
}

#[test]
fn vnet_header_roundtrip() {
    let h = hdr(true);
    let mut b = [0u8; VNET_HDR_LEN];
    h.write(&mut b);
    assert_eq!(b, [1, 4, 72, 0, 0x58, 0x05, 40, 0, 16, 0]);
    assert_eq!(VnetHdr::parse(&b), Some(h));
    assert_eq!(VnetHdr::parse(&b[..9]), None);
}
