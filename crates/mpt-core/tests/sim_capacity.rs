//! Path-aware sending (ECF over paced paths, the daemon's default) on
//! links with a capacity, in virtual time: each link is a drop-tail
//! bottleneck at its rate, then its delay and jitter (FIFO, as the lab's
//! emulator has it). Side 0 offers more than the links' sum, open loop;
//! what each link carried is measured after a warm-up.
//!
//! What it checks: the sender fills every link to near its rate, also one
//! whose delay jitters by several milliseconds, when it offers more than
//! the links carry; and a TCP-like flow (closed loop, its losses seen as
//! gaps in what the tunnel delivers) fills two links. The sweep's finding
//! is reproduced here: beside a clean link, one whose FIFO jitter spans
//! 30 ms carries little of a TCP flow (its rate control reads the jitter
//! as a queue and cuts; the reorder buffer waits for its late packets).

mod common;

use common::capacity::{offer, sweep_link, tcp_goodput_seeded, PKT};
use common::*;
use mpt_core::Nanos;

/// Links of (rate Mbit/s, delay ms, jitter ms), each with a 50 ms
/// drop-tail bottleneck queue.
fn capacity_links(spec: &[(f64, u64, u64)]) -> Vec<Link> {
    spec.iter()
        .map(|&(rate, d, j)| Link {
            delay: d * MS,
            jitter: j * MS,
            loss: 0.0,
            up: true,
            rate_mbit: rate,
            queue_ns: 50 * MS,
        })
        .collect()
}

/// Links of (rate Mbit/s, delay ms, jitter ms); side 0 offers `offer_mbit`
/// for `secs`; the Mbit/s each link carried over the last `secs - 2` s.
fn carried(spec: &[(f64, u64, u64)], offer_mbit: f64, secs: u64) -> Vec<f64> {
    let links = capacity_links(spec);
    let n = links.len();
    let t = [
        TestConfig::new(0, n).ecf().with(|c| c.mtu = 1500).tunnel(),
        TestConfig::new(1, n).ecf().with(|c| c.mtu = 1500).tunnel(),
    ];
    let mut sim = Sim::with_tunnels(links, t, 7);
    sim.deliver_until(500 * MS);
    let gap = (PKT as f64 * 8_000.0 / offer_mbit) as Nanos;
    let start = 500 * MS;
    let warm = start + 2_000 * MS;
    let end = start + secs * 1_000 * MS;
    let mut at_warm = vec![0u64; n];
    let mut now = start;
    let mut idx = 0u64;
    let mut warmed = false;
    while now < end {
        sim.deliver_until(now);
        if !warmed && now >= warm {
            at_warm = sim.arrived_bytes.iter().map(|b| b[0]).collect();
            warmed = true;
        }
        offer(&mut sim, now, idx);
        idx += 1;
        sim.pump_control(now);
        now += gap;
    }
    let span = (end - warm) as f64 / 1e9;
    sim.arrived_bytes
        .iter()
        .zip(&at_warm)
        .map(|(b, w)| (b[0] - w) as f64 * 8.0 / span / 1e6)
        .collect()
}

#[test]
fn two_equal_links_are_both_filled() {
    let got = carried(&[(50.0, 10, 0), (50.0, 10, 0)], 120.0, 6);
    println!("50 + 50 Mbit/s: {got:.1?}");
    assert!(got.iter().all(|m| *m > 40.0), "{got:.1?}");
}

#[test]
fn a_link_with_jitter_is_filled_beside_a_clean_one() {
    let got = carried(&[(50.0, 10, 0), (50.0, 20, 6)], 120.0, 6);
    println!("50 Mbit/s 10 ms + 50 Mbit/s 20 ms with 6 ms jitter: {got:.1?}");
    assert!(got[0] > 40.0, "{got:.1?}");
    assert!(got[1] > 40.0, "the jittery link: {got:.1?}");
}

/// A link that keeps its packets in order behind a late one holds a delay
/// of two to three times its jitter at any load, which the rate control
/// took for a queue of its own: 50 Mbit/s with jitter drawn over 28 ms
/// (the lab's 8 ms standard deviation) carried 18 Mbit/s open loop
/// (`delay_undrained.rs`).
#[test]
fn a_jittery_links_own_delay_is_not_taken_for_a_queue() {
    let got = carried(&[(50.0, 20, 28)], 65.0, 6);
    println!("50 Mbit/s 20 ms with 28 ms of jitter: {got:.1?}");
    assert!(got[0] > 35.0, "{got:.1?}");
}

