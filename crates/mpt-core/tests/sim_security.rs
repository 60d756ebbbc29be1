//! Simulation tests of the secure data path: the handshake, a wrong key,
//! packets sent before the first session, tampering and replay, rekeying
//! under traffic (harness in `common/mod.rs`).

mod common;

use std::cmp::Reverse;

use common::*;
use mpt_core::tunnel::{Event, Received};
use mpt_core::wire::HEADER_LEN;

#[test]
fn secure_tunnel_handshakes_and_carries_data() {
    let mut sim = Sim::secure(links(&[(5, 0, 0.0), (20, 2, 0.0)]), 21, security(1, true));
    sim.deliver_until(1_000 * MS);
    assert!(sim.t[0].has_session() && sim.t[1].has_session());
    let up = sim
        .events
        .iter()
        .filter(|e| matches!(e.2, Event::PathUp { .. }))
        .count();
    assert_eq!(up, 4, "both paths up on both sides");
    let end = sim.run_traffic(1_000 * MS, 5_000, 100_000, 0);
    sim.deliver_until(end + 1_000 * MS);
    assert_in_order_exactly_once(&sim.delivered[1], 5_000, &sim.lost_data);
    assert!(sim.drops_seen.is_empty(), "{:?}", sim.drops_seen);
    let st = sim.t[0].status(end);
    let sec = st.security.unwrap();
    assert_eq!(sec.stats.handshakes_completed, 1);
}

#[test]
fn wrong_key_never_gets_a_session() {
    let mut sim = Sim::secure(links(&[(5, 0, 0.0)]), 22, security(1, false));
    sim.deliver_until(5_000 * MS);
    assert!(!sim.t[0].has_session() && !sim.t[1].has_session());
    // The client retried and the failures are counted and reported.
    assert!(count(&sim, 1, DropReason::HandshakeFailed) >= 3);
    assert!(sim.events.iter().any(|e| matches!(
        &e.2,
        Event::Security(mpt_core::crypto::state::CryptoEvent::Failed { .. })
    )));
    // No data passes: the sender has no session. It holds the first
    // packets for one and drops the rest.
    let held = mpt_core::tunnel::STAGED_MAX_PACKETS as u64;
    sim.run_traffic(5_000 * MS, held + 10, MS, 0);
    assert_eq!(sim.t[0].drops().get(DropReason::NoSession), 10);
    assert!(sim.delivered[1].is_empty());
}

#[test]
fn packets_sent_while_the_first_handshake_runs_arrive_without_drops() {
    let mut sim = Sim::secure(links(&[(5, 0, 0.0), (5, 0, 0.0)]), 23, security(1, true));
    // Traffic from the first instant: the handshake takes a round trip.
    let t = sim.run_traffic(0, 100, MS / 5, 0);
    sim.deliver_until(t + 1_000 * MS);
    assert!(sim.t[0].has_session());
    assert_in_order_exactly_once(&sim.delivered[1], 100, &[]);
    for side in 0..2 {
        let drops: Vec<_> = sim.t[side].drops().iter().filter(|(_, n)| *n > 0).collect();
        assert!(drops.is_empty(), "side {side}: {drops:?}");
    }
    let st = sim.t[0].status(t);
    assert!(st.queue.is_some_and(|q| q.stats.staged > 0));
}

#[test]
fn tampered_and_replayed_packets_are_dropped_and_counted() {
    let mut sim = Sim::secure(links(&[(5, 0, 0.0)]), 23, security(1, true));
    sim.deliver_until(1_000 * MS);
    let end = sim.run_traffic(1_000 * MS, 100, MS, 0);
    sim.deliver_until(end + 500 * MS);
    assert_eq!(sim.delivered[1].len(), 100);
    // Replay every captured data packet to the client: none is delivered.
    let old: Vec<_> = sim
        .captured
        .iter()
        .filter(|(to, _, d)| *to == 1 && d[1] == 1)
        .cloned()
        .collect();
    assert!(old.len() >= 100);
    let mut now = end + 600 * MS;
    for (_, path, mut d) in old.clone() {
        now += 1_000;
        assert!(matches!(
            sim.t[1].recv(now, path, addr(0, path), &mut d),
            Received::Dropped(DropReason::Replay)
        ));
    }
    // Flip one bit of a fresh packet: the tag no longer matches.
    sim.captured.clear();
    sim.run_traffic(now, 1, MS, 100);
    let mut fresh = sim.queue.peek().map(|Reverse(e)| e.4.clone()).unwrap();
    let last = fresh.len() - 20;
    fresh[last] ^= 0x01;
    assert_eq!(
        sim.t[1].recv(now, 0, addr(0, 0), &mut fresh),
        Received::Dropped(DropReason::BadTag)
    );
    assert_eq!(sim.t[1].drops().get(DropReason::Replay) as usize, old.len());
    assert_eq!(sim.t[1].drops().get(DropReason::BadTag), 1);
    sim.deliver_until(now + 500 * MS);
    assert_eq!(
        sim.delivered[1].len(),
        101,
        "the genuine packet still arrives once"
    );
}

