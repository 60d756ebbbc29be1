//! Trace-driven capacity: a link whose rate follows a recorded trace of
//! delivery opportunities, in the format of the mahimahi emulator's
//! `mm-link` (Netravali et al., USENIX ATC 2015), used by the Saturator
//! traces (Winstein et al., NSDI 2013), Pantheon and many papers.
//!
//! The format: one line per delivery opportunity, the time in
//! milliseconds from the trace's start, non-decreasing; a time repeated
//! on several lines is several opportunities in that millisecond. The
//! trace repeats with a period of its last time (mahimahi's rule: after
//! the last line, the next opportunity is the first line's time plus the
//! last line's).
//!
//! The bottleneck, exactly as `mm-link` serves its queue:
//! * frames wait in a drop-tail queue (a frame that would take the queue
//!   over its byte limit, or over the direction's frame `limit`, is
//!   dropped and counted as `dropped_queue`);
//! * each opportunity carries up to [`OPPORTUNITY_BYTES`] (1500) bytes of
//!   IP packet (the Ethernet header is not counted, as mahimahi counts the
//!   datagram on its TUN); a packet leaves at the opportunity that carries
//!   its last byte. A packet larger than what is left of an opportunity
//!   (one larger than 1500 bytes, or one behind a partly served packet)
//!   takes the rest of this one and what it needs of the following ones;
//!   what a finished packet leaves of an opportunity serves the next
//!   packet in the queue;
//! * an opportunity that finds the queue empty is lost (capacity is not
//!   banked), and so is what is left of one when the queue empties;
//! * after the bottleneck the direction's `delay_ms` (and jitter) apply.
//!
//! Invariants: opportunities are served in order, each at most once; the
//! trace time is the emulator's time since its start plus `trace_start_ms`
//! (so repeats can sample different windows); parsing rejects anything
//! but non-negative integers in non-decreasing order, with the line.

use std::collections::VecDeque;

/// Bytes one delivery opportunity carries (mahimahi's MTU-sized packet).
pub const OPPORTUNITY_BYTES: u64 = 1500;
/// Ethernet header bytes that a trace does not count.
const ETHERNET_HEADER_LEN: usize = 14;
const NS_PER_MS: u64 = 1_000_000;

/// A parsed trace.
#[derive(Debug, PartialEq)]
pub struct Trace {
    times_ms: Vec<u64>,
    period_ms: u64,
}

impl Trace {
    /// Parse a trace's text; errors name the line.
    pub fn parse(text: &str) -> Result<Trace, String> {
        let mut times_ms = vec![];
        for (i, line) in text.lines().enumerate() {
            let l = line.trim();
            if l.is_empty() {
                continue;
            }
            let t: u64 = l.parse().map_err(|_| {
                format!("line {}: '{l}' is not a time in whole milliseconds", i + 1)
            })?;
            if times_ms.last().is_some_and(|p| t < *p) {
                return Err(format!(
                    "line {}: {t} ms is earlier than the line before",
                    i + 1
                ));
            }
            times_ms.push(t);
        }
        let period_ms = *times_ms
            .last()
            .ok_or("the trace has no delivery opportunity")?;
        if period_ms == 0 {
            return Err("the trace must span at least 1 ms (its last time is its period)".into());
        }
        Ok(Trace {
            times_ms,
            period_ms,
        })
    }

    /// Mean capacity over one period, bits per second.
    pub fn mean_bps(&self) -> f64 {
        self.times_ms.len() as f64 * OPPORTUNITY_BYTES as f64 * 8.0 * 1000.0 / self.period_ms as f64
    }

    /// The time of opportunity `k` (counting from the trace's start over
    /// its repetitions), ms.
    fn at_ms(&self, k: u64) -> u64 {
        let n = self.times_ms.len() as u64;
        (k / n) * self.period_ms + self.times_ms[(k % n) as usize]
    }

    /// The first opportunity at or after `t_ms`.
    fn first_from(&self, t_ms: u64) -> u64 {
        let n = self.times_ms.len() as u64;
        let rep = t_ms / self.period_ms;
        let r = t_ms % self.period_ms;
        let i = self.times_ms.partition_point(|x| *x < r) as u64;
        rep * n + i
    }
}