/// A fast link whose FIFO jitter grows its queue reading with the rate
/// (the lab's sweep, seed 1, case 12: 149 Mbit/s, 76 ms, 3.6 ms of
/// jitter, drawn here over 13 ms): the jitter reported under load is a
/// fraction of what it was at the start, and a target from it alone held
/// the link at about 30 Mbit/s (`delay.rs`, the jitter's peak).
#[test]
fn a_fast_jittery_link_is_paced_near_its_capacity() {
    let got = carried(&[(150.0, 76, 13)], 195.0, 6);
    println!("150 Mbit/s 76 ms with 13 ms of jitter: {got:.1?}");
    assert!(got[0] > 120.0, "{got:.1?}");
}

#[test]
fn below_the_links_sum_everything_offered_is_carried() {
    for spec in [
        [(50.0, 10, 0), (50.0, 20, 6)],
        [(50.0, 10, 0), (20.0, 40, 8)],
        [(100.0, 5, 0), (30.0, 60, 4)],
    ] {
        let sum: f64 = spec.iter().map(|s| s.0).sum();
        let offer = 0.9 * sum;
        let got = carried(&spec, offer, 6);
        let total: f64 = got.iter().sum();
        println!("{spec:?} offered {offer:.0}: {got:.1?} = {total:.1}");
        assert!(total > 0.95 * offer, "{spec:?}: {got:.1?}");
    }
}

/// A fast link losing 2.4 % of its packets at random (the lab's sweep,
/// seed 505: 169 Mbit/s of 62 ms): with resends alone each loss held
/// everything behind it for a round trip, a hold nearly always open, and
/// the flow carried 4.5-36 % of the link; forward error correction, on
/// as the daemon has it, rebuilds most losses from the packets after them
/// (`fec.rs`): 80-86 % over three seeds.
#[test]
fn a_fast_lossy_link_s_losses_are_rebuilt_instead_of_waited_for() {
    let got = tcp_goodput_over(vec![sweep_link(169.0, 62.0, 0.0, 0.024)], 10, 6);
    println!("169 Mbit/s of 62 ms losing 2.4 %: TCP {got:.1} Mbit/s");
    assert!(got > 0.6 * 169.0, "{got:.1}");
}

/// One TCP-like flow (Reno slow start, multiplicative decrease by 0.7,
/// losses seen as gaps in what the tunnel delivers, acknowledgements back
/// after `ack_ms`) through the tunnel over links of (rate Mbit/s, delay
/// ms, jitter ms) for `secs`: its goodput over the last `secs - 2` s,
/// Mbit/s.
fn tcp_goodput(spec: &[(f64, u64, u64)], ack_ms: u64, secs: u64) -> f64 {
    tcp_goodput_over(capacity_links(spec), ack_ms, secs)
}

/// [`tcp_goodput`] over links given whole (with loss).
fn tcp_goodput_over(links: Vec<Link>, ack_ms: u64, secs: u64) -> f64 {
    tcp_goodput_seeded(links, ack_ms, secs, 11)
}

#[test]
fn one_tcp_flow_over_a_clean_and_a_jittery_link() {
    // Two clean links: the flow fills both.
    let clean = tcp_goodput(&[(50.0, 10, 0), (50.0, 20, 6)], 10, 6);
    println!("50 + 50 Mbit/s (6 ms of jitter on one): TCP {clean:.1} Mbit/s");
    assert!(clean > 90.0, "{clean:.1}");
    // A link whose delay jitters by up to 30 ms (FIFO: under load, a
    // standing delay that grows with the rate) beside a clean one: the
    // known limit of the sweep (docs/results-notes.md): the flow uses it
    // little. Kept as a floor, to be raised.
    let jittery = tcp_goodput(&[(50.0, 10, 0), (50.0, 20, 30)], 10, 6);
    println!("50 + 50 Mbit/s (up to 30 ms of jitter on one): TCP {jittery:.1} Mbit/s");
    assert!(jittery > 50.0, "{jittery:.1}");
}

/// Three links, two of them jittery (the sweep's case 1 of seed 1, where
/// mpt read 61 % against MPTCP's 83 %), with loss recovery on as the
/// daemon has it. Two timers stayed due here, and the daemon's event loop
/// would have run them without sleeping (the simulation's harness fails
/// on a timer that stays due at one instant): a gap the release policy
/// gave up, held for recovery's answer, left the policy's deadline in the
/// past until then; and recovery's own deadline stayed due when nothing
/// else was held. The flow carries at least half the links' sum (the
/// TCP-like model's figure swings from 58 to 97 % with the jitter's
/// draws here; the check is the harness's).
#[test]
fn held_gaps_do_not_keep_the_timers_due() {
    for (j1, j2) in [(21, 17), (20, 16)] {
        let links = capacity_links(&[(9.0, 58, j1), (17.0, 73, j2), (20.0, 30, 0)]);
        let got = tcp_goodput_over(links, 10, 8);
        println!("9 + 17 + 20 Mbit/s, jitter {j1} and {j2} ms: TCP {got:.1} Mbit/s");
        assert!(got > 0.5 * 46.0, "{got:.1}");
    }
}

