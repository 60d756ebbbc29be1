//! Hostile input on stable Rust (the coverage-guided targets live in
//! `fuzz/`): random bytes and mutated valid packets never panic the tunnel,
//! every rejected datagram is counted under exactly one drop reason, and
//! delivery stays in order without duplicates (but for packets that come
//! after their gap was given up, delivered late, once).

use std::net::SocketAddr;

use mpt_core::stats::DropReason;
use mpt_core::testing::{addr, TestConfig};
use mpt_core::tunnel::{Received, Tunnel};
use mpt_core::wire::{write_header, Header, HeaderFields, PacketType, HEADER_LEN};
use proptest::prelude::*;

/// The peer's address (the remote of both paths).
fn peer() -> SocketAddr {
    addr(1, 0)
}

fn tunnel() -> Tunnel {
    tunnel_with(true)
}

fn tunnel_with(recover: bool) -> Tunnel {
    // Both paths take packets from the peer's first address only.
    TestConfig::new(0, 2)
        .recover(recover)
        .reorder(32, 5_000_000)
        .with(|c| c.paths.iter_mut().for_each(|p| p.remote = Some(peer())))
        .tunnel()
}

fn data_packet(path: u8, seq: u64, inner_first: u8, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; HEADER_LEN + len];
    let f = HeaderFields {
        path,
        tunnel_seq: seq as u32,
        path_seq: seq as u16,
        ..Default::default()
    };
    write_header(&mut b, PacketType::Data, &f);
    if len > 0 {
        b[HEADER_LEN] = inner_first;
    }
    if len >= 16 {
        b[HEADER_LEN + 8..HEADER_LEN + 16].copy_from_slice(&seq.to_be_bytes());
    }
    b
}

proptest! {
    #[test]
    fn random_bytes_are_counted_drops(dgrams in proptest::collection::vec(
        proptest::collection::vec(any::<u8>(), 0..120), 1..200)) {
        let mut t = tunnel();
        let mut dropped = 0;
        for (i, d) in dgrams.iter().enumerate() {
            let mut d = d.clone();
            // Bytes that are not even a header must be dropped, not
            // silently consumed.
            let parses = Header::new_checked(&d).is_ok();
            let got = t.recv(i as u64, i % 2, peer(), &mut d);
            prop_assert!(parses || matches!(got, Received::Dropped(_)), "{:?}", got);
            if let Received::Dropped(_) = got {
                dropped += 1;
            }
            t.handle_timeout(i as u64 * 1_000_000);
            t.deliver_ready(|_| Ok(()));
        }
        prop_assert_eq!(t.drops().total(), dropped);
    }

    #[test]
    fn mutated_packets_keep_order(ops in proptest::collection::vec(
        (0u8..3, 0u64..80, prop_oneof![Just(0x45u8), Just(0x60), any::<u8>()], 0usize..60,
         any::<bool>(), 0u64..3_000_000), 1..300)) {
        let mut t = tunnel();
        let mut now = 0;
        let mut delivered = vec![];
        for (path, seq, first, len, wrong_src, dt) in ops {
            now += dt;
            let mut pkt = data_packet(path, seq, first, len);
            let src = if wrong_src { addr(9, 9) } else { peer() };
            match t.recv(now, path as usize % 2, src, &mut pkt) {
                Received::Deliver { offset, len } => delivered.push(pkt[offset..offset + len].to_vec()),
                Received::Consumed | Received::Dropped(_) => {}
            }
            t.handle_timeout(now);
            t.deliver_ready(|p| { delivered.push(p.to_vec()); Ok(()) });
        }
        let seqs: Vec<u64> = delivered.iter()
            .map(|p| u64::from_be_bytes(p[8..16].try_into().unwrap())).collect();
        let mut unique = seqs.clone();
        unique.sort_unstable();
        unique.dedup();
        prop_assert_eq!(unique.len(), seqs.len(), "each at most once: {:?}", seqs);
        // Out of order only where a late packet went out: one descent each.
        let descents = seqs.windows(2).filter(|w| w[0] > w[1]).count() as u64;
        prop_assert!(descents <= t.reorder_stats().late_delivered, "{:?}", seqs);
    }
}

