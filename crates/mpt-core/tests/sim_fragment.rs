//! Inner packets larger than one datagram, in virtual time: cut into
//! fragments on the sender, reassembled whole and in order on the
//! receiver, over paths of different delays; a lost piece loses its
//! packet only (counted), never glues two packets together, and loss
//! recovery resends single pieces.

mod common;

use common::*;
use mpt_core::qos::QosConfig;
use mpt_core::tunnel::{ReleaseKind, Tunnel};
use mpt_core::wire::{PacketType, HEADER_LEN};
use mpt_core::Nanos;

/// The tunnel MTU and what one datagram carries in these tests.
const MTU: usize = 6000;
const BODY: usize = 1400;

fn side(s: u8, recover: bool) -> Tunnel {
    config(s, recover).tunnel()
}

fn config(s: u8, recover: bool) -> TestConfig {
    TestConfig::new(s, 2)
        .release(ReleaseKind::PathFrontier)
        .recover(recover)
        .reorder(4096, 200 * MS)
        .with(|c| {
            c.mtu = MTU;
            c.datagram_body = Some(BODY);
        })
}

/// Packet `i`'s length: a mix of whole packets and 2 to 5 pieces.
fn len_of(i: u64) -> usize {
    [60, 1400, 1401, 2800, 4000, 6000][(i % 6) as usize]
}

/// Send `count` packets of [`len_of`] from side 0 every `gap`.
fn run(sim: &mut Sim, start: Nanos, count: u64, gap: Nanos) {
    run_as(sim, start, count, gap, false);
}

/// [`run`], each packet built in a buffer of its own and sent with
/// `Tunnel::send_owned` if `owned` (the recovery ring may keep that
/// buffer), else built in the datagram buffer (`send`). Returns how many
/// packets the ring kept without a copy (`send_owned` handed back
/// another buffer).
fn run_as(sim: &mut Sim, start: Nanos, count: u64, gap: Nanos, owned: bool) -> u64 {
    let mut now = start;
    let mut seg = Vec::new();
    let mut kept = 0;
    for idx in 0..count {
        sim.deliver_until(now);
        let pkt = big_inner(idx, len_of(idx));
        let mut buf = vec![0u8; HEADER_LEN + MTU + 16];
        let tx = if owned {
            seg.clear();
            seg.extend_from_slice(&pkt);
            let before = seg.as_ptr();
            let tx = sim.t[0].send_owned(now, &mut seg, &mut buf);
            if seg.as_ptr() != before {
                kept += 1;
            }
            tx.filter(|tx| sim.t[0].sealer().seal(tx.seal, &mut buf[..tx.len]))
        } else {
            buf[HEADER_LEN..HEADER_LEN + pkt.len()].copy_from_slice(&pkt);
            sim.t[0].send(now, &mut buf, pkt.len())
        };
        if let Some(tx) = tx {
            let link = sim.link(0, tx.path as usize);
            buf.truncate(tx.len);
            sim.emit(now, 0, link, buf, Some(idx));
        }
        // The other pieces leave through the queue's poll.
        sim.pump_control(now);
        now += gap;
    }
    sim.deliver_until(now + 2000 * MS);
    kept
}

fn datagrams_of(sim: &Sim, ty: PacketType) -> usize {
    sim.captured
        .iter()
        .filter(|(to, _, d)| *to == 1 && d[1] == ty as u8)
        .count()
}

/// The 600 packets of [`run`] arrived in order, each once and whole; the
/// 400 of them larger than one datagram (1401, 2800, 4000 and 6000
/// bytes: 2, 3, 3 and 5 pieces of at most 1398 bytes, per six packets)
/// as fragments, reassembled, none incomplete.
fn assert_all_600_whole(sim: &Sim) {
    assert_in_order_exactly_once(&sim.delivered[1], 600, &[]);
    assert_eq!(sim.corrupt, 0, "every packet whole, byte for byte");
    assert_eq!(
        datagrams_of(sim, PacketType::Fragment),
        100 * (2 + 3 + 3 + 5)
    );
    assert_eq!(sim.t[1].status(0).fragments.reassembled, 400);
    assert_eq!(sim.t[1].drops().get(DropReason::FragmentIncomplete), 0);
}

#[test]
fn large_packets_cross_as_fragments_and_arrive_whole_in_order() {
    // A 5 ms and a 30 ms path with jitter: packets (and so their pieces)
    // arrive out of order across paths.
    let paths = links(&[(5, 2, 0.0), (30, 3, 0.0)]);
    let mut sim = Sim::with_tunnels(paths, [side(0, false), side(1, false)], 11);
    run(&mut sim, 0, 600, MS);
    assert_all_600_whole(&sim);
    assert_eq!(datagrams_of(&sim, PacketType::Data), 200);
    assert_eq!(sim.t[1].status(0).fragments.datagram_body, BODY);
    // Both paths carried traffic.
    assert!(
        sim.sent_on_path.iter().all(|n| *n > 0),
        "{:?}",
        sim.sent_on_path
    );
}

#[test]
fn with_recovery_on_the_pieces_come_from_the_rings_copy_whole() {
    // With recovery on, a packet's later pieces are cut from the copy the
    // recovery ring keeps (not a second copy of their own): every packet
    // still arrives whole, byte for byte, on paths that reorder.
    let paths = links(&[(5, 2, 0.0), (30, 3, 0.0)]);
    let mut sim = Sim::with_tunnels(paths, [side(0, true), side(1, true)], 11);
    run(&mut sim, 0, 600, MS);
    assert_all_600_whole(&sim);
    assert_eq!(sim.t[0].drops().get(DropReason::FragmentIncomplete), 0);
}

