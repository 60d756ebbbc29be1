//! [`SentMarks`]: how many bytes a path had sent by each of its recent
//! receiver reports, so that a rate sample can be set beside what was
//! *sent* while the packets it counted left (one round trip and the queue
//! before the report), not only what arrived.
//!
//! A queue that grows while the sender sent more than the path delivered
//! is the sender's, whether its pacer or its scheduler set that rate: on
//! `wifi-lte` the LTE-like path was paced above its link while the
//! path-aware scheduler, not the pacer, limited what it sent (see
//! docs/results-notes.md, "Where `wifi-lte` loses its last points").
//!
//! Invariants: the ring holds the last [`SENT_MARKS`] marks in the order
//! they were taken (times and counts never decrease); [`SentMarks::at`]
//! interpolates linearly between the marks around a time and answers
//! `None` before the oldest or after the newest; no allocation.

use super::NANOS_PER_S;
use crate::Nanos;

/// Marks kept (tuning knob: reports come every 10-25 ms, so 64 cover
/// 0.6-1.6 s, more than the round trip and queue of any path the rate
/// control serves).
pub const SENT_MARKS: usize = 64;

/// See the module documentation.
#[derive(Debug, Clone)]
pub struct SentMarks {
    ring: [(Nanos, u64); SENT_MARKS],
    /// The next slot to write (the oldest once full).
    next: usize,
    len: usize,
}

impl Default for SentMarks {
    fn default() -> Self {
        Self {
            ring: [(0, 0); SENT_MARKS],
            next: 0,
            len: 0,
        }
    }
}

impl SentMarks {
    /// The path had sent `sent_bytes` in all by `now`. A mark older than
    /// the newest is ignored (the ring stays ordered).
    pub fn push(&mut self, now: Nanos, sent_bytes: u64) {
        if let Some((t, b)) = self.newest() {
            if now < t || sent_bytes < b {
                return;
            }
        }
        self.ring[self.next] = (now, sent_bytes);
        self.next = (self.next + 1) % SENT_MARKS;
        self.len = (self.len + 1).min(SENT_MARKS);
    }

    fn newest(&self) -> Option<(Nanos, u64)> {
        (self.len > 0).then(|| self.ring[(self.next + SENT_MARKS - 1) % SENT_MARKS])
    }

    /// The `i`-th mark, oldest first.
    fn get(&self, i: usize) -> (Nanos, u64) {
        let oldest = (self.next + SENT_MARKS - self.len) % SENT_MARKS;
        self.ring[(oldest + i) % SENT_MARKS]
    }

    /// Bytes sent in all by `t`, interpolated between the marks around it.
    pub fn at(&self, t: Nanos) -> Option<u64> {
        if self.len == 0 || t < self.get(0).0 {
            return None;
        }
        for i in (0..self.len).rev() {
            let (ti, bi) = self.get(i);
            if ti <= t {
                if i + 1 == self.len {
                    return (ti == t).then_some(bi);
                }
                let (tj, bj) = self.get(i + 1);
                let span = u128::from(tj - ti).max(1);
                let part = u128::from(bj - bi) * u128::from(t - ti) / span;
                return Some(bi + part as u64);
            }
        }
        None
    }

    /// Bits per second sent between `from` and `to` (`None`: not covered
    /// by the marks, or an empty span).
    pub fn rate_bps(&self, from: Nanos, to: Nanos) -> Option<u64> {
        if to <= from {
            return None;
        }
        let bytes = self.at(to)?.checked_sub(self.at(from)?)?;
        Some((u128::from(bytes) * 8 * NANOS_PER_S / u128::from(to - from)) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NANOS_PER_MS;

    const MS: Nanos = NANOS_PER_MS;

    #[test]
    fn the_rate_between_two_times_is_interpolated_between_marks() {
        let mut m = SentMarks::default();
        // 1 250 bytes per ms: 10 Mbit/s, marked every 20 ms.
        for i in 0..10u64 {
            m.push(i * 20 * MS, i * 25_000);
        }
        assert_eq!(m.at(0), Some(0));
        assert_eq!(m.at(30 * MS), Some(37_500));
        assert_eq!(m.rate_bps(15 * MS, 75 * MS), Some(10_000_000));
        assert_eq!(m.at(180 * MS), Some(225_000), "the newest mark itself");
    }

    #[test]
    fn times_outside_the_marks_have_no_answer() {
        let mut m = SentMarks::default();
        assert_eq!(m.at(5), None);
        m.push(100 * MS, 1_000);
        m.push(120 * MS, 2_000);
        assert_eq!(m.at(99 * MS), None, "before the oldest");
        assert_eq!(m.at(121 * MS), None, "after the newest");
        assert_eq!(m.rate_bps(110 * MS, 110 * MS), None, "an empty span");
        assert_eq!(m.rate_bps(90 * MS, 110 * MS), None);
    }

    #[test]
    fn the_ring_keeps_the_newest_marks_and_their_order() {
        let mut m = SentMarks::default();
        for i in 0..(SENT_MARKS as u64 + 10) {
            m.push(i * MS, i * 100);
        }
        assert_eq!(m.at(9 * MS), None, "overwritten");
        assert_eq!(m.at(10 * MS), Some(1_000));
        // A mark from the past, or a count that fell, is ignored.
        m.push(5 * MS, 1);
        m.push(80 * MS, 0);
        let newest = SENT_MARKS as u64 + 9;
        assert_eq!(m.at(newest * MS), Some(newest * 100));
        assert_eq!(m.rate_bps(20 * MS, 30 * MS), Some(800_000));
    }
}
