//! A path that stops in one direction (a radio uplink out for seconds), in
//! virtual time: what was sent on it last reaches the peer on another
//! path, a round trip or so later, not when the path comes back
//! (`path/stall.rs`). The lab's recorded AT&T uplink is at zero for 2.25
//! s of its first 5; an inner TCP whose last ACKs sat there sent nothing
//! until its backed-off retransmission timeout.

mod common;

use common::*;
use mpt_core::Nanos;

/// Side `from` sends a sparse stream (an inner TCP's ACKs: a packet every
/// 20 ms) over a 10 ms and a 30 ms path; from `cut` the 10 ms path's
/// direction from side `cut_from` drops everything. Returns, for the
/// packets sent from `cut` on, when each reached the other side after it
/// was sent (`None`: never), and the stall count of the sender's first
/// path.
fn sparse_stream_over_a_cut(
    from: usize,
    cut_from: usize,
    cut: Nanos,
    packets: u64,
    recover: bool,
) -> (Vec<Option<Nanos>>, u64) {
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
        for &i in &sim.delivered[1 - from][seen..] {
            arrived_at.entry(i).or_insert(now);
        }
        seen = sim.delivered[1 - from].len();
        if now >= cut && sim.links[0][cut_from].up {
            sim.links[0][cut_from].up = false;
        }
        if now < end && k % every == 0 {
            sim.send_data(now, from, idx);
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
    let stalls = sim.t[from].status(end).paths[0].stalls;
    (arrived, stalls)
}

#[test]
fn what_a_stalled_path_carried_last_arrives_on_the_other() {
    // Side 1's direction of the 10 ms path stops: it keeps hearing side 0
    // there, and no report covers what it sends, so the path stalls and
    // what it carried is sent again on the 30 ms path; what it carries
    // until it goes down is sent again then.
    let (arrived, stalls) = sparse_stream_over_a_cut(1, 1, 2_000 * MS, 10, true);
    println!("after the cut: {arrived:?} (ns after sending); stalls {stalls}");
    assert!(stalls >= 1, "the path stalled");
    for (k, a) in arrived.iter().enumerate() {
        let a = a.unwrap_or_else(|| panic!("packet {k} after the cut never arrived"));
        // Liveness alone took the path down only after the peer stopped
        // hearing us, and nothing sent the tail again: it never arrived.
        assert!(
            a < 250 * MS,
            "packet {k} arrived {} ms after it left",
            a / MS
        );
    }
}

#[test]
fn a_path_whose_reports_cannot_come_does_not_stall() {
    // The other way round: side 0 sends, and the direction that fails is
    // the one its reports come on (a downlink's sender in an uplink
    // fade). Its data still arrives; the peer sends its reports on the
    // other path, and the path carries on.
    let (arrived, stalls) = sparse_stream_over_a_cut(0, 1, 2_000 * MS, 25, true);
    println!("after the cut: {arrived:?} (ns after sending); stalls {stalls}");
    assert_eq!(stalls, 0);
    assert!(
        arrived.iter().all(|a| a.is_some_and(|a| a <= 10 * MS)),
        "{arrived:?}"
    );
}
