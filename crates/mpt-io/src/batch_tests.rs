//! Transmit slots and receive buffers: GSO grouping rules in memory, and a
//! round trip through the real batch system calls on loopback.

use std::net::UdpSocket;
use std::time::Duration;

use super::*;
use crate::linux::UdpPaths;
use crate::seam::PathIo;
use crate::udp::PathSocket;

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

fn commit(tx: &mut TxBatch, socket: usize, dst: SocketAddr, len: usize, mark: u8) {
    let s = tx.slot().unwrap();
    s[..len].fill(mark);
    tx.commit(TxMeta {
        socket,
        dst,
        path: socket as u8,
        len,
        seal: None,
        tos: 0,
        peer: 0,
    });
}

#[test]
fn gso_groups_runs_of_one_destination_and_size_per_socket() {
    let mut tx = TxBatch::new(16, 2048);
    let (b, c) = (addr(2), addr(3));
    // Socket 0: b b c b(600) b b(300) b(300); socket 1 interleaved.
    for (socket, dst, len) in [
        (0, b, 500),
        (1, b, 500),
        (0, b, 500),
        (0, c, 500),
        (0, b, 600),
        (0, b, 500),
        (0, b, 300),
        (0, b, 300),
    ] {
        commit(&mut tx, socket, dst, len, 1);
    }
    let (_, msgs, chunks, infos) = tx.messages(0, true);
    let shape: Vec<_> = msgs
        .iter()
        .zip(infos)
        .map(|(m, i)| (m.dst.port(), m.count, m.segment, i.datagrams))
        .collect();
    // Another destination or a larger datagram starts a new message; a
    // shorter one joins and closes it.
    assert_eq!(
        shape,
        vec![(2, 2, 500, 2), (3, 1, 0, 1), (2, 2, 600, 2), (2, 2, 300, 2)]
    );
    assert_eq!(chunks.len(), 7);
    let (_, msgs, _, _) = tx.messages(0, false);
    assert_eq!(msgs.len(), 7, "without GSO one message per datagram");
    assert!(msgs.iter().all(|m| m.segment == 0));
    let (_, msgs, _, _) = tx.messages(1, true);
    assert_eq!(msgs.len(), 1);
}

#[test]
fn gso_messages_stay_within_a_small_send_buffers_share() {
    let mut tx = TxBatch::new(16, 2048);
    for _ in 0..7 {
        commit(&mut tx, 0, addr(2), 1400, 1);
    }
    // A socket whose send buffer is small takes messages of at most
    // 3,000 bytes: two datagrams each, and the last alone.
    let (_, msgs, _, infos) = tx.messages_within(0, 3000);
    let counts: Vec<usize> = infos.iter().map(|i| i.datagrams).collect();
    assert_eq!(counts, vec![2, 2, 2, 1]);
    assert!(msgs.iter().take(3).all(|m| m.segment == 1400));
    let (_, msgs, _, _) = tx.messages_within(0, 0);
    assert_eq!(msgs.len(), 7, "0: no GSO");
}

#[test]
fn gso_messages_respect_the_kernel_limits() {
    let mut tx = TxBatch::new(200, 1500);
    for _ in 0..200 {
        commit(&mut tx, 0, addr(2), 1000, 0);
    }
    let (_, msgs, _, infos) = tx.messages(0, true);
    assert!(infos.iter().all(|i| i.datagrams <= GSO_MAX_SEGMENTS));
    assert!(msgs.iter().all(|m| m.segment * m.count <= GSO_MAX_BYTES));
    assert_eq!(infos.iter().map(|i| i.datagrams).sum::<usize>(), 200);
}

