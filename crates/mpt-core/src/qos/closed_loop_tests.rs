//! A class queue in closed loop, in virtual time: ack-clocked, loss-driven
//! flows (a Reno-like slow start, then a CUBIC-like multiplicative
//! decrease by 0.7) beside an unresponsive flood, through one bottleneck
//! that serves the class at a fixed rate. The flows see their losses a
//! round trip later, by the gaps in what arrives, as TCP does by duplicate
//! acknowledgements; a flow that hears nothing for a while times out.
//!
//! What it checks is what the QoS matrix asks of the lab on any link pair:
//! the backing-off flows share equally (Jain's index), and together get
//! their share beside the flood.

use super::codel::Params;
use super::drr::{ClassQueue, Serve};
use crate::{Nanos, NANOS_PER_MS};

const MS: Nanos = NANOS_PER_MS;
const PKT: usize = 1500;
const BOUND_NS: Nanos = 100 * MS;
const ACK_AGGREGATE_PACKETS: u64 = 40;
const ACK_FLUSH_MS: u64 = 5;

#[derive(Debug, Clone)]
struct Flow {
    cwnd: f64,
    ssthresh: f64,
    inflight: u64,
    next_seq: u64,
    /// The receiver's next expected sequence number.
    expected: u64,
    /// Acknowledgements (and loss notices) on their way back: (due, acked
    /// packets, lost packets).
    back: std::collections::VecDeque<(Nanos, u64, u64)>,
    /// Packets delivered, and lost before them, not acknowledged yet.
    unacked: (u64, u64),
    recovery_until: Nanos,
    last_ack: Nanos,
    delivered_bytes: u64,
}

impl Flow {
    fn new() -> Self {
        Self {
            cwnd: 10.0,
            ssthresh: f64::MAX,
            inflight: 0,
            next_seq: 0,
            expected: 0,
            back: Default::default(),
            unacked: (0, 0),
            recovery_until: 0,
            last_ack: 0,
            delivered_bytes: 0,
        }
    }

    fn on_loss(&mut self, now: Nanos, rtt: Nanos) {
        if now >= self.recovery_until {
            self.cwnd = (self.cwnd * 0.7).max(2.0);
            self.ssthresh = self.cwnd;
            self.recovery_until = now + rtt;
        }
    }
}

fn packet(flow: usize, seq: u64) -> Vec<u8> {
    let mut p = vec![0u8; PKT];
    p[1] = flow as u8;
    p[2..10].copy_from_slice(&seq.to_be_bytes());
    p
}

fn hash(flow: usize) -> u64 {
    0x9e37_79b9_7f4a_7c15u64.wrapping_mul(flow as u64 + 1)
}

fn jain(x: &[f64]) -> f64 {
    let s: f64 = x.iter().sum();
    let q: f64 = x.iter().map(|v| v * v).sum();
    s * s / (x.len() as f64 * q)
}