/// One direction's bottleneck: the queue and where the trace stands.
#[derive(Debug)]
pub struct Bottleneck {
    trace: std::sync::Arc<Trace>,
    /// Monotonic time of the trace's `start_ms`, ns.
    origin_ns: u64,
    start_ms: u64,
    /// The next opportunity not yet served.
    next: u64,
    /// Frames waiting, with the bytes each still has to send.
    queue: VecDeque<(Vec<u8>, u64)>,
    queued_bytes: u64,
    limit_bytes: u64,
}

impl Bottleneck {
    /// A bottleneck replaying `trace` from `start_ms` at `origin_ns`, with
    /// a drop-tail queue of `limit_bytes`.
    pub fn new(
        trace: std::sync::Arc<Trace>,
        origin_ns: u64,
        start_ms: u64,
        limit_bytes: u64,
    ) -> Self {
        Self {
            next: trace.first_from(start_ms),
            trace,
            origin_ns,
            start_ms,
            queue: VecDeque::new(),
            queued_bytes: 0,
            limit_bytes,
        }
    }

    /// Replay the trace again from its start offset at `origin_ns` (the
    /// lab does so before each transfer, so that every system measured
    /// sees the same window); frames queued stay queued.
    pub fn restart(&mut self, origin_ns: u64) {
        self.origin_ns = origin_ns;
        self.next = self.trace.first_from(self.start_ms);
    }

    /// Monotonic time of opportunity `k`, ns.
    fn at_ns(&self, k: u64) -> u64 {
        let ms = self.trace.at_ms(k).saturating_sub(self.start_ms);
        self.origin_ns.saturating_add(ms.saturating_mul(NS_PER_MS))
    }

    /// Frames in the queue.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// Queue `frame` arriving at `now` (after [`Bottleneck::serve`] up to
    /// `now`); `false`: dropped, the queue is full.
    pub fn push(&mut self, now: u64, frame: Vec<u8>) -> bool {
        let bytes = frame.len().saturating_sub(ETHERNET_HEADER_LEN).max(1) as u64;
        if self.queued_bytes + bytes > self.limit_bytes {
            return false;
        }
        if self.queue.is_empty() {
            // Opportunities that passed while it was empty are lost.
            let since = now.saturating_sub(self.origin_ns);
            let t_ms = self.start_ms + since.div_ceil(NS_PER_MS);
            self.next = self.next.max(self.trace.first_from(t_ms));
        }
        self.queued_bytes += bytes;
        self.queue.push_back((frame, bytes));
        true
    }

    /// When the next opportunity serves the queue (none while empty).
    pub fn next_service(&self) -> Option<u64> {
        (!self.queue.is_empty()).then(|| self.at_ns(self.next))
    }

    /// Serve every opportunity up to `now`; each frame that finished
    /// leaves with the time of the opportunity that carried its last byte.
    pub fn serve(&mut self, now: u64, mut out: impl FnMut(u64, Vec<u8>)) {
        while !self.queue.is_empty() {
            let at = self.at_ns(self.next);
            if at > now {
                return;
            }
            let mut budget = OPPORTUNITY_BYTES;
            while budget > 0 {
                let Some(front) = self.queue.front_mut() else {
                    break;
                };
                let take = budget.min(front.1);
                front.1 -= take;
                budget -= take;
                self.queued_bytes -= take;
                if front.1 == 0 {
                    if let Some((f, _)) = self.queue.pop_front() {
                        out(at, f);
                    }
                }
            }
            self.next += 1;
        }
    }