#[test]
fn skipped_unsealed_and_failed_slots_never_leave() {
    let mut tx = TxBatch::new(8, 256);
    commit(&mut tx, 0, addr(2), 100, 0);
    tx.slot().unwrap();
    tx.skip();
    let ticket = mpt_core::tunnel::SealTicket {
        session: 1,
        counter: 0,
    };
    for _ in 0..2 {
        tx.slot().unwrap();
        tx.commit(TxMeta {
            socket: 0,
            dst: addr(2),
            path: 0,
            len: 100,
            seal: Some(ticket),
            tos: 0,
            peer: 7,
        });
    }
    assert_eq!(tx.len(), 3);
    let (_, msgs, _, _) = tx.messages(0, false);
    assert_eq!(msgs.len(), 1, "unsealed slots wait");
    let s = tx.to_seal();
    assert_eq!((s.spans.len(), s.tickets.len()), (2, 2));
    assert_eq!(s.peers, [7, 7]);
    let mut failed = vec![];
    tx.sealed(&[true, false], |p| failed.push(p));
    assert_eq!(failed, [7], "the failed slot's peer hears of it");
    let (_, msgs, _, _) = tx.messages(0, false);
    assert_eq!(
        msgs.len(),
        2,
        "the sealed one joins, the failed one is gone"
    );
    tx.clear();
    assert!(tx.is_empty() && tx.free() == 8);
}

#[test]
fn gso_never_merges_datagrams_of_different_tos() {
    let mut tx = TxBatch::new(8, 256);
    for tos in [0, 0, 0xb8, 0xb8, 0] {
        tx.slot().unwrap();
        tx.commit(TxMeta {
            socket: 0,
            dst: addr(2),
            path: 0,
            len: 100,
            seal: None,
            tos,
            peer: 0,
        });
    }
    let (_, msgs, _, _) = tx.messages(0, true);
    let shape: Vec<_> = msgs.iter().map(|m| (m.count, m.tos)).collect();
    assert_eq!(shape, [(2, 0), (2, 0xb8), (1, 0)]);
}

fn path_socket(bind: &str) -> PathSocket {
    let socket = UdpSocket::bind(bind).unwrap();
    socket.set_nonblocking(true).unwrap();
    PathSocket {
        local: socket.local_addr().unwrap(),
        socket,
        paths: vec!["test".into()],
    }
}

