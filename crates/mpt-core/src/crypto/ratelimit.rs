//! Token buckets for handshake initiations: one per source address, plus one
//! for all sources together.
//!
//! Invariants: memory is bounded by [`knobs::RATE_LIMIT_SOURCES`] entries
//! (the least recently refilled entry is evicted); time only enters as
//! `now`; a refused initiation costs one map lookup and no cryptography.

use std::collections::HashMap;
use std::net::IpAddr;

use super::knobs;
use crate::Nanos;

const NANOS_PER_S: u64 = 1_000_000_000;

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    last: Nanos,
}

impl Bucket {
    fn take(&mut self, now: Nanos, rate: f64, burst: f64) -> bool {
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
    global: Bucket,
}

impl Default for RateLimiter {
    fn default() -> Self {
        Self {
            per_source: HashMap::new(),
            global: Bucket {
                tokens: f64::from(knobs::HANDSHAKE_GLOBAL_PER_S),
                last: 0,
            },
        }
    }
}

impl RateLimiter {
    /// Whether an initiation from `src` at `now` may be processed.
    pub fn allow(&mut self, src: IpAddr, now: Nanos) -> bool {
        let burst = f64::from(knobs::HANDSHAKE_BURST_PER_SOURCE);
        if !self.per_source.contains_key(&src) && self.per_source.len() >= knobs::RATE_LIMIT_SOURCES
        {
            if let Some(oldest) = self
                .per_source
                .iter()
                .min_by_key(|(_, b)| b.last)
                .map(|(k, _)| *k)
            {
                self.per_source.remove(&oldest);
            }
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
    }
}