/// `n` flows with round trip `rtt_ms` and a flood at `flood_x` times the
/// bottleneck's `mbit`, for `secs`; the flows' rates over the second half
/// (Mbit/s).
fn run(
    n: usize,
    mbit: u64,
    rtt_ms: u64,
    flood_x: u64,
    secs: u64,
    burst: u64,
    flag: bool,
) -> Vec<f64> {
    let rtt = rtt_ms * MS;
    let per_ms = mbit * 1_000_000 / 8 / 1000; // bytes per ms
    let mut q = ClassQueue::new(super::CLASS_LIMIT_PACKETS, PKT, true);
    // The tunnel's estimate runs somewhat above the capacity (pacing).
    q.set_capacity(Some(per_ms * 1000 * 5 / 4));
    let mut pool = vec![];
    let mut flows: Vec<Flow> = (0..n).map(|_| Flow::new()).collect();
    let flood = n;
    let flood_per_ms = per_ms * flood_x / PKT as u64;
    let mut budget = 0u64;
    let half = secs * 1000 / 2;
    let mut counted = vec![0u64; n];
    for t in 0..secs * 1000 {
        let now = t * MS;
        // Acknowledgements and loss notices due now.
        for f in flows.iter_mut() {
            while f.back.front().is_some_and(|b| b.0 <= now) {
                let (_, acked, lost) = f.back.pop_front().unwrap();
                f.inflight = f.inflight.saturating_sub(acked + lost);
                f.last_ack = now;
                if lost > 0 {
                    f.on_loss(now, rtt);
                }
                for _ in 0..acked {
                    if f.cwnd < f.ssthresh {
                        f.cwnd += 1.0;
                    } else {
                        f.cwnd += 1.0 / f.cwnd;
                    }
                }
            }
            // A retransmission timeout: everything in flight is lost.
            if f.inflight > 0 && now.saturating_sub(f.last_ack) > 4 * rtt.max(50 * MS) {
                f.inflight = 0;
                f.ssthresh = (f.cwnd / 2.0).max(2.0);
                f.cwnd = 1.0;
                f.last_ack = now;
            }
        }
        // Senders: the flows as their windows allow, the flood at its rate.
        let mut sends = vec![];
        for (i, f) in flows.iter_mut().enumerate() {
            while (f.inflight as f64) < f.cwnd.floor() {
                sends.push((i, f.next_seq));
                f.next_seq += 1;
                f.inflight += 1;
            }
        }
        // Flow 0 once sends a burst beyond its window (an application
        // that had data held back, a window that opened at once).
        if t == secs * 1000 / 4 {
            if flag {
                q.flag_flow(hash(0), now);
            }
            for _ in 0..burst {
                sends.push((0, flows[0].next_seq));
                flows[0].next_seq += 1;
                flows[0].inflight += 1;
            }
        }
        for _ in 0..flood_per_ms {
            sends.push((flood, 0));
        }
        // Interleave the flows' packets (each flow's in order), the flood's
        // between them.
        let mut nth = vec![0usize; n + 1];
        let mut keyed: Vec<(usize, usize, u64)> = sends
            .into_iter()
            .map(|(i, seq)| {
                nth[i] += 1;
                (nth[i], i, seq)
            })
            .collect();
        keyed.sort_unstable();
        for (_, i, seq) in keyed {
            if q.admit(hash(i), now, PKT) {
                q.push(hash(i), now, &packet(i, seq), &mut pool);
            }
        }
        // An aggregate waits at most a few ms.
        if t % ACK_FLUSH_MS == 0 {
            for f in flows.iter_mut() {
                if f.unacked.0 > 0 {
                    f.back.push_back((now + rtt, f.unacked.0, f.unacked.1));
                    f.unacked = (0, 0);
                }
            }
        }
        // The bottleneck serves the class.
        budget += per_ms;
        let serve = Serve {
            now,
            expired_before: now.saturating_sub(BOUND_NS),
            mark_sojourn_ns: BOUND_NS / super::EARLY_MARK_DIVISOR,
            mtu: PKT,
            codel: Params::default(),
        };
        while budget >= PKT as u64 {
            let Some(item) = q.pop(serve, &mut pool, |_, _| {}) else {
                budget = budget.min(PKT as u64);
                break;
            };
            budget -= PKT as u64;
            let i = item.buf[1] as usize;
            if i == flood {
                continue;
            }
            let seq = u64::from_be_bytes(item.buf[2..10].try_into().unwrap());
            let f = &mut flows[i];
            let lost = seq.saturating_sub(f.expected);
            f.expected = f.expected.max(seq + 1);
            // Acknowledgements come back in aggregates (GRO at the
            // receiver, Wi-Fi and LTE aggregation): the window leaves in
            // bursts of up to a TSO segment's worth.
            f.unacked.0 += 1;
            f.unacked.1 += lost;
            if f.unacked.0 >= ACK_AGGREGATE_PACKETS {
                f.back.push_back((now + rtt, f.unacked.0, f.unacked.1));
                f.unacked = (0, 0);
            }
            f.delivered_bytes += PKT as u64;
            if t >= half {
                counted[i] += PKT as u64;
            }
        }
    }
    let secs_counted = (secs * 1000 - half) as f64 / 1000.0;
    counted
        .iter()
        .map(|b| *b as f64 * 8.0 / secs_counted / 1e6)
        .collect()
}

fn check(n: usize, mbit: u64, rtt_ms: u64, flood_x: u64, burst: u64) {
    check_flagged(n, mbit, rtt_ms, flood_x, burst, false);
}

fn check_flagged(n: usize, mbit: u64, rtt_ms: u64, flood_x: u64, burst: u64, flag: bool) {
    let rates = run(n, mbit, rtt_ms, flood_x, 20, burst, flag);
    let j = jain(&rates);
    let fair = mbit as f64 / (n + 1) as f64;
    let share = rates.iter().sum::<f64>() / (fair * n as f64);
    eprintln!("{n} flows, {mbit} Mbit/s, {rtt_ms} ms, flood {flood_x}x: Jain {j:.3}, share {share:.2}, {rates:.1?}");
    assert!(j >= 0.98, "Jain {j:.3}: {rates:.1?}");
    assert!(share >= 0.95, "share {share:.2}: {rates:.1?}");
}

#[test]
fn sixteen_flows_beside_a_flood_three_times_the_link() {
    check(16, 210, 20, 3, 0);
    check(16, 210, 20, 3, 400);
}

#[test]
fn four_flows_beside_floods_of_one_to_five_times_the_link() {
    for x in [1, 3, 5] {
        check(4, 75, 30, x, 0);
        check(4, 75, 30, x, 300);
    }
}

#[test]
fn two_and_eight_flows_on_short_and_long_round_trips() {
    check(2, 60, 10, 3, 200);
    check(8, 120, 60, 5, 300);
}

#[test]
fn a_flow_flagged_by_mistake_is_let_go_once_it_backs_off() {
    // A TCP flow policed at its share with a bucket of 20 ms keeps
    // hitting the bucket's bottom (its window bursts beyond it): that
    // alone must not keep it policed.
    check_flagged(16, 210, 20, 3, 400, true);
    check_flagged(4, 75, 30, 3, 0, true);
}