#[test]
fn resends_keep_to_the_paths_pacing() {
    // Two 4 Mbit/s paths, the short one losing 5 % and trains of
    // packets: what it loses is sent again on the long one. Those resends once left at once, unpaced, on
    // top of the path's paced data: a train of them filled the bottleneck
    // buffer, and what overflowed was asked for again (on two 4 Mbit/s
    // links of 5 and 30 ms in the lab, 11 % of the short path's packets
    // were lost and TCP had 75 % of the links).
    let mut links = capacity_links(&[(4.0, 5, 0), (4.0, 30, 0)]);
    links[0].loss = 0.05;
    let t = |side| {
        TestConfig::new(side, 2)
            .ecf()
            .recover(true)
            .with(|c| c.mtu = 1500)
            .tunnel()
    };
    let mut sim = Sim::with_tunnels(links, [t(0), t(1)], 5);
    let start = 500 * MS;
    open_loop(&mut sim, 7.0, 6_500 * MS, |sim, now| {
        // Every second the short path loses 60 ms in a row (a radio
        // fade): a train of losses, resent together.
        sim.links[0][0].up = (now - start) % (1_000 * MS) >= 60 * MS;
    });
    let resent = sim.t[0].recovery_stats().map_or(0, |r| r.retransmitted);
    assert!(resent > 50, "the short path's losses were resent: {resent}");
    // Bytes side 0 put on each link within any 20 ms, after the start:
    // the pacing bucket's depth (16 KiB here) and 20 ms at the path's
    // rate (4 Mbit/s and the rate control's headroom: 12.5 kB), and a
    // datagram of slack.
    let bound = 16 * 1024 + 12_500 + 1_500;
    for link in 0..2 {
        let most = most_within(&sim, link, start + 2_000 * MS, 20 * MS);
        println!("link {link}: at most {most} bytes within 20 ms ({resent} resends)");
        assert!(most <= bound, "link {link}: {most} bytes within 20 ms");
    }
}

#[test]
fn resends_older_than_any_wait_do_not_starve_the_data() {
    // One 2 Mbit/s path of 40 ms: the start's 50 Mbit/s overflows its
    // buffer, and the receiver asks for hundreds of packets at once.
    // Resends go ahead of the path's data; once they waited for its budget
    // without bound, seconds of them, all too late for a receiver that
    // waits half a second at most, and the data queue starved meanwhile.
    let links = capacity_links(&[(2.0, 40, 0)]);
    let t = |side| {
        TestConfig::new(side, 1)
            .ecf()
            .recover(true)
            .with(|c| c.mtu = 1500)
            .tunnel()
    };
    let mut sim = Sim::with_tunnels(links, [t(0), t(1)], 5);
    let start = 500 * MS;
    open_loop(&mut sim, 10.0, 4_500 * MS, |_, _| {});
    let r = sim.t[0].recovery_stats().cloned().unwrap_or_default();
    // New data (an index's first departure) side 0 sent from 1.5 s on.
    let mut seen = std::collections::HashSet::new();
    let new_bytes: usize = sim
        .departures
        .iter()
        .filter(|d| d.1 == 0)
        .filter_map(|d| d.4.filter(|i| seen.insert(*i)).map(|_| (d.0, d.3)))
        .filter(|(at, _)| *at >= start + 1_000 * MS)
        .map(|(_, len)| len)
        .sum();
    let mbit = new_bytes as f64 * 8.0 / 3.0 / 1e6;
    println!("new data {mbit:.2} Mbit/s; {r:?}");
    assert!(r.resends_expired > 0, "{r:?}");
    assert!(mbit > 1.85, "new data at {mbit:.2} Mbit/s of 2");
}

/// The most bytes side 0 put on `link` within any `window`, from `from`
/// on.
fn most_within(sim: &Sim, link: usize, from: Nanos, window: Nanos) -> usize {
    let sent: Vec<(Nanos, usize)> = sim
        .departures
        .iter()
        .filter(|d| d.1 == 0 && d.2 == link && d.0 >= from)
        .map(|d| (d.0, d.3))
        .collect();
    let (mut j, mut sum, mut most) = (0, 0, 0);
    for &(at, len) in &sent {
        sum += len;
        while sent[j].0 + window <= at {
            sum -= sent[j].1;
            j += 1;
        }
        most = most.max(sum);
    }
    most
}

/// Two paths of 4 Mbit/s (10 and 30 ms), path-aware sending, one-datagram
/// MTU; side 0 offers `offer_mbit` open loop from 0.5 s to `end`, and
/// `each(sim, now)` runs before each offer (to change the links).
fn two_slow_paths_open_loop(offer_mbit: f64, end: Nanos, each: impl FnMut(&mut Sim, Nanos)) -> Sim {
    let links = capacity_links(&[(4.0, 10, 0), (4.0, 30, 0)]);
    let t = |side| {
        TestConfig::new(side, 2)
            .ecf()
            .with(|c| c.mtu = 1500)
            .tunnel()
    };
    let mut sim = Sim::with_tunnels(links, [t(0), t(1)], 5);
    open_loop(&mut sim, offer_mbit, end, each);
    sim
}