#[test]
fn bad_or_unwanted_nacks_are_counted_drops() {
    let nack = |body: &[u8]| {
        let mut b = vec![0u8; HEADER_LEN];
        let f = HeaderFields {
            path: 0,
            ..Default::default()
        };
        write_header(&mut b, PacketType::Nack, &f);
        b.extend_from_slice(body);
        b
    };
    let from = peer();
    let good = [0u8, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7];
    let mut t = tunnel_with(true);
    assert_eq!(t.recv(1, 0, from, &mut nack(&good)), Received::Consumed);
    let cases: [(&[u8], DropReason); 3] = [
        (&good[..10], DropReason::Truncated),
        (&[0, 0, 0, 0], DropReason::BadType),
        (&[0, 17, 0, 0], DropReason::BadType),
    ];
    for (body, why) in cases {
        assert_eq!(t.recv(2, 0, from, &mut nack(body)), Received::Dropped(why));
    }
    let mut off = tunnel_with(false);
    assert_eq!(
        off.recv(1, 0, from, &mut nack(&good)),
        Received::Dropped(DropReason::NackUnexpected)
    );
    assert_eq!(off.drops().get(DropReason::NackUnexpected), 1);
}

#[test]
fn short_probes_are_counted_drops() {
    // A probe or echo whose body is shorter than a probe body: refused and
    // counted, never consumed silently.
    for ty in [PacketType::Probe, PacketType::Echo] {
        let mut t = tunnel();
        let mut b = vec![0u8; HEADER_LEN + 10];
        write_header(&mut b, ty, &HeaderFields::default());
        assert_eq!(
            t.recv(1, 0, peer(), &mut b),
            Received::Dropped(DropReason::Truncated)
        );
        assert_eq!(t.drops().get(DropReason::Truncated), 1);
    }
}

/// A datagram an attacker without keys could send: random bytes, or a
/// well-formed header of any type (known or not) with a random body.
fn hostile_datagram() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..400),
        (
            0u8..12,
            0u8..3,
            any::<u32>(),
            any::<u32>(),
            proptest::collection::vec(any::<u8>(), 0..300)
        )
            .prop_map(|(ty, path, session, seq, body)| {
                let mut b = vec![0u8; HEADER_LEN];
                let f = HeaderFields {
                    path,
                    session,
                    tunnel_seq: seq,
                    ..Default::default()
                };
                write_header(&mut b, PacketType::Data, &f);
                b[1] = ty;
                b.extend_from_slice(&body);
                b
            }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Without the keys nothing authenticates: on an encrypted tunnel,
    /// server (learning or not) or client, every such datagram is dropped
    /// (not consumed, not delivered) and counted exactly once.
    #[test]
    fn unauthenticatable_input_is_dropped(
        side in 0u8..2,
        learning in any::<bool>(),
        dgrams in proptest::collection::vec((hostile_datagram(), any::<bool>()), 1..100),
    ) {
        let mut c = TestConfig::new(side, 2).secure();
        if learning && side == 0 {
            c = c.learning();
        }
        let mut t = c.tunnel();
        let mut buf = [0u8; 1500];
        for (i, (d, from_peer)) in dgrams.iter().enumerate() {
            let now = (i as u64 + 1) * 1_000_000;
            let from = if *from_peer { addr(1 - side, i % 2) } else { addr(9, i) };
            let mut d = d.clone();
            let got = t.recv(now, i % 2, from, &mut d);
            prop_assert!(matches!(got, Received::Dropped(_)), "datagram {} was {:?}", i, got);
            t.handle_timeout(now);
            prop_assert_eq!(t.deliver_ready(|_| Ok(())), 0);
            while t.poll_transmit(now, &mut buf).is_some() {}
        }
        prop_assert_eq!(t.drops().total(), dgrams.len() as u64);
    }
}