fn receive_all(paths: &mut UdpPaths, want: usize) -> Vec<Vec<u8>> {
    let mut rb = RecvBatch::new(8, 65_536);
    let mut got = vec![];
    for _ in 0..200 {
        let (bufs, meta) = rb.parts_mut();
        match paths.recv(0, bufs, meta) {
            Ok(n) => {
                for i in 0..n {
                    let spans: Vec<_> = rb.datagrams(i).collect();
                    for s in spans {
                        got.push(rb.slice_mut(s).to_vec());
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
            let mut a = UdpPaths::new(vec![path_socket(bind)], 64);
            let mut b = UdpPaths::new(vec![path_socket(bind)], 64);
            let gso = offload && a.gso(0);
            let dst = b.sockets[0].local;
            let mut tx = TxBatch::new(64, 2048);
            // 40 datagrams of 1000 bytes then a short one: one
            // super-datagram with GSO.
            let mut sent = vec![];
            for i in 0..41u32 {
                let len = if i == 40 { 300 } else { 1000 };
                let s = tx.slot().unwrap();
                s[..4].copy_from_slice(&i.to_be_bytes());
                s[4..len].fill(i as u8);
                sent.push(s[..len].to_vec());
                tx.commit(TxMeta {
                    socket: 0,
                    dst,
                    path: 1,
                    len,
                    seal: None,
                    tos: 0,
                    peer: 0,
                });
            }
            let (buf, msgs, chunks, _) = tx.messages(0, gso);
            assert_eq!(msgs.len(), if gso { 1 } else { 41 });
            let mut failures = 0;
            a.send(0, buf, msgs, chunks, &mut |_, _| failures += 1);
            assert_eq!(failures, 0);
            let got = receive_all(&mut b, 41);
            assert_eq!(got, sent, "{bind} offload {offload}");
        }
    }
}

#[test]
fn send_failures_are_reported_with_their_message() {
    let mut a = UdpPaths::new(vec![path_socket("127.0.0.1:0")], 4);
    let mut tx = TxBatch::new(4, 100);
    // An IPv6 destination on an IPv4 socket fails.
    commit(&mut tx, 0, "[::1]:9".parse().unwrap(), 10, 0);
    let own = a.sockets[0].local;
    commit(&mut tx, 0, own, 10, 0);
    let (buf, msgs, chunks, _) = tx.messages(0, false);
    let mut failed = vec![];
    a.send(0, buf, msgs, chunks, &mut |i, _| failed.push(i));
    assert_eq!(failed, vec![0]);
}

#[test]
fn datagrams_lie_back_to_back_and_a_batch_read_takes_equal_slots() {
    let mut tx = TxBatch::new(8, 1000);
    let b = addr(2);
    // Two datagrams, a skipped slot, one more: each starts behind the
    // last one committed.
    commit(&mut tx, 0, b, 300, 1);
    commit(&mut tx, 0, b, 300, 2);
    assert_eq!(tx.slot().unwrap().len(), 1000);
    tx.skip();
    commit(&mut tx, 0, b, 200, 3);
    let (buf, _, chunks, _) = tx.messages(0, true);
    let starts: Vec<_> = chunks.iter().map(|c| (c.start, c.len)).collect();
    assert_eq!(starts, vec![(0, 300), (300, 300), (600, 200)]);
    assert!(buf[..300].iter().all(|&x| x == 1));
    assert!(buf[300..600].iter().all(|&x| x == 2));
    assert!(buf[600..800].iter().all(|&x| x == 3));
    // A batch read: the free slots at a stride of 1000 from there, in
    // order, then back to back again once it ends.
    let free = tx.free();
    assert_eq!(tx.free_slots_mut().len(), 8000 - 800);
    assert_eq!(free, 4);
    for k in 0..2u8 {
        let s = tx.slot().unwrap();
        assert_eq!(s.len(), 1000);
        s[..100].fill(10 + k);
        tx.commit(TxMeta {
            socket: 0,
            dst: b,
            path: 0,
            len: 100,
            seal: None,
            tos: 0,
            peer: 0,
        });
    }
    tx.end_read();
    commit(&mut tx, 0, b, 100, 20);
    // The last slot still has its full room within the arena.
    assert_eq!(tx.slot().unwrap().len(), 1000);
    let (buf, _, chunks, _) = tx.messages(0, false);
    let starts: Vec<_> = chunks.iter().map(|c| c.start).collect();
    assert_eq!(starts, vec![0, 300, 600, 800, 1800, 1900]);
    assert!(buf[1800..1900].iter().all(|&x| x == 11));
    assert!(buf[1900..2000].iter().all(|&x| x == 20));
    let committed: Vec<_> = tx.committed().map(|(m, d)| (m.len, d[0])).collect();
    assert_eq!(
        committed,
        vec![
            (300, 1),
            (300, 2),
            (200, 3),
            (100, 10),
            (100, 11),
            (100, 20)
        ]
    );
    tx.clear();
    commit(&mut tx, 0, b, 50, 30);
    let (_, _, chunks, _) = tx.messages(0, false);
    assert_eq!(chunks[0].start, 0, "a cleared batch starts at the front");
}

#[test]
fn every_slot_has_its_full_room_however_the_batch_fills() {
    // Full-size datagrams, strided reads and skips in any mix: the
    // batch never runs out of arena before its slots.
    for pattern in 0..64u32 {
        let mut tx = TxBatch::new(6, 500);
        let mut k = 0;
        while !tx.is_full() {
            let bit = (pattern >> k) & 1 == 1;
            if bit && k % 3 == 0 {
                tx.free_slots_mut();
            }
            let s = tx.slot().expect("a slot while not full");
            assert_eq!(s.len(), 500);
            if bit {
                commit(&mut tx, 0, addr(2), 500, k as u8);
            } else {
                tx.skip();
            }
            if k % 3 == 2 {
                tx.end_read();
            }
            k += 1;
        }
        assert!(tx.slot().is_none());
        let mut last_end = 0;
        for (m, d) in tx.committed() {
            assert_eq!(d.len(), m.len);
            let start = d.as_ptr() as usize;
            assert!(start >= last_end, "slots never overlap");
            last_end = start + d.len();
        }
    }
}
