//! Path-aware sending (ECF over paced paths, the daemon's default) on
//! links with a capacity, in virtual time: each link is a drop-tail
//! bottleneck at its rate, then its delay and jitter (FIFO, as the lab's
//! emulator has it). Side 0 offers more than the links' sum, open loop;
//! what each link carried is measured after a warm-up.
//!
//! What it checks: the sender fills every link to near its rate, also one
//! whose delay jitters by several milliseconds (the sweep's finding: such
//! a link was paced far below its rate, its jitter read as a queue).

mod common;

use common::*;
use mpt_core::wire::HEADER_LEN;
use mpt_core::Nanos;

const PKT: usize = 1400;

/// Links of (rate Mbit/s, delay ms, jitter ms); side 0 offers `offer_mbit`
/// for `secs`; the Mbit/s each link carried over the last `secs - 2` s.
fn carried(spec: &[(f64, u64, u64)], offer_mbit: f64, secs: u64) -> Vec<f64> {
    let links: Vec<Link> = spec
        .iter()
        .map(|&(rate, d, j)| Link {
            delay: d * MS,
            jitter: j * MS,
            loss: 0.0,
            up: true,
            rate_mbit: rate,
            queue_ns: 50 * MS,
        })
        .collect();
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
        let pkt = big_inner(idx, PKT);
        let mut buf = vec![0u8; HEADER_LEN + PKT + 16];
        buf[HEADER_LEN..HEADER_LEN + PKT].copy_from_slice(&pkt);
        if let Some(tx) = sim.t[0].send(now, &mut buf, PKT) {
            let link = sim.link(0, tx.path as usize);
            buf.truncate(tx.len);
            sim.emit(now, 0, link, buf, Some(idx));
        }
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