    /// Bytes the trace offers between monotonic times `from` and `to`
    /// (opportunities × 1500), whether or not anything used them: the
    /// count the lab makes of a measured window (`mptlab/trace.py`).
    #[cfg(test)]
    pub fn offered_bytes(&self, from: u64, to: u64) -> u64 {
        let ms = |t: u64| self.start_ms + t.saturating_sub(self.origin_ns).div_ceil(NS_PER_MS);
        let (a, b) = (
            self.trace.first_from(ms(from)),
            self.trace.first_from(ms(to)),
        );
        b.saturating_sub(a) * OPPORTUNITY_BYTES
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn frame(ip_bytes: usize, tag: u8) -> Vec<u8> {
        let mut f = vec![0u8; ETHERNET_HEADER_LEN + ip_bytes];
        f[ETHERNET_HEADER_LEN] = tag;
        f
    }

    fn drain(b: &mut Bottleneck, until: u64) -> Vec<(u64, u8)> {
        let mut out = vec![];
        b.serve(until, |t, f| {
            out.push((t / NS_PER_MS, f[ETHERNET_HEADER_LEN]))
        });
        out
    }

    #[test]
    fn parsing_follows_the_format_and_names_the_line() {
        let t = Trace::parse("0\n1\n1\n\n4\n").unwrap();
        assert_eq!(t.times_ms, vec![0, 1, 1, 4]);
        assert_eq!(t.period_ms, 4);
        // Four opportunities of 1500 bytes per 4 ms: 12 Mbit/s.
        assert!((t.mean_bps() - 12e6).abs() < 1.0);
        assert!(Trace::parse("3\n2\n").unwrap_err().contains("line 2"));
        assert!(Trace::parse("1\nx\n").unwrap_err().contains("line 2"));
        assert!(Trace::parse("-1\n").is_err());
        assert!(Trace::parse("").is_err());
        assert!(Trace::parse("0\n0\n").is_err());
    }

    #[test]
    fn the_trace_repeats_with_its_last_time_as_period() {
        let t = Trace::parse("1\n3\n5\n").unwrap();
        let times: Vec<u64> = (0..7).map(|k| t.at_ms(k)).collect();
        assert_eq!(times, vec![1, 3, 5, 6, 8, 10, 11]);
        assert_eq!(t.first_from(4), 2);
        assert_eq!(t.first_from(6), 3);
        assert_eq!(t.first_from(7), 4);
    }

    #[test]
    fn opportunities_carry_1500_bytes_and_large_packets_span_several() {
        // One opportunity per ms.
        let t = Arc::new(
            Trace::parse(&(1..=100).map(|i| format!("{i}\n")).collect::<String>()).unwrap(),
        );
        let mut b = Bottleneck::new(t, 0, 0, 1 << 20);
        // 500 + 500 + 500 bytes share the opportunity at 1 ms; a 3000-byte
        // packet needs the ones at 2 and 3 ms; a 1000-byte one takes 4 ms,
        // whose remaining 500 bytes are lost when the queue empties.
        for (len, tag) in [(500, 1), (500, 2), (500, 3), (3000, 4), (1000, 5)] {
            assert!(b.push(0, frame(len, tag)));
        }
        assert_eq!(
            drain(&mut b, 10 * NS_PER_MS),
            vec![(1, 1), (1, 2), (1, 3), (3, 4), (4, 5)]
        );
        // A packet that arrives at 6.5 ms waits for the opportunity at 7.
        assert!(b.push(6_500_000, frame(100, 6)));
        assert_eq!(b.next_service(), Some(7 * NS_PER_MS));
        assert_eq!(drain(&mut b, 10 * NS_PER_MS), vec![(7, 6)]);
        // A packet larger than one opportunity that arrives alone: 1600
        // bytes leave at the second opportunity.
        assert!(b.push(20 * NS_PER_MS, frame(1600, 7)));
        assert_eq!(drain(&mut b, 30 * NS_PER_MS), vec![(21, 7)]);
    }

    #[test]
    fn the_queue_is_drop_tail_in_bytes() {
        let t = Arc::new(Trace::parse("1000\n").unwrap());
        let mut b = Bottleneck::new(t, 0, 0, 3000);
        assert!(b.push(0, frame(1500, 1)));
        assert!(b.push(0, frame(1500, 2)));
        assert!(!b.push(0, frame(1, 3)));
        assert_eq!(b.len(), 2);
    }

    #[test]
    fn a_start_offset_samples_another_window() {
        // Opportunities at 0..9 ms in every 10 ms, none in an outage.
        let t = Arc::new(Trace::parse("0\n1\n2\n8\n10\n").unwrap());
        let mut b = Bottleneck::new(Arc::clone(&t), 1_000 * NS_PER_MS, 3, 1 << 20);
        // At origin + 0 the trace stands at 3 ms: the next is at 8 (5 ms on).
        assert!(b.push(1_000 * NS_PER_MS, frame(100, 1)));
        assert_eq!(b.next_service(), Some(1_005 * NS_PER_MS));
        // What the trace offers in its first 10 ms from the offset: 8, 10
        // (its last line), 10 again (the first line, 0, of the second
        // period, as in mahimahi), 11, 12.
        let offered = b.offered_bytes(1_000 * NS_PER_MS, 1_010 * NS_PER_MS);
        assert_eq!(offered, 5 * OPPORTUNITY_BYTES);
    }
}