#[test]
fn rekey_by_packet_count_does_not_interrupt_traffic() {
    let mut client = security(1, true);
    client.rekey_after_packets = 500;
    let mut sim = Sim::secure(links(&[(5, 0, 0.0), (10, 0, 0.0)]), 24, client);
    sim.deliver_until(1_000 * MS);
    // The client sends (it initiates rekeys when its counter passes 500).
    let mut now = 1_000 * MS;
    for i in 0..5_000 {
        sim.deliver_until(now);
        let pkt = inner(i);
        let mut buf = vec![0u8; HEADER_LEN + pkt.len() + 16];
        buf[HEADER_LEN..HEADER_LEN + pkt.len()].copy_from_slice(&pkt);
        if let Some(tx) = sim.t[1].send(now, &mut buf, pkt.len()) {
            buf.truncate(tx.len);
            sim.emit(now, 1, tx.path as usize, buf, Some(i));
        }
        sim.pump_control(now);
        now += 200_000;
    }
    sim.deliver_until(now + 1_000 * MS);
    let rekeys = sim.t[0].status(now).security.unwrap().stats.rekeys;
    assert!(rekeys >= 5, "rekeys {rekeys}");
    assert_in_order_exactly_once(&sim.delivered[0], 5_000, &sim.lost_data);
    assert_eq!(
        count(&sim, 0, DropReason::NoSession) + count(&sim, 0, DropReason::BadTag),
        0
    );
}

#[test]
fn datagrams_queued_before_a_rekey_are_sealed_with_their_own_session() {
    // The I/O layer queues unsealed datagrams and seals them later; a key
    // change in between (here a whole rekey) must not drop them: each is
    // sealed with the session and nonce it was handed.
    let mut client = security(1, true);
    client.rekey_after_packets = 10;
    let mut sim = Sim::secure(links(&[(5, 0, 0.0)]), 31, client);
    sim.deliver_until(1_000 * MS);
    let now = 1_000 * MS;
    let rekeys_before = sim.t[1].status(now).security.unwrap().stats.rekeys;
    let queued: Vec<_> = (0..20)
        .map(|i| {
            let pkt = inner(i);
            let mut buf = vec![0u8; HEADER_LEN + pkt.len() + 16];
            buf[HEADER_LEN..HEADER_LEN + pkt.len()].copy_from_slice(&pkt);
            let tx = sim.t[1].send_unsealed(now, &mut buf, pkt.len()).unwrap();
            buf.truncate(tx.len);
            (buf, tx)
        })
        .collect();
    // The rekey runs to completion while the batch waits.
    sim.pump_control(now);
    sim.deliver_until(now + 100 * MS);
    let later = now + 100 * MS;
    let rekeys = sim.t[1].status(later).security.unwrap().stats.rekeys;
    assert_eq!(
        rekeys,
        rekeys_before + 1,
        "the client changed its session meanwhile"
    );
    let sealer = sim.t[1].sealer();
    let sealed: Vec<_> = queued
        .into_iter()
        .map(|(mut buf, tx)| {
            assert!(sealer.seal(tx.seal, &mut buf), "sealed with its ticket");
            (buf, tx.path as usize)
        })
        .collect();
    for (i, (buf, path)) in sealed.into_iter().enumerate() {
        sim.emit(later, 1, path, buf, Some(i as u64));
    }
    sim.deliver_until(later + 100 * MS);
    assert_eq!(sim.delivered[0], (0..20).collect::<Vec<_>>());
    assert_eq!(
        count(&sim, 0, DropReason::NoSession) + count(&sim, 0, DropReason::BadTag),
        0
    );
}