#[test]
fn a_packet_the_ring_keeps_without_a_copy_arrives_whole_and_is_resent() {
    // `send_owned`: the ring keeps the sender's own buffer and the first
    // piece is copied out of it. Every packet arrives whole on reordering
    // paths, and lost pieces are resent from that buffer.
    let paths = links(&[(5, 2, 0.0), (30, 3, 0.0)]);
    let mut sim = Sim::with_tunnels(paths, [side(0, true), side(1, true)], 11);
    let kept = run_as(&mut sim, 0, 600, MS, true);
    assert_all_600_whole(&sim);
    assert_eq!(sim.t[0].drops().get(DropReason::FragmentIncomplete), 0);
    // Of the 400 packets of several pieces, those that leave at once are
    // kept by the ring as they are (those that wait, before the session or
    // in a path's queue, are copied there).
    assert!(kept >= 390, "{kept} of 400 kept without a copy");
    // So with QoS on (the default), whose ordered classes take the same
    // path.
    let paths = links(&[(5, 2, 0.0), (30, 3, 0.0)]);
    let qos = |s| config(s, true).qos(QosConfig::standard()).tunnel();
    let mut sim = Sim::with_tunnels(paths, [qos(0), qos(1)], 11);
    let kept = run_as(&mut sim, 0, 600, MS, true);
    assert_all_600_whole(&sim);
    assert!(kept >= 390, "{kept} of 400 kept without a copy");
    let lossy = links(&[(5, 0, 0.0), (20, 0, 0.03)]);
    let mut sim = Sim::with_tunnels(lossy, [side(0, true), side(1, true)], 5);
    run_as(&mut sim, 0, 600, MS, true);
    assert_eq!(sim.corrupt, 0);
    let rec = sim.t[1].recovery_stats().cloned().unwrap_or_default();
    assert!(rec.recovered > 0, "{rec:?}");
    assert!(sim.delivered[1].len() >= 590, "{}", sim.delivered[1].len());
    // Without recovery it is sent as `send` sends it.
    let paths = links(&[(5, 2, 0.0), (30, 3, 0.0)]);
    let mut sim = Sim::with_tunnels(paths, [side(0, false), side(1, false)], 11);
    run_as(&mut sim, 0, 600, MS, true);
    assert_all_600_whole(&sim);
}

#[test]
fn a_lost_piece_loses_its_packet_only_and_is_counted() {
    let lossy = links(&[(5, 0, 0.03), (20, 0, 0.0)]);
    let mut sim = Sim::with_tunnels(lossy, [side(0, false), side(1, false)], 5);
    run(&mut sim, 0, 600, MS);
    let got = &sim.delivered[1];
    assert!(got.windows(2).all(|w| w[0] < w[1]), "in order, once each");
    assert_eq!(sim.corrupt, 0, "no packet glued from two");
    // Packets that lost a piece wait parked for it (a bounded few), and
    // are counted lost once pushed out.
    let incomplete = sim.t[1].drops().get(DropReason::FragmentIncomplete);
    let parked = sim.t[1].status(0).fragments.parked_now as u64;
    assert!(incomplete + parked > 0, "a 3 % loss hits some pieces");
    // Every missing packet that travelled in pieces is accounted for.
    let missing_cut = (0..600u64)
        .filter(|i| !got.contains(i) && len_of(*i) > BODY)
        .count() as u64;
    assert_eq!(incomplete + parked, missing_cut);
    assert!(got.len() < 600 && got.len() > 500, "{}", got.len());
    assert_eq!(sim.t[1].drops().get(DropReason::BadInner), 0);
}

#[test]
fn recovery_resends_the_lost_pieces() {
    let lossy = links(&[(5, 0, 0.0), (20, 0, 0.03)]);
    let mut sim = Sim::with_tunnels(lossy, [side(0, true), side(1, true)], 5);
    run(&mut sim, 0, 600, MS);
    let got = &sim.delivered[1];
    // A resend that comes after its gap was given up is delivered late,
    // out of order (as a plain network would), but never twice.
    let mut once = got.clone();
    once.sort_unstable();
    once.dedup();
    assert_eq!(once.len(), got.len(), "each packet once");
    assert_eq!(sim.corrupt, 0);
    let rec = sim.t[1].recovery_stats().cloned().unwrap_or_default();
    assert!(rec.recovered > 0, "{rec:?}");
    // Pieces resent on request, as fragments.
    let sent_again = sim.t[0].recovery_stats().map_or(0, |r| r.retransmitted);
    assert!(sent_again > 0);
    // Without recovery the same losses cost whole packets.
    let lossy = links(&[(5, 0, 0.0), (20, 0, 0.03)]);
    let mut plain = Sim::with_tunnels(lossy, [side(0, false), side(1, false)], 5);
    run(&mut plain, 0, 600, MS);
    let without = plain.delivered[1].len();
    assert!(
        got.len() >= 590 && got.len() > without + 10,
        "{} vs {without} of 600",
        got.len()
    );
}

#[test]
fn oversize_and_uncuttable_packets_are_refused_and_counted() {
    let mut t = side(0, false);
    // More than the MTU.
    let mut buf = vec![0u8; HEADER_LEN + MTU + 100];
    let pkt = big_inner(1, MTU + 1);
    buf[HEADER_LEN..HEADER_LEN + pkt.len()].copy_from_slice(&pkt);
    assert!(t.send(0, &mut buf, pkt.len()).is_none());
    assert_eq!(t.drops().get(DropReason::TooBig), 1);
}
