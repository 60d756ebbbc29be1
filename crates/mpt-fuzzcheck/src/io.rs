//! Bytes the I/O layer and the probe tool read: TUN offload super-packets
//! (`mpt_io::offload`) and mpt-probe's receiver. No state; see the crate
//! doc.

use mpt_io::offload::{
    self, tcp, udp, TcpCoalescer, UdpCoalescer, VnetHdr, GSO_UDP_L4, MAX_SEGMENTS, VNET_HDR_LEN,
};
use mpt_probe::StreamStats;

/// Fuzz the TUN offload code: segmentation of TCP and UDP super-packets
/// (as read from the TUN, with an arbitrary virtio header) and coalescing of
/// arbitrary packets (as released by the peer). No input may panic; the
/// segments of a super-packet must carry its payload, in order, and UDP
/// segments must coalesce back into the same payload.
pub fn offload(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let Some(h) = VnetHdr::parse(rest) else {
        return;
    };
    let pkt = &rest[VNET_HDR_LEN..];
    let mut out = vec![0u8; 65_536];
    match mode % 3 {
        0 => {
            if let Ok(g) = tcp::segments(pkt, &h) {
                let (hdrs, n) = (g.head.headers, g.count);
                let mut payload = vec![];
                for i in 0..n.min(128) {
                    let len = tcp::segment_at(pkt, &h, i, &mut out).expect("in range");
                    payload.extend_from_slice(&out[hdrs..len]);
                }
                if n <= 128 {
                    assert_eq!(payload, pkt[hdrs..]);
                }
            }
        }
        1 => {
            let h = VnetHdr {
                gso_type: GSO_UDP_L4,
                ..h
            };
            let fits = pkt.len() <= offload::MAX_SUPER_PACKET;
            if let (true, Ok(g)) = (fits, udp::segments(pkt, &h)) {
                let (iph, n) = (g.head.ip.header_len, g.count);
                let mut c = UdpCoalescer::default();
                let mut payload = vec![];
                for i in 0..n.min(MAX_SEGMENTS) {
                    let len = udp::segment_at(pkt, &h, i, &mut out).expect("in range");
                    payload.extend_from_slice(&out[iph + 8..len]);
                    assert!(c.push(&out[..len]), "a segment of one super-packet joins");
                }
                if n <= MAX_SEGMENTS {
                    assert_eq!(payload, pkt[iph + 8..]);
                    let back = c.take().expect("not empty");
                    assert_eq!(back[VNET_HDR_LEN + iph + 8..], pkt[iph + 8..]);
                }
            }
        }
        _ => {
            // A stream of packets, each prefixed by a one-byte length.
            let mut tcp = TcpCoalescer::default();
            let mut udp = UdpCoalescer::default();
            let mut s = pkt;
            while let Some((&n, tail)) = s.split_first() {
                let n = usize::from(n).min(tail.len());
                let (p, tail) = tail.split_at(n);
                if !tcp.push(p) {
                    let _ = tcp.take();
                    let _ = tcp.push(p);
                }
                if !udp.push(p) {
                    let _ = udp.take();
                    let _ = udp.push(p);
                }
                s = tail;
            }
            let _ = tcp.take();
            let _ = udp.take();
        }
    }
}

/// Fuzz mpt-probe's receiver (`StreamStats`, with the probe header parser
/// and the two-step send stamps): any sequence of datagrams, each
/// prefixed here by one length byte, at any arrival times, is counted
/// (received, duplicate or invalid), never a panic; every probe received
/// gets exactly one send time, the kernel's or its user stamp.
pub fn probe_recv(data: &[u8]) {
    let mut s = StreamStats::default();
    let mut rest = data;
    let mut datagrams = 0u64;
    let mut arrival = 1_000_000u64;
    while let Some((&len, tail)) = rest.split_first() {
        let n = usize::from(len).min(tail.len());
        let (d, more) = tail.split_at(n);
        arrival = arrival.wrapping_add(u64::from(len) * 997);
        s.on_datagram(d, arrival);
        datagrams += 1;
        rest = more;
    }
    let m = s.summary(None);
    assert_eq!(m.received + m.duplicates + m.invalid, datagrams);
    assert_eq!(m.send_stamps.kernel + m.send_stamps.user, m.received);
}
