//! A trace-driven bottleneck for the simulation: mahimahi's link model,
//! as the lab's emulator (`mpt-netem`) replays it.
//!
//! A trace lists delivery opportunities, one per line, as the time in
//! milliseconds; a repeated time is several opportunities in that
//! millisecond, and the trace loops with its last time as the period.
//! Each opportunity lets up to [`OPPORTUNITY_BYTES`] leave the drop-tail
//! queue. Bytes flow as mahimahi's do: an opportunity's bytes go to the
//! head packet, a packet larger than what is left of one takes the next
//! ones too, and it leaves with the opportunity that carries its last
//! byte; what an opportunity offers while the queue is empty is lost.
//!
//! Invariants: departures are in arrival order and never before the
//! packet arrived; the queue never holds more than its byte limit.

use std::collections::VecDeque;

use mpt_core::Nanos;

use super::MS;

/// Bytes one delivery opportunity carries (mahimahi's MTU).
pub const OPPORTUNITY_BYTES: usize = 1500;

/// The state of one direction of a trace-driven link.
#[derive(Clone, Debug)]
pub struct TraceLink {
    /// Opportunity times within one period, ascending.
    ops: Vec<Nanos>,
    period: Nanos,
    /// Sim time 0 is this far into the trace (`trace_start_s`).
    offset: Nanos,
    /// The next opportunity with bytes left (absolute index, loops
    /// counted), and how many bytes it has left.
    next: u64,
    left: usize,
    limit_bytes: usize,
    queued_bytes: usize,
    /// Packets in the queue: (departure, bytes).
    backlog: VecDeque<(Nanos, usize)>,
}

impl TraceLink {
    /// A link replaying `text` (mahimahi format) from `offset` on, with a
    /// drop-tail queue of `queue_ms` at the trace's mean rate.
    pub fn new(text: &str, offset: Nanos, queue_ms: u64) -> Self {
        let ops: Vec<Nanos> = text
            .lines()
            .filter_map(|l| l.trim().parse::<u64>().ok())
            .map(|ms| ms * MS)
            .collect();
        assert!(!ops.is_empty(), "a trace with no opportunity");
        assert!(ops.windows(2).all(|w| w[0] <= w[1]), "a trace goes forward");
        let period = (*ops.last().unwrap()).max(MS);
        let mean_bps = ops.len() as f64 * OPPORTUNITY_BYTES as f64 * 8.0 / (period as f64 / 1e9);
        let limit_bytes = ((mean_bps / 8.0 * queue_ms as f64 / 1e3) as usize).max(2 * 1500);
        let mut t = Self {
            ops,
            period,
            offset,
            next: 0,
            left: OPPORTUNITY_BYTES,
            limit_bytes,
            queued_bytes: 0,
            backlog: VecDeque::new(),
        };
        t.next = t.first_at_or_after(0);
        t
    }

    /// The trace's mean rate, Mbit/s.
    pub fn mean_mbit(&self) -> f64 {
        self.ops.len() as f64 * OPPORTUNITY_BYTES as f64 * 8.0 / (self.period as f64 / 1e3)
    }

    /// Sim time of opportunity `k`.
    fn at(&self, k: u64) -> Nanos {
        let n = self.ops.len() as u64;
        (k / n) * self.period + self.ops[(k % n) as usize] - self.offset
    }

    /// The first opportunity at or after sim time `now`.
    fn first_at_or_after(&self, now: Nanos) -> u64 {
        let tt = now + self.offset;
        let n = self.ops.len() as u64;
        let (loops, within) = (tt / self.period, tt % self.period);
        let i = self.ops.partition_point(|&o| o < within) as u64;
        loops * n + i
    }

    /// A packet of `len` bytes enters at `now`: when it leaves the
    /// bottleneck, or `None` if the queue is full (dropped).
    pub fn enqueue(&mut self, now: Nanos, len: usize) -> Option<Nanos> {
        while self.backlog.front().is_some_and(|b| b.0 <= now) {
            let (_, b) = self.backlog.pop_front().unwrap();
            self.queued_bytes -= b;
        }
        if self.queued_bytes + len > self.limit_bytes {
            return None;
        }
        if self.backlog.is_empty() && self.at(self.next) < now {
            // Idle: what the opportunities offered meanwhile is lost.
            self.next = self.first_at_or_after(now);
            self.left = OPPORTUNITY_BYTES;
        }
        let mut rest = len;
        let departs = loop {
            let take = rest.min(self.left);
            rest -= take;
            self.left -= take;
            let t = self.at(self.next);
            if self.left == 0 {
                self.next += 1;
                self.left = OPPORTUNITY_BYTES;
            }
            if rest == 0 {
                break t;
            }
        };
        self.backlog.push_back((departs, len));
        self.queued_bytes += len;
        Some(departs)
    }

    /// Bytes the trace offers in `[from, to)` of sim time.
    pub fn offered_bytes(&self, from: Nanos, to: Nanos) -> u64 {
        (self.first_at_or_after(to) - self.first_at_or_after(from)) * OPPORTUNITY_BYTES as u64
    }
}