/// Side 0 offers `offer_mbit` open loop from 0.5 s (the tunnel up) to
/// `end`; `each(sim, now)` runs before each offer (to change the links).
fn open_loop(sim: &mut Sim, offer_mbit: f64, end: Nanos, mut each: impl FnMut(&mut Sim, Nanos)) {
    sim.deliver_until(500 * MS);
    let gap = (PKT as f64 * 8_000.0 / offer_mbit) as Nanos;
    let (mut now, mut idx) = (500 * MS, 0u64);
    while now < end {
        sim.deliver_until(now);
        each(sim, now);
        offer(sim, now, idx);
        idx += 1;
        sim.pump_control(now);
        now += gap;
    }
}

#[test]
fn a_dead_paths_queue_moves_to_the_other_paced() {
    // Two 4 Mbit/s paths, side 0 offering 12: both queues fill. Then the
    // first link dies. Its queue once left at once on the other path:
    // hundreds of ms of data into a 50 ms bottleneck, and that path then
    // owed its pacer as long, and sent nothing. Now the queue moves to
    // the other path's queue and leaves at its pace; what would wait
    // there beyond the queue's bound is dropped.
    let (cut, end) = (3_500 * MS, 6_500 * MS);
    let mut at_cut = 0;
    let sim = two_slow_paths_open_loop(12.0, end, |sim, now| {
        if now >= cut && sim.links[0][0].up {
            sim.links[0] = [Link {
                up: false,
                ..sim.links[0][0]
            }; 2];
            at_cut = sim.arrived_bytes[1][0];
        }
    });
    let now = end;
    let st = sim.t[0].status(now);
    assert_eq!(st.paths[0].state, "down", "the dead path is down");
    let rerouted = st.queue.as_ref().map_or(0, |q| q.stats.rerouted);
    assert!(rerouted > 0, "its queue moved: {rerouted}");
    // The living path keeps its pace (bucket, 20 ms at its rate with the
    // rate control's headroom, a datagram) and carries its rate after the
    // cut.
    let most = most_within(&sim, 1, cut, 20 * MS);
    assert!(
        most <= 16 * 1024 + 12_500 + 1_500,
        "{most} bytes within 20 ms"
    );
    let mbit = (sim.arrived_bytes[1][0] - at_cut) as f64 * 8.0 / 3.0 / 1e6;
    println!("after the cut: {mbit:.2} Mbit/s on the living path, {rerouted} rerouted, at most {most} bytes in 20 ms");
    assert!(mbit > 3.4, "{mbit:.2} Mbit/s");
}

#[test]
fn a_path_whose_reverse_is_out_keeps_its_rate_control() {
    // Two 4 Mbit/s paths, side 0 offering 20. Then the second path's
    // reverse direction fails (an LTE uplink fade) and its forward
    // capacity doubles. Its reports no longer come on it; the peer sends
    // them on the first path, so the forward direction stays in use and
    // its rate follows the new capacity (frozen at 4 Mbit/s, it once
    // left half of it unused for as long as the fade lasted).
    let (fade, measure, end) = (3_000 * MS, 5_000 * MS, 8_000 * MS);
    let mut at_measure = 0;
    let sim = two_slow_paths_open_loop(20.0, end, |sim, now| {
        if now >= fade && sim.links[1][1].up {
            sim.links[1][1].up = false;
            sim.links[1][0].rate_mbit = 8.0;
        }
        if at_measure == 0 && now >= measure {
            at_measure = sim.arrived_bytes[1][0].max(1);
        }
    });
    let now = end;
    let mbit = (sim.arrived_bytes[1][0] - at_measure) as f64 * 8.0 / 3.0 / 1e6;
    let (ours, peer) = (sim.t[0].status(now), sim.t[1].status(now));
    println!(
        "second path, reverse out: {mbit:.2} Mbit/s forward; {} reports came on the first path ({} sent so)",
        ours.paths[1].reports_carried_in, peer.paths[1].reports_carried_out
    );
    assert!(!ours.paths[1].receiving, "we do not hear the peer there");
    assert_eq!(
        ours.paths[1].state, "up",
        "but it hears us: the path carries data"
    );
    assert!(ours.paths[1].reports_carried_in > 50);
    assert!(peer.paths[1].reports_carried_out >= ours.paths[1].reports_carried_in);
    assert!(
        mbit > 6.5,
        "the forward rate follows its capacity: {mbit:.2} Mbit/s"
    );
}
