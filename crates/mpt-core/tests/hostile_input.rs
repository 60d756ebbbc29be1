//! Hostile input on stable Rust (the coverage-guided targets live in
//! `fuzz/`): random bytes and mutated valid packets never panic the tunnel,
//! every rejected datagram is counted under exactly one drop reason, and
//! delivery stays in order without duplicates.

use std::net::SocketAddr;

use mpt_core::path::PathConfig;
use mpt_core::sched::Share;
use mpt_core::stats::DropReason;
use mpt_core::tunnel::{Received, ReleaseKind, Tunnel, TunnelConfig};
use mpt_core::wire::{write_header, HeaderFields, PacketType, HEADER_LEN};
use proptest::prelude::*;

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn tunnel() -> Tunnel {
    tunnel_with(true)
}

fn tunnel_with(recover: bool) -> Tunnel {
    let paths = (0..2)
        .map(|i| PathConfig {
            name: format!("p{i}"),
            local_key: i,
            local: addr("10.0.0.1:1"),
            remote: Some(addr("10.0.0.2:1")),
            weight: 1,
            keepalive: 100_000_000,
            dead: 500_000_000,
        })
        .collect();
    Tunnel::new(
        TunnelConfig {
            paths,
            mtu: 1400,
            reorder_window: 32,
            reorder_max_delay: 5_000_000,
            release: ReleaseKind::PathFrontier,
            share: Share::Bytes,
            security: None,
            seed: [0; 32],
            adapt_to_loss: true,
            recover,
        },
        0,
    )
}

fn data_packet(path: u8, seq: u64, inner_first: u8, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; HEADER_LEN + len];
    let f = HeaderFields {
        path,
        tunnel_seq: seq,
        path_seq: seq as u32,
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
            if let Received::Dropped(_) = t.recv(i as u64, i % 2, addr("10.0.0.2:1"), &mut d) {
                dropped += 1;
            }
            t.handle_timeout(i as u64 * 1_000_000);
            while let Some(p) = t.poll_deliver() { t.recycle(p); }
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
            let src = if wrong_src { addr("10.9.9.9:1") } else { addr("10.0.0.2:1") };
            match t.recv(now, path as usize % 2, src, &mut pkt) {
                Received::Deliver { offset, len } => delivered.push(pkt[offset..offset + len].to_vec()),
                Received::Consumed | Received::Dropped(_) => {}
            }
            t.handle_timeout(now);
            while let Some(p) = t.poll_deliver() { delivered.push(p.clone()); t.recycle(p); }
        }
        let seqs: Vec<u64> = delivered.iter()
            .map(|p| u64::from_be_bytes(p[8..16].try_into().unwrap())).collect();
        prop_assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{:?}", seqs);
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
    let from = addr("10.0.0.2:1");
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
