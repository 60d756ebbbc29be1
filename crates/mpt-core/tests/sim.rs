//! Simulation tests of the data path: delay, jitter, loss, failover, NAT
//! rebinding, loss recovery (harness in `common/mod.rs`; security and
//! rekeying in `sim_security.rs`).

mod common;

use std::net::SocketAddr;

use common::*;
use mpt_core::tunnel::{Event, Received, RecvStart, ReleaseKind, Tunnel};
use mpt_core::wire::HEADER_LEN;

#[test]
fn different_delays_and_loss_deliver_everything_in_order() {
    for release in [ReleaseKind::Timeout, ReleaseKind::PathFrontier] {
        let mut sim = Sim::new(
            links(&[(5, 1, 0.0), (20, 3, 0.01), (40, 0, 0.02)]),
            release,
            7,
        );
        sim.deliver_until(1_000 * MS); // paths come up
        assert!(
            sim.events
                .iter()
                .filter(|e| matches!(e.2, Event::PathUp { .. }))
                .count()
                >= 6
        );
        let end = sim.run_traffic(1_000 * MS, 20_000, 100_000, 0); // 10k pkt/s
        sim.deliver_until(end + 2_000 * MS);
        assert_in_order_exactly_once(&sim.delivered[1], 20_000, &sim.lost_data);
        assert!(!sim.lost_data.is_empty());
        assert!(sim.drops_seen.is_empty(), "{:?}", sim.drops_seen);
        // Equal weights, but loss adaptation favours the paths that lose less.
        let s = &sim.sent_on_path;
        assert!(s[0] > s[1] && s[1] > s[2], "{s:?}");
        assert_eq!(s.iter().sum::<u64>(), 20_000);
    }
}

#[test]
fn path_frontier_releases_losses_sooner_than_timeout() {
    // With loss, gaps are held; the frontier policy should hold them far less.
    let mut held = vec![];
    for release in [ReleaseKind::Timeout, ReleaseKind::PathFrontier] {
        let mut sim = Sim::new(links(&[(5, 0, 0.01), (10, 0, 0.01)]), release, 11);
        sim.deliver_until(1_000 * MS);
        let end = sim.run_traffic(1_000 * MS, 5_000, 200_000, 0);
        sim.deliver_until(end + 2_000 * MS);
        assert_in_order_exactly_once(&sim.delivered[1], 5_000, &sim.lost_data);
        let s = sim.t[1].reorder_stats().clone();
        held.push((s.timeout_releases, s.policy_releases));
    }
    assert!(held[0].0 > 0 && held[0].1 == 0, "{held:?}");
    assert!(held[1].1 > 0 && held[1].0 < held[0].0, "{held:?}");
}

#[test]
fn failover_moves_traffic_and_recovers() {
    let mut sim = Sim::new(
        links(&[(5, 0, 0.0), (5, 0, 0.0)]),
        ReleaseKind::PathFrontier,
        3,
    );
    sim.deliver_until(1_000 * MS);
    let t = sim.run_traffic(1_000 * MS, 1_000, MS, 0);
    // Cut path 1 in both directions.
    sim.links[1][0].up = false;
    sim.links[1][1].up = false;
    let cut_at = t;
    let t = sim.run_traffic(t, 2_000, MS, 1_000);
    let down = sim
        .events
        .iter()
        .find(|(_, side, e)| *side == 0 && matches!(e, Event::PathDown { path: 1, .. }))
        .expect("path 1 declared down")
        .0;
    assert!(
        down - cut_at <= 1_000 * MS,
        "detected after {} ms",
        (down - cut_at) / MS
    );
    let before = sim.sent_on_path[1];
    sim.run_traffic(t, 100, MS, 3_000);
    assert_eq!(sim.sent_on_path[1], before, "no data on a dead path");
    // Restore; the path returns and carries traffic again.
    sim.links[1][0].up = true;
    sim.links[1][1].up = true;
    let t = sim.run_traffic(t + 100 * MS, 2_000, MS, 3_100);
    sim.deliver_until(t + 1_000 * MS);
    assert!(sim.sent_on_path[1] > before + 500);
    assert_in_order_exactly_once(&sim.delivered[1], 5_100, &sim.lost_data);
}

