//! A path that stops in one direction (a radio uplink out for seconds), in
//! virtual time: what was sent on it last reaches the peer on another
//! path, a round trip or so later, not when the path comes back
//! (`path/stall.rs`). The lab's recorded AT&T uplink is at zero for 2.25
//! s of its first 5; an inner TCP whose last ACKs sat there sent nothing
//! until its backed-off retransmission timeout.

mod common;

use common::*;
use mpt_core::Nanos;

/// Side 1 sends a sparse stream (an inner TCP's ACKs: a packet every 20
/// ms) over a 10 ms and a 30 ms path; from `cut` the 10 ms path's
/// direction from side 1 drops everything. Returns, for the packets sent
/// from `cut` on, when each reached side 0 after it was sent (`None`:
/// never), and the stall count of side 1's first path.
fn sparse_stream_over_a_cut(cut: Nanos, packets: u64, recover: bool) -> (Vec<Option<Nanos>>, u64) {
    let links = vec![
        Link {
            delay: 10 * MS,
            jitter: 0,
            loss: 0.0,
            up: true,
            rate_mbit: 0.0,
            queue_ns: 0,
        },
        Link {
            delay: 30 * MS,
            jitter: 0,
            loss: 0.0,
            up: true,
            rate_mbit: 0.0,
            queue_ns: 0,
        },
    ];
    let t = |side| {
        TestConfig::new(side, 2)
            .ecf()
            .recover(recover)
            .with(|c| c.mtu = 1500)
            .tunnel()
    };
    let mut sim = Sim::with_tunnels(links, [t(0), t(1)], 11);
    sim.deliver_until(500 * MS);
    // Steps of 5 ms: a packet sent every fourth, arrivals noted at each.
    let (step, every) = (5 * MS, 4);
    let end = cut + packets * every * step;
    let mut sent_at = vec![];
    let mut arrived_at = std::collections::HashMap::new();
    let (mut now, mut k, mut idx, mut seen) = (500 * MS, 0u64, 0u64, 0);
    while now < end + 3_000 * MS {
        sim.deliver_until(now);
        for &i in &sim.delivered[0][seen..] {
            arrived_at.entry(i).or_insert(now);
        }
        seen = sim.delivered[0].len();
        if now >= cut && sim.links[0][1].up {
            sim.links[0][1].up = false;
        }
        if now < end && k % every == 0 {
            sim.send_data(now, 1, idx);
            if now >= cut {
                sent_at.push((idx, now));
            }
            idx += 1;
        }
        sim.pump_control(now);
        k += 1;
        now += step;
    }
    let arrived: Vec<Option<Nanos>> = sent_at
        .iter()
        .map(|(i, at)| arrived_at.get(i).map(|t| t - at))
        .collect();
    let stalls = sim.t[1].status(end).paths[0].stalls;
    (arrived, stalls)
}

#[test]
fn what_a_stalled_path_carried_last_arrives_on_the_other() {
    let (arrived, stalls) = sparse_stream_over_a_cut(2_000 * MS, 10, true);
    println!("after the cut: {arrived:?} (ns after sending); stalls {stalls}");
    assert!(stalls >= 1, "the path stalled");
    for (k, a) in arrived.iter().enumerate() {
        let a = a.unwrap_or_else(|| panic!("packet {k} after the cut never arrived"));
        // A stall is declared after the path's timeout (at least 50 ms),
        // the copy then takes the 30 ms path; liveness alone took the
        // path down only after the dead interval, and lost the tail.
        assert!(
            a < 250 * MS,
            "packet {k} arrived {} ms after it left",
            a / MS
        );
    }
}

#[test]
fn without_recovery_a_stalled_path_is_left_at_once_and_its_tail_is_lost() {
    let (arrived, stalls) = sparse_stream_over_a_cut(2_000 * MS, 10, false);
    println!("after the cut: {arrived:?} (ns after sending); stalls {stalls}");
    assert!(stalls >= 1, "the path stalled");
    // Sent into the cut before the stall showed: lost (nothing holds a
    // copy). From the stall on, the other path carries the stream.
    assert!(arrived[0].is_none());
    let after: Vec<Nanos> = arrived.iter().flatten().copied().collect();
    assert!(after.len() >= 3, "{arrived:?}");
    assert!(after.iter().all(|&a| a <= 40 * MS), "{arrived:?}");
}
