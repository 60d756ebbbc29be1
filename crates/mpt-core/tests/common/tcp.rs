//! A TCP-like flow through the simulated tunnel (closed loop): Reno's
//! slow start and additive increase, a multiplicative decrease by 0.7 at
//! most once per 100 ms, losses seen as gaps in what the tunnel delivers,
//! acknowledgements back after a fixed delay, and a retransmission
//! timeout (RFC 6298: 200 ms at least, as Linux, doubled per timeout
//! without progress) after which all in flight counts as lost and the
//! window restarts from one packet. Without it a flow whose whole window
//! was lost (a link's outage) waited forever.
//!
//! Invariants: the window never falls below two packets except after a
//! timeout; goodput counts each in-order packet once.

use mpt_core::wire::HEADER_LEN;
use mpt_core::Nanos;

use super::{big_inner, Sim, MS};

/// Side 0 sends inner packet `idx` of `len` bytes now, on the path its
/// scheduler picks (if it sends it now).
pub fn offer_packet(sim: &mut Sim, now: Nanos, idx: u64, len: usize) {
    let pkt = big_inner(idx, len);
    let mut buf = vec![0u8; HEADER_LEN + len + 16];
    buf[HEADER_LEN..HEADER_LEN + len].copy_from_slice(&pkt);
    if let Some(tx) = sim.t[0].send(now, &mut buf, len) {
        let link = sim.link(0, tx.path as usize);
        buf.truncate(tx.len);
        sim.emit(now, 0, link, buf, Some(idx));
    }
}

