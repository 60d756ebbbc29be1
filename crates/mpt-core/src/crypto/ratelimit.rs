//! Token buckets for handshake initiations: one per source address, plus one
//! for all sources together.
//!
//! Invariants: memory is bounded by [`knobs::RATE_LIMIT_SOURCES`] entries;
//! when full, the entry tracked longest is forgotten (first in, first out),
//! so every update is O(1): one map lookup, at most one eviction. Time only
//! enters as `now`; a refused initiation costs no cryptography. Forgetting
//! a source gives it a fresh burst, never less than it had: eviction can
//! only be generous, and the global bucket still bounds the total. Under
//! load only sources proven by a cookie reach this limiter (`cookie.rs`),
//! so spoofed floods cannot evict honest entries then.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;

use super::knobs;
use crate::Nanos;

const NANOS_PER_S: u64 = 1_000_000_000;

/// A token bucket; `rate` and `burst` are given at each use.
#[derive(Debug, Clone, Copy)]
pub struct Bucket {
    tokens: f64,
    last: Nanos,
}

impl Bucket {
    /// A bucket holding `tokens` at time 0.
    pub fn full(tokens: f64) -> Self {
        Self { tokens, last: 0 }
    }

    /// Refill at `rate` per second up to `burst`, then take one token.
    pub fn take(&mut self, now: Nanos, rate: f64, burst: f64) -> bool {
        let dt = now.saturating_sub(self.last) as f64 / NANOS_PER_S as f64;
        self.tokens = (self.tokens + dt * rate).min(burst);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

pub struct RateLimiter {
    per_source: HashMap<IpAddr, Bucket>,
    /// Tracked sources in the order they were first seen (eviction order).
    order: VecDeque<IpAddr>,
    global: Bucket,
}

impl Default for RateLimiter {
    fn default() -> Self {
        Self {
            per_source: HashMap::new(),
            order: VecDeque::new(),
            global: Bucket::full(f64::from(knobs::HANDSHAKE_GLOBAL_PER_S)),
        }
    }
}

impl RateLimiter {
    /// Whether an initiation from `src` at `now` may be processed.
    pub fn allow(&mut self, src: IpAddr, now: Nanos) -> bool {
        let burst = f64::from(knobs::HANDSHAKE_BURST_PER_SOURCE);
        if !self.per_source.contains_key(&src) {
            if self.per_source.len() >= knobs::RATE_LIMIT_SOURCES {
                if let Some(oldest) = self.order.pop_front() {
                    self.per_source.remove(&oldest);
                }
            }
            self.order.push_back(src);
        }
        let b = self.per_source.entry(src).or_insert(Bucket {
            tokens: burst,
            last: now,
        });
        if !b.take(now, f64::from(knobs::HANDSHAKE_PER_SOURCE_PER_S), burst) {
            return false;
        }
        let g = f64::from(knobs::HANDSHAKE_GLOBAL_PER_S);
        self.global.take(now, g, g)
    }

    pub fn tracked_sources(&self) -> usize {
        self.per_source.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_source_burst_then_rate() {
        let mut r = RateLimiter::default();
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let burst = knobs::HANDSHAKE_BURST_PER_SOURCE as usize;
        let ok = (0..100).filter(|_| r.allow(a, 0)).count();
        assert_eq!(ok, burst);
        // Another source is not starved by the first.
        assert!(r.allow(b, 0));
        // After one second, the per-second rate is available again.
        let ok = (0..100).filter(|_| r.allow(a, NANOS_PER_S)).count();
        assert_eq!(ok, knobs::HANDSHAKE_PER_SOURCE_PER_S as usize);
    }

    #[test]
    fn global_cap_and_bounded_memory() {
        let mut r = RateLimiter::default();
        let ok = (0..10_000u32)
            .filter(|i| r.allow(IpAddr::from(i.to_be_bytes()), 0))
            .count();
        assert_eq!(ok, knobs::HANDSHAKE_GLOBAL_PER_S as usize);
        assert!(r.tracked_sources() <= knobs::RATE_LIMIT_SOURCES);
        assert_eq!(r.order.len(), r.tracked_sources());
    }

    #[test]
    fn eviction_is_first_in_first_out() {
        let mut r = RateLimiter::default();
        let first: IpAddr = "10.9.9.9".parse().unwrap();
        // Exhaust the first source's burst, then fill the table with others.
        let burst = knobs::HANDSHAKE_BURST_PER_SOURCE as usize;
        (0..burst).for_each(|_| {
            r.allow(first, 0);
        });
        assert!(!r.per_source[&first].tokens.ge(&1.0));
        for i in 1..knobs::RATE_LIMIT_SOURCES as u32 {
            r.allow(IpAddr::from(i.to_be_bytes()), 0);
        }
        assert!(r.per_source.contains_key(&first));
        // One more source: the first one seen is forgotten, no scan.
        r.allow(IpAddr::from(999_999u32.to_be_bytes()), 0);
        assert!(!r.per_source.contains_key(&first));
        assert_eq!(r.tracked_sources(), knobs::RATE_LIMIT_SOURCES);
    }
}
