//! ECN across the tunnel (RFC 6040 normal mode), in virtual time: the
//! outer header carries the inner packet's ECN bits; a CE that a path put
//! on the outer header reaches the inner packet, also through a fragmented
//! packet whose later piece was marked; a CE on a Not-ECT packet drops it;
//! a plaintext tunnel leaves the outer field Not-ECT.

mod common;

use common::*;
use mpt_core::ecn_tunnel::{inner_ecn, ECT0, ECT1};
use mpt_core::qos::ecn::{CE, ECN_MASK, NOT_ECT};
use mpt_core::stats::DropReason;
use mpt_core::tunnel::{Carries, Received, Tunnel};
use mpt_core::wire::HEADER_LEN;
use mpt_core::Nanos;

const MTU: usize = 6000;
const BODY: usize = 1400;

fn side(s: u8, secure: bool) -> Tunnel {
    let c = TestConfig::new(s, 1).with(|c| {
        c.mtu = MTU;
        c.datagram_body = Some(BODY);
    });
    if secure {
        c.secure().tunnel()
    } else {
        c.tunnel()
    }
}

/// A secure pair over one 5 ms path, with a session and traffic behind it.
fn established(secure: bool) -> (Sim, Nanos) {
    let t = [side(0, secure), side(1, secure)];
    let mut sim = Sim::with_tunnels(links(&[(5, 0, 0.0)]), t, 3);
    let end = sim.run_traffic(0, 50, 2 * MS, 0);
    sim.deliver_until(end + 500 * MS);
    assert_eq!(sim.delivered[1].len(), 50, "{:?}", sim.drops_seen);
    (sim, end + 500 * MS)
}

/// Inner packet `idx` of `len` bytes with ECN field `ecn`.
fn packet(idx: u64, len: usize, ecn: u8) -> Vec<u8> {
    let mut p = big_inner(idx, len);
    p[1] = ecn;
    p
}

/// Side 0 sends `pkt`: every datagram it makes, sealed, with its TOS byte.
fn transmit(sim: &mut Sim, now: Nanos, pkt: &[u8]) -> Vec<(Vec<u8>, u8)> {
    let mut out = vec![];
    let mut buf = vec![0u8; HEADER_LEN + MTU + 16];
    buf[HEADER_LEN..HEADER_LEN + pkt.len()].copy_from_slice(pkt);
    if let Some(tx) = sim.t[0].send(now, &mut buf, pkt.len()) {
        out.push((buf[..tx.len].to_vec(), tx.tos));
    }
    let mut q = vec![0u8; 8192];
    while let Some(tx) = sim.t[0].poll_transmit(now, &mut q) {
        if tx.carries == Carries::Control {
            continue;
        }
        let mut d = q[..tx.len].to_vec();
        assert!(sim.t[0].sealer().seal(tx.seal, &mut d));
        out.push((d, tx.tos));
    }
    out
}

/// Side 1 receives `dgrams`, each with the outer ECN bits given: what it
/// delivers, and what it dropped.
fn receive(
    sim: &mut Sim,
    now: Nanos,
    dgrams: Vec<(Vec<u8>, u8)>,
) -> (Vec<Vec<u8>>, Vec<DropReason>) {
    let (mut got, mut dropped) = (vec![], vec![]);
    for (mut d, outer) in dgrams {
        match sim.t[1].recv_ecn(now, 0, addr(0, 0), &mut d, outer) {
            Received::Deliver { offset, len } => got.push(d[offset..offset + len].to_vec()),
            Received::Dropped(r) => dropped.push(r),
            Received::Consumed => {}
        }
        sim.t[1].deliver_ready(|p| {
            got.push(p.to_vec());
            Ok(())
        });
    }
    (got, dropped)
}

#[test]
fn the_outer_header_carries_the_inner_ecn_bits_and_a_ce_comes_back_in() {
    let (mut sim, now) = established(true);
    for (i, ecn) in [NOT_ECT, ECT1, ECT0, CE].into_iter().enumerate() {
        let tx = transmit(&mut sim, now, &packet(100 + i as u64, 200, ecn));
        assert_eq!(tx.len(), 1);
        assert_eq!(tx[0].1 & ECN_MASK, ecn, "outer copies inner {ecn}");
    }
    // A path marked an ECT(0) packet's datagram: the inner packet arrives CE.
    let tx = transmit(&mut sim, now, &packet(200, 200, ECT0));
    let marked = tx.into_iter().map(|(d, tos)| (d, tos | CE)).collect();
    let (got, dropped) = receive(&mut sim, now, marked);
    assert!(dropped.is_empty(), "{dropped:?}");
    let p = got.iter().find(|p| index_of(p) == 200).expect("delivered");
    assert_eq!(inner_ecn(p), CE);
    let sent = packet(200, 200, ECT0);
    assert_eq!(p[1] & !ECN_MASK, sent[1] & !ECN_MASK, "the DSCP stays");
    // Beside the ECN bits, only the header checksum moved (RFC 1624).
    assert_eq!((&p[2..10], &p[12..]), (&sent[2..10], &sent[12..]));
    let st = sim.t[1].status(now);
    assert_eq!((st.ecn.outer_ce, st.ecn.ce_carried), (1, 1));
}

#[test]
fn a_ce_on_a_not_ect_packet_drops_it_and_counts_it() {
    let (mut sim, now) = established(true);
    let tx = transmit(&mut sim, now, &packet(300, 200, NOT_ECT));
    let marked = tx.into_iter().map(|(d, _)| (d, CE)).collect();
    let (got, dropped) = receive(&mut sim, now, marked);
    assert!(got.iter().all(|p| index_of(p) != 300));
    assert_eq!(dropped, vec![DropReason::EcnCeNotEct]);
    assert_eq!(sim.t[1].status(now).drops["ecn_ce_not_ect"], 1);
}

#[test]
fn a_ce_on_a_later_piece_reaches_the_reassembled_packet() {
    let (mut sim, now) = established(true);
    let pkt = packet(400, 4000, ECT0);
    let tx = transmit(&mut sim, now, &pkt);
    assert_eq!(tx.len(), 3, "three pieces of at most {BODY} bytes");
    assert!(tx.iter().all(|(_, tos)| tos & ECN_MASK == ECT0));
    // The path marked the last piece only.
    let marked: Vec<_> = tx
        .into_iter()
        .enumerate()
        .map(|(i, (d, tos))| (d, if i == 2 { tos | CE } else { tos }))
        .collect();
    let (got, dropped) = receive(&mut sim, now, marked);
    assert!(dropped.is_empty(), "{dropped:?}");
    let p = got
        .iter()
        .find(|p| index_of(p) == 400)
        .expect("reassembled");
    assert_eq!(p.len(), 4000);
    assert_eq!(inner_ecn(p), CE);
    assert_eq!(p[12..], pkt[12..], "the payload is untouched");
    assert_eq!(sim.t[1].status(now).ecn.ce_carried, 1);
}

#[test]
fn a_plaintext_tunnel_sends_not_ect_outside() {
    let (mut sim, now) = established(false);
    let tx = transmit(&mut sim, now, &packet(500, 200, ECT0));
    assert_eq!(tx[0].1 & ECN_MASK, NOT_ECT);
}