#[test]
fn hard_send_error_takes_path_out_at_once() {
    let mut sim = Sim::new(
        links(&[(5, 0, 0.0), (5, 0, 0.0)]),
        ReleaseKind::PathFrontier,
        9,
    );
    sim.deliver_until(1_000 * MS);
    sim.t[0].on_send_error(1, false, 1_000 * MS);
    assert!(
        sim.t[0].path(1).unwrap().up,
        "soft errors do not take a path down"
    );
    sim.t[0].on_send_error(1, true, 1_000 * MS);
    assert!(!sim.t[0].path(1).unwrap().up);
    let before = sim.sent_on_path[1];
    sim.run_traffic(1_000 * MS, 10, 10_000, 0);
    assert_eq!(sim.sent_on_path[1], before);
    // Heard again (the peer's next probe): back in the schedule.
    sim.deliver_until(1_300 * MS);
    assert!(sim.t[0].path(1).unwrap().up);
    assert_eq!(
        sim.t[0]
            .drops()
            .get(mpt_core::stats::DropReason::SendFailed),
        2
    );
}

#[test]
fn all_paths_down_counts_drops_and_recovers() {
    let mut sim = Sim::new(links(&[(5, 0, 0.0)]), ReleaseKind::PathFrontier, 5);
    sim.deliver_until(1_000 * MS);
    sim.links[0] = [Link {
        up: false,
        ..sim.links[0][0]
    }; 2];
    let t = sim.run_traffic(1_000 * MS, 2_000, MS, 0);
    assert!(sim.events.iter().any(|e| e.2 == Event::AllPathsDown));
    let no_path = sim.t[0].drops().get(mpt_core::stats::DropReason::NoPath);
    assert!(no_path > 1_000, "{no_path}");
    sim.links[0] = [Link {
        up: true,
        ..sim.links[0][0]
    }; 2];
    sim.deliver_until(t + 1_000 * MS);
    let t = sim.run_traffic(t + 1_000 * MS, 100, MS, 10_000);
    sim.deliver_until(t + 1_000 * MS);
    let tail: Vec<u64> = sim.delivered[1]
        .iter()
        .copied()
        .filter(|i| *i >= 10_000)
        .collect();
    assert_eq!(tail, (10_000..10_100).collect::<Vec<_>>());
}

#[test]
fn server_follows_the_client_to_a_new_address() {
    let mut sim = Sim::secure_learning(links(&[(5, 0, 0.0)]), 25);
    sim.deliver_until(1_000 * MS);
    let t = sim.run_traffic(1_000 * MS, 50, MS, 0);
    // NAT rebinding: the client's packets now come from another address.
    let new: SocketAddr = "192.0.2.99:40000".parse().unwrap();
    sim.client_src[0] = new;
    sim.deliver_until(t + 300 * MS);
    assert!(sim
        .events
        .iter()
        .any(|e| matches!(e.2, Event::RemoteChanged { path: 0, to, .. } if to == new)));
    // An unauthenticated packet from a third address does not move it.
    let mut junk = vec![0u8; 100];
    junk[0] = 1;
    junk[1] = 1;
    junk[4] = 9;
    let r = sim.t[0].recv(t + 300 * MS, 0, "203.0.113.5:1".parse().unwrap(), &mut junk);
    assert!(matches!(r, Received::Dropped(_)));
    assert_eq!(sim.t[0].path(0).unwrap().remote, Some(new));
}

#[test]
fn loss_adaptation_moves_traffic_off_a_lossy_path() {
    let mut sim = Sim::new(
        links(&[(5, 0, 0.0), (5, 0, 0.05)]),
        ReleaseKind::PathFrontier,
        31,
    );
    sim.deliver_until(1_000 * MS);
    let t = sim.run_traffic(1_000 * MS, 20_000, 100_000, 0);
    let before = sim.sent_on_path.clone();
    sim.run_traffic(t, 10_000, 100_000, 20_000);
    let late: Vec<u64> = sim
        .sent_on_path
        .iter()
        .zip(&before)
        .map(|(a, b)| a - b)
        .collect();
    let share = late[1] as f64 / (late[0] + late[1]) as f64;
    assert!(
        share < 0.1,
        "lossy path still carries {share:.2} of the traffic"
    );
    let f = sim.t[0].path(1).unwrap().weight_factor;
    assert!(f < 0.2, "{f}");
    assert!(sim.t[0].path(0).unwrap().weight_factor > 0.9);
}

