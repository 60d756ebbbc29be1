//! Batched UDP I/O tests on loopback, with and without GSO/GRO.

use std::time::Duration;

use super::*;

fn pair(bind: &str) -> (UdpSocket, UdpSocket) {
    let a = UdpSocket::bind(bind).unwrap();
    let b = UdpSocket::bind(bind).unwrap();
    a.set_nonblocking(true).unwrap();
    b.set_nonblocking(true).unwrap();
    (a, b)
}

fn receive_all(rb: &mut RecvBatch, b: &UdpSocket, want: usize) -> Vec<Vec<u8>> {
    let mut got = vec![];
    for _ in 0..200 {
        match rb.recv(b) {
            Ok(n) => {
                for i in 0..n {
                    let (_, parts) = rb.datagrams(i);
                    let parts: Vec<_> = parts.collect();
                    for (off, len) in parts {
                        got.push(rb.slice_mut(i, off, len).to_vec());
                    }
                }
            }
            Err(_) => std::thread::sleep(Duration::from_millis(1)),
        }
        if got.len() >= want {
            break;
        }
    }
    got
}

#[test]
fn batch_roundtrip_v4_and_v6_with_and_without_gso_gro() {
    for bind in ["127.0.0.1:0", "[::1]:0"] {
        for offload in [false, true] {
            let (a, b) = pair(bind);
            let gso = offload && gso_supported(&a);
            if offload {
                enable_gro(&b);
            }
            let mut sb = SendBatch::new(64, 2048, gso);
            // 40 datagrams of 1000 bytes then a short one, all to b: one
            // super-datagram with GSO.
            let mut sent = vec![];
            for i in 0..41u32 {
                let len = if i == 40 { 300 } else { 1000 };
                let s = sb.slot().unwrap();
                s[..4].copy_from_slice(&i.to_be_bytes());
                s[4..len].fill(i as u8);
                sent.push(s[..len].to_vec());
                sb.commit(len, b.local_addr().unwrap(), 1);
            }
            assert_eq!(sb.len(), 41);
            assert!(sb.flush(&a).is_empty());
            let mut rb = RecvBatch::new(8, 65_536);
            let got = receive_all(&mut rb, &b, 41);
            assert_eq!(got, sent, "{bind} offload {offload}");
        }
    }
}

#[test]
fn gso_never_mixes_destinations_or_sizes() {
    let (a, b) = pair("127.0.0.1:0");
    let c = UdpSocket::bind("127.0.0.1:0").unwrap();
    c.set_nonblocking(true).unwrap();
    let mut sb = SendBatch::new(16, 2048, gso_supported(&a));
    for (i, (to, len)) in [(&b, 500), (&c, 500), (&b, 500), (&b, 600), (&b, 500)]
        .iter()
        .enumerate()
    {
        let s = sb.slot().unwrap();
        s[0] = i as u8;
        sb.commit(*len, to.local_addr().unwrap(), i as u8);
    }
    assert!(sb.flush(&a).is_empty());
    let mut rb = RecvBatch::new(8, 65_536);
    let got_b: Vec<_> = receive_all(&mut rb, &b, 4)
        .iter()
        .map(|d| (d[0], d.len()))
        .collect();
    let got_c: Vec<_> = receive_all(&mut rb, &c, 1)
        .iter()
        .map(|d| (d[0], d.len()))
        .collect();
    assert_eq!(got_b, vec![(0, 500), (2, 500), (3, 600), (4, 500)]);
    assert_eq!(got_c, vec![(1, 500)]);
}

#[test]
fn send_failures_are_reported_with_their_tag() {
    let a = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut sb = SendBatch::new(4, 100, false);
    sb.slot().unwrap();
    // An IPv6 destination on an IPv4 socket fails.
    sb.commit(10, "[::1]:9".parse().unwrap(), 7);
    sb.slot().unwrap();
    sb.commit(10, a.local_addr().unwrap(), 8);
    let f = sb.flush(&a);
    assert_eq!(f.len(), 1);
    assert_eq!((f[0].0, f[0].1), (7, 1));
    assert!(sb.is_empty());
}
