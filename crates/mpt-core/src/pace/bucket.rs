//! [`TokenBucket`]: the pacing budget of one path. Tokens are bytes,
//! earned at the pacing rate up to a depth ([`PACING_BURST_NS`] at the
//! rate, at least [`PACING_BURST_MIN_BYTES`]; [`REALTIME_BURST_NS`] while
//! the path carries real-time packets). A send may take the bucket below
//! zero (the segments of one super-packet stay together); the path then
//! has no budget until the debt is paid.
//!
//! Invariants:
//! * the bucket never holds more than its depth;
//! * nothing is lost between refills: what an interval earned short of a
//!   whole byte carries over, so refills at any spacing add what the rate
//!   gives;
//! * [`TokenBucket::wait_ns`], [`TokenBucket::budget_at`] and
//!   [`TokenBucket::release_at`] round up: at the time they give, the
//!   budget they promise is there.

use super::*;

/// A pacing budget: tokens are bytes, refilled at the rate in force.
#[derive(Debug, Clone, Default)]
pub struct TokenBucket {
    tokens: i64,
    last: Nanos,
    rate_bps: Option<u64>,
    /// [`REALTIME_BURST_NS`] deep instead of [`PACING_BURST_NS`].
    shallow: bool,
    /// What the last refills earned short of a whole byte, in bit-
    /// nanoseconds per second (below `8 * NANOS_PER_S`).
    carry: u128,
}

impl TokenBucket {
    fn depth(rate_bps: u64) -> i64 {
        let d = u128::from(rate_bps) * u128::from(PACING_BURST_NS) / (8 * NANOS_PER_S);
        (d as u64).max(PACING_BURST_MIN_BYTES) as i64
    }

    fn shallow_depth(rate_bps: u64) -> i64 {
        let d = u128::from(rate_bps) * u128::from(REALTIME_BURST_NS) / (8 * NANOS_PER_S);
        (d as u64).max(REALTIME_BURST_MIN_BYTES) as i64
    }

    fn depth_now(&self, rate_bps: u64) -> i64 {
        if self.shallow {
            Self::shallow_depth(rate_bps).min(Self::depth(rate_bps))
        } else {
            Self::depth(rate_bps)
        }
    }

    /// Make the bucket [`REALTIME_BURST_NS`] deep (`true`) or as deep as
    /// usual; takes effect at the next refill.
    pub fn set_shallow(&mut self, shallow: bool) {
        self.shallow = shallow;
    }

    /// Bring the bucket to `now` and change its rate (`None`: unpaced).
    ///
    /// Only whole bytes are added; what the interval earned beyond them
    /// carries over to the next refill. (Dropping it would lose up to a
    /// byte per refill: refills closer together than one byte's time would
    /// add nothing, and a caller that waits exactly
    /// [`TokenBucket::wait_ns`] would wait again, forever.)
    pub fn refill(&mut self, now: Nanos, rate_bps: Option<u64>) {
        let dt = now.saturating_sub(self.last);
        self.last = self.last.max(now);
        if let Some(r) = self.rate_bps {
            let earned = u128::from(r) * u128::from(dt) + self.carry;
            let (add, rest) = (earned / (8 * NANOS_PER_S), earned % (8 * NANOS_PER_S));
            let depth = self.depth_now(r);
            self.tokens = self.tokens.saturating_add(add.min(i64::MAX as u128) as i64);
            if self.tokens >= depth {
                // Full: nothing carries over.
                self.tokens = depth;
                self.carry = 0;
            } else {
                self.carry = rest;
            }
        }
        if self.rate_bps.is_none() && rate_bps.is_some() {
            self.tokens = rate_bps.map_or(0, |r| self.depth_now(r));
        }
        self.rate_bps = rate_bps;
    }

    /// Whether a packet may leave now.
    pub fn has_budget(&self) -> bool {
        self.rate_bps.is_none() || self.tokens > 0
    }

    /// Take `bytes` of budget (may go below zero).
    pub fn take(&mut self, bytes: usize) {
        if self.rate_bps.is_some() {
            self.tokens = self.tokens.saturating_sub(bytes as i64);
        }
    }

    /// Time from the last refill until `bytes` more have budget.
    pub fn wait_ns(&self, bytes: usize) -> Nanos {
        let Some(r) = self.rate_bps.filter(|r| *r > 0) else {
            return 0;
        };
        // Negative tokens are a debt that is paid first.
        let short = (bytes as i64).saturating_sub(self.tokens).max(0);
        self.time_for(r, short as u64)
    }

    /// Budget left once `bytes` more have left, as time at the rate, from
    /// the last refill (0 when none, or with no rate).
    pub fn spare_ns(&self, bytes: usize) -> Nanos {
        let Some(r) = self.rate_bps.filter(|r| *r > 0) else {
            return 0;
        };
        let left = self.tokens.saturating_sub(bytes as i64).max(0) as u128;
        (left * 8 * NANOS_PER_S / u128::from(r)).min(u128::from(Nanos::MAX)) as Nanos
    }

    /// From the last refill, how long until `short` more bytes are earned
    /// at `r` (rounded up: at that time they are there).
    fn time_for(&self, r: u64, short: u64) -> Nanos {
        if short == 0 {
            return 0;
        }
        let owed = (u128::from(short) * 8 * NANOS_PER_S).saturating_sub(self.carry);
        owed.div_ceil(u128::from(r)).min(u128::from(Nanos::MAX)) as Nanos
    }

    /// Bytes a release waits for when `queued` bytes wait: a batch of
    /// [`RELEASE_BATCH_NS`] at the rate (at most half the bucket), or all
    /// that waits if less.
    pub fn release_need(&self, queued: usize) -> usize {
        let Some(r) = self.rate_bps else {
            return 1;
        };
        let batch = (u128::from(r) * u128::from(RELEASE_BATCH_NS) / (8 * NANOS_PER_S)) as i64;
        batch.min(self.depth_now(r) / 2).min(queued as i64).max(1) as usize
    }

    /// Whether a release of `queued` waiting bytes may start now.
    pub fn release_ready(&self, queued: usize) -> bool {
        self.rate_bps.is_none() || self.tokens >= self.release_need(queued) as i64
    }

    /// When a release of `queued` waiting bytes may start.
    pub fn release_at(&self, now: Nanos, queued: usize) -> Nanos {
        (self.last + self.wait_ns(self.release_need(queued))).max(now)
    }

    /// When the bucket next has budget (`now` if it has).
    pub fn budget_at(&self, now: Nanos) -> Nanos {
        match self.rate_bps.filter(|r| *r > 0) {
            Some(r) if self.tokens <= 0 => {
                let need = (1 - self.tokens) as u64;
                (self.last + self.time_for(r, need)).max(now)
            }
            _ => now,
        }
    }
}

#[cfg(test)]
#[path = "bucket_tests.rs"]
mod tests;