#[test]
fn batches_sealed_and_opened_apart_from_the_state_changes() {
    // The I/O layer's worker path: a batch is made with send_unsealed, then
    // sealed; the receiver runs recv_start over the batch, opens all of it,
    // then recv_finish in order. A duplicate inside the batch opens too but
    // must be dropped as a replay; an unsealed datagram fails its tag.
    let mut sim = Sim::secure(links(&[(5, 0, 0.0)]), 29, security(1, true));
    sim.deliver_until(1_000 * MS);
    assert!(sim.t[0].has_session() && sim.t[1].has_session());
    let now = 1_000 * MS;
    let (mut batch, tickets): (Vec<Vec<u8>>, Vec<_>) = (0..32)
        .map(|i| {
            let pkt = inner(i);
            let mut buf = vec![0u8; HEADER_LEN + pkt.len() + 16];
            buf[HEADER_LEN..HEADER_LEN + pkt.len()].copy_from_slice(&pkt);
            let tx = sim.t[0].send_unsealed(now, &mut buf, pkt.len()).unwrap();
            buf.truncate(tx.len);
            (buf, tx.seal)
        })
        .unzip();
    let plain_copy = batch[7].clone();
    let sealer = sim.t[0].sealer();
    assert!(batch
        .iter_mut()
        .zip(&tickets)
        .all(|(d, t)| sealer.seal(*t, d)));
    assert_ne!(batch[7], plain_copy, "sealing changed the datagram");
    batch.insert(6, batch[5].clone());
    batch.push(plain_copy);
    let from = addr(0, 0);
    let starts: Vec<_> = batch
        .iter()
        .map(|d| sim.t[1].recv_start(now, 0, from, d, 0))
        .collect();
    let tickets: Vec<_> = starts
        .iter()
        .map(|s| match s {
            RecvStart::Open(t) => *t,
            other => panic!("not passed on: {other:?}"),
        })
        .collect();
    let opener = sim.t[1].opener();
    let opened: Vec<_> = batch
        .iter_mut()
        .zip(&tickets)
        .map(|(d, t)| opener.open(t, d))
        .collect();
    let mut got = vec![];
    let mut drops = vec![];
    for ((d, o), t) in batch.iter_mut().zip(opened).zip(&tickets) {
        match sim.t[1].recv_finish(now, from, d, t, o) {
            Received::Deliver { offset, len } => got.push(index_of(&d[offset..offset + len])),
            Received::Dropped(r) => drops.push(r),
            Received::Consumed => {}
        }
    }
    assert_eq!(got, (0..32).collect::<Vec<_>>());
    assert_eq!(drops, vec![DropReason::Replay, DropReason::BadTag]);
}