/// One TCP-like flow of `pkt`-byte packets from side 0 to side 1 from
/// 0.5 s for `secs`, acknowledgements back after `ack_ms`: its goodput
/// over the last `secs - 2` s, Mbit/s. `SIM_TIMELINE` prints it every
/// 100 ms, `SIM_DEBUG` the paths and counters at the end.
pub fn tcp_flow(sim: &mut Sim, pkt: usize, ack_ms: u64, secs: u64) -> f64 {
    sim.deliver_until(500 * MS);
    let start = 500 * MS;
    let warm = start + 2_000 * MS;
    let end = start + secs * 1_000 * MS;
    let (mut cwnd, mut ssthresh) = (10.0f64, f64::MAX);
    let (mut next_seq, mut expected, mut inflight) = (0u64, 0u64, 0u64);
    let mut acks: std::collections::VecDeque<(Nanos, u64, bool)> = Default::default();
    let mut recovery_until = 0;
    let mut losses = 0u64;
    // RFC 6298's timer: send times of what is in flight, the smoothed
    // round trip and its variation, the backoff, the last progress.
    let mut sent_at: std::collections::HashMap<u64, Nanos> = Default::default();
    let (mut srtt, mut rttvar, mut backoff) = (None::<f64>, 0.0f64, 1u32);
    let mut progress = start;
    let mut timeouts = 0u64;
    let mut seen = 0usize;
    let mut good_at_warm = None;
    let mut good = 0u64;
    let mut now = start;
    let tick = 100_000; // 0.1 ms
    let timeline = std::env::var("SIM_TIMELINE").is_ok();
    let (mut next_print, mut good_printed) = (start, 0u64);
    let mut carried_printed = vec![0u64; sim.arrived_bytes.len()];
    while now < end {
        sim.deliver_until(now);
        // Deliveries at the receiver: in-order goodput, gaps are losses.
        while seen < sim.delivered[1].len() {
            let s = sim.delivered[1][seen];
            seen += 1;
            let lost = s.saturating_sub(expected);
            if s >= expected {
                expected = s + 1;
                good += pkt as u64;
            }
            acks.push_back((now + ack_ms * MS, 1 + lost, lost > 0));
            if let Some(at) = sent_at.remove(&s) {
                let r = (now + ack_ms * MS - at) as f64;
                let (sr, var) = match srtt {
                    None => (r, r / 2.0),
                    Some(sr) => (
                        0.875 * sr + 0.125 * r,
                        0.75 * rttvar + 0.25 * (sr - r).abs(),
                    ),
                };
                srtt = Some(sr);
                rttvar = var;
            }
        }
        while acks.front().is_some_and(|a| a.0 <= now) {
            let (_, n, loss) = acks.pop_front().unwrap();
            inflight = inflight.saturating_sub(n);
            progress = now;
            backoff = 1;
            if loss && now >= recovery_until {
                losses += 1;
                cwnd = (cwnd * 0.7).max(2.0);
                ssthresh = cwnd;
                recovery_until = now + 100 * MS;
            } else if cwnd < ssthresh {
                cwnd += 1.0;
            } else {
                cwnd += 1.0 / cwnd;
            }
        }
        if good_at_warm.is_none() && now >= warm {
            good_at_warm = Some(good);
        }
        // SIM_TIMELINE: goodput, losses at the bottlenecks, the flow's
        // window and each path's pacing rate every 100 ms.
        if timeline && now >= next_print {
            let st = sim.t[0].status(now);
            let paced: Vec<String> = st
                .paths
                .iter()
                .map(|p| {
                    let s = p.sending.clone().unwrap_or_default();
                    format!(
                        "{:5.1} (q {:5.1} ms)",
                        s.pacing_mbps.unwrap_or(0.0),
                        s.queueing_ms.unwrap_or(-1.0)
                    )
                })
                .collect();
            // Trace-driven links: what each offered over the next 100 ms,
            // and what it carried over the last.
            let offered: Vec<String> = sim
                .traces
                .iter()
                .filter_map(|t| t[0].as_ref())
                .map(|t| {
                    let b = t.offered_bytes(now, now + 100 * MS);
                    format!("{:5.1}", b as f64 * 8.0 / 0.1 / 1e6)
                })
                .collect();
            let carried: Vec<String> = sim
                .arrived_bytes
                .iter()
                .zip(&mut carried_printed)
                .map(|(b, p)| {
                    let d = b[0] - *p;
                    *p = b[0];
                    format!("{:5.1}", d as f64 * 8.0 / 0.1 / 1e6)
                })
                .collect();
            println!(
                "{:5.2}s goodput {:6.2} Mbit/s lost {:4} cwnd {:5.0} paced {} carried {} offered {}",
                (now - start) as f64 / 1e9,
                (good - good_printed) as f64 * 8.0 / 0.1 / 1e6,
                sim.lost_data.len(),
                cwnd,
                paced.join(" "),
                carried.join(" "),
                offered.join(" ")
            );
            good_printed = good;
            next_print += 100 * MS;
        }
        let rto = srtt.map_or(1_000.0 * MS as f64, |sr| {
            (sr + 4.0 * rttvar).max(200.0 * MS as f64)
        });
        if inflight > 0 && (now - progress) as f64 > rto * backoff as f64 {
            timeouts += 1;
            ssthresh = (cwnd / 2.0).max(2.0);
            cwnd = 1.0;
            inflight = 0;
            sent_at.clear();
            backoff = (backoff * 2).min(64);
            progress = now;
        }
        while (inflight as f64) < cwnd.floor() {
            offer_packet(sim, now, next_seq, pkt);
            sent_at.insert(next_seq, now);
            next_seq += 1;
            inflight += 1;
        }
        sim.pump_control(now);
        now += tick;
    }
    let span = (end - warm) as f64 / 1e9;
    if std::env::var("SIM_DEBUG").is_ok() {
        let st = sim.t[0].status(now);
        for p in &st.paths {
            println!("  path {}: {:?}", p.id, p.sending);
        }
        let carried: Vec<u64> = sim
            .arrived_bytes
            .iter()
            .map(|b| b[0] * 8 / 1_000_000 / secs)
            .collect();
        println!(
            "  carried Mbit/s (whole run): {carried:?}, drops at side 1: {}, TCP loss events {losses}, timeouts {timeouts}, cwnd {cwnd:.0}",
            sim.drops_seen.len()
        );
        let mut reasons = std::collections::BTreeMap::<String, usize>::new();
        for d in &sim.drops_seen {
            *reasons.entry(format!("{:?}", d.1)).or_default() += 1;
        }
        println!("  drops at side 1 by reason: {reasons:?}");
        println!("  recovery at side 1: {:?}", sim.t[1].recovery_stats());
        println!("  recovery at side 0: {:?}", sim.t[0].recovery_stats());
    }
    (good - good_at_warm.unwrap_or(0)) as f64 * 8.0 / span / 1e6
}
