//! Rate meters and delay histograms of the traffic classes.
//!
//! [`RateBucket`] is a token bucket (RFC 2697's single-rate meter without
//! colours): it allows `rate` bits per second with a burst of
//! [`BURST_NS`] at that rate. A class's maximum rate polices its input
//! (excess dropped before it takes queue space); its guaranteed rate lets
//! it be served ahead of higher precedence while it is under it.
//!
//! [`DelayHistogram`] counts queueing delays in buckets a quarter-octave
//! wide (each bucket 19 % wider than the last) from 1 µs to 17 s, for
//! percentiles within that resolution in constant memory.
//!
//! Invariants: a bucket never holds more than its depth; a histogram's
//! total equals the number of samples recorded.

use serde::{Deserialize, Serialize};

use crate::{Nanos, NANOS_PER_MS};

/// Burst a rate bucket allows, as time at its rate (tuning knob: 20 ms,
/// several packets of a VoIP call at any sensible rate).
pub const BURST_NS: Nanos = 20 * NANOS_PER_MS;
/// Smallest bucket depth, bytes (two full-size packets).
const MIN_DEPTH_BYTES: u64 = 3000;

/// A token bucket in bytes. See the module documentation.
#[derive(Debug, Clone)]
pub struct RateBucket {
    rate_bps: u64,
    depth: i64,
    /// Below zero: service beyond the rate, owed (at most one depth).
    tokens: i64,
    last: Nanos,
}

impl RateBucket {
    pub fn new(rate_bps: u64) -> Self {
        let depth = ((u128::from(rate_bps) * u128::from(BURST_NS) / 8_000_000_000) as u64)
            .max(MIN_DEPTH_BYTES)
            .min(i64::MAX as u64 / 2) as i64;
        Self {
            rate_bps,
            depth,
            tokens: depth,
            last: 0,
        }
    }

    fn refill(&mut self, now: Nanos) {
        let dt = now.saturating_sub(self.last);
        self.last = self.last.max(now);
        let add = (u128::from(self.rate_bps) * u128::from(dt) / 8_000_000_000)
            .min(self.depth as u128 * 2) as i64;
        self.tokens = (self.tokens + add).min(self.depth);
    }

    /// Whether `len` bytes fit the rate now (without taking them).
    pub fn fits(&mut self, now: Nanos, len: usize) -> bool {
        self.refill(now);
        self.tokens >= len as i64
    }

    /// Take `len` bytes if they fit; `false` (nothing taken) if not.
    pub fn take(&mut self, now: Nanos, len: usize) -> bool {
        let ok = self.fits(now, len);
        if ok {
            self.tokens -= len as i64;
        }
        ok
    }

    /// Take `len` bytes whether or not they fit: service beyond the rate
    /// is owed, up to one bucket depth.
    pub fn charge(&mut self, now: Nanos, len: usize) {
        self.refill(now);
        self.tokens = (self.tokens - len.min(self.depth as usize) as i64).max(-self.depth);
    }
}

/// Buckets per octave of delay.
const PER_OCTAVE: u32 = 4;
/// Octaves covered from 1 µs.
const OCTAVES: u32 = 24;
const BUCKETS: usize = (PER_OCTAVE * OCTAVES) as usize + 1;

/// Queueing-delay histogram. See the module documentation.
#[derive(Debug, Clone)]
pub struct DelayHistogram {
    counts: Box<[u64; BUCKETS]>,
    total: u64,
    max_ns: Nanos,
}

impl Default for DelayHistogram {
    fn default() -> Self {
        Self {
            counts: Box::new([0; BUCKETS]),
            total: 0,
            max_ns: 0,
        }
    }
}

/// Delay percentiles of one class, milliseconds.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct DelayPercentiles {
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

impl DelayHistogram {
    fn bucket(ns: Nanos) -> usize {
        let us = ns / 1000;
        if us == 0 {
            return 0;
        }
        let l2 = 63 - us.leading_zeros();
        // Quarter octaves from the two bits below the leading one.
        let frac = if l2 >= 2 {
            ((us >> (l2 - 2)) & 3) as u32
        } else {
            ((us << (2 - l2)) & 3) as u32
        };
        ((l2 * PER_OCTAVE + frac + 1) as usize).min(BUCKETS - 1)
    }

    /// Upper edge of bucket `b`, ns.
    fn upper_ns(b: usize) -> f64 {
        if b == 0 {
            return 1000.0;
        }
        let octave = (b - 1) as u32 / PER_OCTAVE;
        let frac = (b - 1) as u32 % PER_OCTAVE;
        1000.0 * 2f64.powi(octave as i32) * (1.0 + f64::from(frac + 1) / f64::from(PER_OCTAVE))
    }

    pub fn record(&mut self, ns: Nanos) {
        self.counts[Self::bucket(ns)] += 1;
        self.total += 1;
        self.max_ns = self.max_ns.max(ns);
    }

    pub fn total(&self) -> u64 {
        self.total
    }

    /// The delay below which a fraction `q` of the samples fall (the upper
    /// edge of its bucket, at most the largest sample), ns.
    pub fn quantile_ns(&self, q: f64) -> f64 {
        if self.total == 0 {
            return 0.0;
        }
        let want = (q * self.total as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (b, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= want {
                return Self::upper_ns(b).min(self.max_ns as f64);
            }
        }
        self.max_ns as f64
    }

    pub fn percentiles(&self) -> DelayPercentiles {
        let ms = |ns: f64| ns / NANOS_PER_MS as f64;
        DelayPercentiles {
            p50_ms: ms(self.quantile_ns(0.5)),
            p90_ms: ms(self.quantile_ns(0.9)),
            p99_ms: ms(self.quantile_ns(0.99)),
            max_ms: ms(self.max_ns as f64),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_polices_at_its_rate() {
        // 1 Mbit/s: 125 bytes per ms; depth 20 ms = 2500 → 3000 minimum.
        let mut b = RateBucket::new(1_000_000);
        let mut taken = 0;
        for ms in 0..1000u64 {
            for _ in 0..10 {
                if b.take(ms * NANOS_PER_MS, 100) {
                    taken += 100;
                }
            }
        }
        // One second at 125 kB/s plus the initial burst.
        assert!((125_000..=128_100).contains(&taken), "{taken}");
        assert!(!b.fits(1000 * NANOS_PER_MS, 3001), "never beyond the depth");
        b.charge(1000 * NANOS_PER_MS, 10_000);
        assert!(!b.fits(1000 * NANOS_PER_MS, 1));
        // The debt (one depth at most) is paid before anything fits.
        assert!(!b.fits(1015 * NANOS_PER_MS, 1));
        assert!(b.fits(1030 * NANOS_PER_MS, 1));
    }

    #[test]
    fn percentiles_within_a_quarter_octave() {
        let mut h = DelayHistogram::default();
        for i in 1..=1000u64 {
            h.record(i * 10_000); // 10 µs .. 10 ms
        }
        let p = h.percentiles();
        assert!((5.0..=6.0).contains(&p.p50_ms), "{p:?}");
        assert!((9.9..=10.0).contains(&p.p99_ms), "{p:?}");
        assert_eq!(p.max_ms, 10.0);
        assert_eq!(h.total(), 1000);
        h.record(0);
        h.record(u64::MAX);
        assert_eq!(h.total(), 1002);
    }
}