#[test]
fn recovery_resends_what_a_lossy_path_lost() {
    // Four 5 ms paths, one losing 3 %: with recovery on both peers, the
    // receiver asks for each gap the frontier proves lost and the sender
    // resends it on a clean path, so (nearly) nothing is lost end to end;
    // without it, every loss reaches the inner packets.
    let spec = [(5, 0, 0.03), (5, 0, 0.0), (5, 0, 0.0), (5, 0, 0.0)];
    let mut results = vec![];
    for recover in [false, true] {
        let t = [0u8, 1].map(|side| {
            let mut c = config(side, 4, ReleaseKind::PathFrontier, None);
            c.recover = recover;
            c.adapt_to_loss = false;
            Tunnel::new(c, 0)
        });
        let mut sim = Sim::with_tunnels(links(&spec), t, 31);
        sim.deliver_until(1_000 * MS);
        let end = sim.run_traffic(1_000 * MS, 20_000, 100_000, 0);
        sim.deliver_until(end + 2_000 * MS);
        let d = &sim.delivered[1];
        assert!(d.windows(2).all(|w| w[0] < w[1]), "in order, once");
        let lost = sim.lost_data.len();
        assert!(lost > 100, "the path lost packets: {lost}");
        let stats = sim.t[1].recovery_stats().cloned();
        let sender = sim.t[0].recovery_stats().cloned();
        results.push((d.len(), lost, stats, sender));
    }
    let (plain_delivered, plain_lost, none, _) = &results[0];
    assert_eq!(*plain_delivered, 20_000 - plain_lost);
    assert!(none.is_none());
    let (delivered, lost, rx, tx) = &results[1];
    let (rx, tx) = (rx.clone().unwrap(), tx.clone().unwrap());
    println!("recovery: {lost} lost on the path, {delivered} of 20000 delivered; {rx:?}; {tx:?}");
    assert!(
        *delivered >= 20_000 - lost / 20,
        "{delivered} delivered, {lost} lost"
    );
    assert!(rx.recovered as usize >= lost * 9 / 10, "{rx:?}");
    assert!(tx.retransmitted >= rx.recovered);
    assert_eq!(rx.gave_up as usize, 20_000 - delivered);
}

/// Two equal paths, the second a backup; path-aware (ECF) or weighted.
fn with_backup(ecf: bool, seed: u64) -> Sim {
    let cfg = |side: u8| {
        let c = TestConfig::new(side, 2).with(|c| c.paths[1].backup = true);
        if ecf {
            c.ecf().tunnel()
        } else {
            c.tunnel()
        }
    };
    Sim::with_tunnels(links(&[(5, 0, 0.0), (5, 0, 0.0)]), [cfg(0), cfg(1)], seed)
}

#[test]
fn a_backup_path_carries_data_only_while_no_other_path_is_up() {
    for ecf in [false, true] {
        let mut sim = with_backup(ecf, 7);
        sim.deliver_until(1_000 * MS);
        let t = sim.run_traffic(1_000 * MS, 1_000, MS, 0);
        assert_eq!(
            sim.sent_on_path[1], 0,
            "ecf {ecf}: backup used while the primary is up"
        );
        // The primary fails: the backup takes over.
        sim.links[0][0].up = false;
        sim.links[0][1].up = false;
        let t = sim.run_traffic(t, 2_000, MS, 1_000);
        assert!(
            sim.sent_on_path[1] > 1_000,
            "ecf {ecf}: {:?}",
            sim.sent_on_path
        );
        // The primary returns: the backup goes back to standing by.
        sim.links[0][0].up = true;
        sim.links[0][1].up = true;
        let t = sim.run_traffic(t, 1_000, MS, 3_000);
        let standby = sim.sent_on_path[1];
        let t = sim.run_traffic(t, 1_000, MS, 4_000);
        sim.deliver_until(t + 1_000 * MS);
        assert_eq!(
            sim.sent_on_path[1], standby,
            "ecf {ecf}: backup used after the return"
        );
        assert_in_order_exactly_once(&sim.delivered[1], 5_000, &sim.lost_data);
    }
}

#[test]
fn a_returning_path_comes_up_once_without_a_flap() {
    for seed in 0..20 {
        let mut sim = Sim::new(
            links(&[(5, 0, 0.0), (20, 0, 0.0)]),
            ReleaseKind::PathFrontier,
            seed,
        );
        sim.deliver_until(1_000 * MS);
        for l in &mut sim.links[1] {
            l.up = false;
        }
        sim.deliver_until(3_000 * MS);
        let restored = 3_000 * MS + seed * 7 * MS;
        sim.deliver_until(restored);
        for l in &mut sim.links[1] {
            l.up = true;
        }
        sim.deliver_until(restored + 2_000 * MS);
        for side in 0..2 {
            let changes: Vec<_> = sim
                .events
                .iter()
                .filter(|(t, s, _)| *t >= restored && *s == side)
                .filter_map(|(t, _, e)| match e {
                    Event::PathUp { path: 1 } => Some((t / MS, "up")),
                    Event::PathDown { path: 1, .. } => Some((t / MS, "down")),
                    _ => None,
                })
                .collect();
            assert_eq!(changes.len(), 1, "seed {seed} side {side}: {changes:?}");
        }
    }
}

