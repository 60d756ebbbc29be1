//! A data packet lost at the end of a burst, in virtual time: nothing
//! after it on its path reveals the loss, and a cwnd-limited inner TCP
//! sends nothing more until the packets held behind the gap arrive. The
//! path's tail report ([`mpt_core::tunnel::TAIL_PROBE_NS`]) announces its
//! frontier a few milliseconds after its last packet, so the gap is
//! released (or, with recovery, filled) within about one path delay
//! instead of the reorder buffer's `max_delay`.

mod common;

use common::*;
use mpt_core::tunnel::ReleaseKind;
use mpt_core::wire::HEADER_LEN;

/// Two 5 ms paths; a burst of 20 packets after a warm-up, the last one on
/// path 0 lost. Returns when the receiver had the rest (ms after the
/// burst), and whether the lost one was delivered (recovered).
fn burst_with_tail_loss(recover: bool) -> (f64, bool) {
    let side = |s: u8| {
        TestConfig::new(s, 2)
            .release(ReleaseKind::PathFrontier)
            .recover(recover)
            .reorder(4096, 200 * MS)
            .tunnel()
    };
    let mut sim = Sim::with_tunnels(links(&[(5, 0, 0.0), (5, 0, 0.0)]), [side(0), side(1)], 3);
    let mut now = sim.run_traffic(0, 200, MS, 0);
    // Between two keepalives (100 ms apart), whose probes and echoes
    // would announce the frontier too.
    sim.deliver_until(now + 550 * MS);
    now += 550 * MS;
    let before = sim.delivered[1].len();
    // The burst: encapsulate all, then put all but the last packet of
    // path 0 on the links.
    let mut sent = vec![];
    for idx in 1000..1020u64 {
        let pkt = inner(idx);
        let mut buf = vec![0u8; HEADER_LEN + pkt.len() + 16];
        buf[HEADER_LEN..HEADER_LEN + pkt.len()].copy_from_slice(&pkt);
        let tx = sim.t[0]
            .send(now, &mut buf, pkt.len())
            .expect("sent at once");
        buf.truncate(tx.len);
        sent.push((idx, tx.path as usize, buf));
    }
    let lost = sent
        .iter()
        .rposition(|(_, p, _)| *p == 0)
        .expect("path 0 used");
    let lost_idx = sent[lost].0;
    for (k, (idx, path, buf)) in sent.into_iter().enumerate() {
        if k != lost {
            sim.emit(now, 0, path, buf, Some(idx));
        }
    }
    sim.pump_control(now);
    let start = now;
    let mut t = now;
    while sim.delivered[1].len() < before + 19 && t < start + 400 * MS {
        t += MS / 10;
        sim.deliver_until(t);
    }
    let recovered = sim.delivered[1].contains(&lost_idx);
    ((t - start) as f64 / MS as f64, recovered)
}

#[test]
fn a_loss_at_the_end_of_a_burst_is_released_within_a_path_delay() {
    let (ms, recovered) = burst_with_tail_loss(false);
    println!("without recovery: the rest delivered {ms:.1} ms after the burst");
    assert!(!recovered);
    assert!(ms < 20.0, "{ms} ms (the next keepalive is 50 ms away)");
}

#[test]
fn a_loss_at_the_end_of_a_burst_is_recovered_within_a_round_trip_or_two() {
    let (ms, recovered) = burst_with_tail_loss(true);
    println!("with recovery: the rest delivered {ms:.1} ms after the burst");
    assert!(recovered, "the lost packet is sent again");
    assert!(ms < 30.0, "{ms} ms (the next keepalive is 50 ms away)");
}