/// The header's timestamp is 32 bits of microseconds: each side widens it
/// near its own clock less the last transit, so peers whose clocks are
/// hours apart, or about half the 71.6-minute range apart, measure the
/// same round trips, one-way delay differences and jitter as peers whose
/// clocks agree. (2147.504 s and -2147.464 s put the 20 ms path's transits,
/// ±2 ms, across half the 32-bit range: widened near the own clock alone,
/// they would read 71.6 minutes apart from packet to packet.)
#[test]
fn peers_with_clocks_far_apart_measure_as_if_they_agreed() {
    let mut seen = vec![];
    for offset_ms in [0i64, 3 * 3_600_000, -50 * 60_000, 2_147_504, -2_147_464] {
        let mut sim = Sim::new(
            links(&[(5, 0, 0.0), (20, 2, 0.0)]),
            ReleaseKind::PathFrontier,
            3,
        );
        // Wall clocks of today (the UNIX epoch is not representable less 3 h).
        let epoch_ms = 1_790_000_000_000;
        sim.t[0].set_wall_offset(epoch_ms * 1_000_000);
        sim.t[1].set_wall_offset((epoch_ms + offset_ms) * 1_000_000);
        sim.deliver_until(1_000 * MS);
        let end = sim.run_traffic(1_000 * MS, 4_000, 250_000, 0);
        sim.deliver_until(end + 1_000 * MS);
        assert_in_order_exactly_once(&sim.delivered[1], 4_000, &sim.lost_data);
        assert!(sim.drops_seen.is_empty(), "{:?}", sim.drops_seen);
        for side in 0..2 {
            let st = sim.t[side].status(end + 1_000 * MS);
            let p: Vec<_> = st
                .paths
                .iter()
                .map(|p| {
                    (
                        p.rtt_min_ms.unwrap().round() as i64,
                        p.jitter_ms.unwrap() < 3.0,
                        p.rx_queueing_ms.unwrap() < 5.0,
                    )
                })
                .collect();
            seen.push((offset_ms, side, p));
        }
    }
    for (offset_ms, side, p) in &seen {
        assert_eq!(p, &seen[*side].2, "offset {offset_ms} ms, side {side}");
        // The 20 ms path jitters by ±2 ms each way: its lowest round
        // trip is 40 ms to within the rounding of what the draws gave.
        assert_eq!(p[0].0, 10, "{seen:?}");
        assert!((p[1].0 - 40).abs() <= 1, "{seen:?}");
    }
}

/// `mpt path NAME down`: the path carries no data (a backup takes over if
/// it is the only other one), stays probed and up, and `up` brings it back;
/// nothing is lost on the way. An unknown name is refused with the names.
#[test]
fn an_administratively_down_path_carries_no_data_until_it_is_up_again() {
    for ecf in [false, true] {
        let mut sim = with_backup(ecf, 9);
        sim.deliver_until(1_000 * MS);
        assert!(sim.t[0]
            .set_admin_down("nope", true)
            .unwrap_err()
            .contains("p0, p1"));
        assert_eq!(sim.t[0].set_admin_down("p0", true), Ok(0));
        let t = sim.run_traffic(1_000 * MS, 1_000, MS, 0);
        assert_eq!(sim.sent_on_path[0], 0, "ecf {ecf}: {:?}", sim.sent_on_path);
        let st = sim.t[0].status(t);
        assert!(st.paths[0].admin_down && st.paths[0].state == "up");
        assert_eq!(sim.t[0].set_admin_down("p0", false), Ok(0));
        let backup = sim.sent_on_path[1];
        let t = sim.run_traffic(t, 1_000, MS, 1_000);
        sim.deliver_until(t + 1_000 * MS);
        assert_eq!(sim.sent_on_path[1], backup, "ecf {ecf}: backup after up");
        assert!(!sim.t[0].status(t).paths[0].admin_down);
        assert_in_order_exactly_once(&sim.delivered[1], 2_000, &sim.lost_data);
    }
}
