//! [`SmoothedRtt`]: RFC 6298 §2's estimator of a delay that repeats (a
//! round trip): a smoothed value (SRTT, gain 1/8) and its mean deviation
//! (RTTVAR, gain 1/4), and a timeout of SRTT + 4 RTTVAR. The paths time
//! their round trips with it (`path.rs`), and loss recovery the time its
//! requests took to be answered (`tunnel/recovery.rs`: a resend is paced
//! and queued on its path, which no round trip shows).
//!
//! Invariants: no sample, no estimate; the arithmetic is RFC 6298 §2.3's
//! with shifts (as the path always timed its round trips), in
//! nanoseconds, never overflowing; no allocation.

use crate::Nanos;

/// RFC 6298 §2.3 gain for SRTT: 1/8 (spec constant).
const ALPHA_SHIFT: u32 = 3;
/// RFC 6298 §2.3 gain for RTTVAR: 1/4 (spec constant).
const BETA_SHIFT: u32 = 2;
/// RFC 6298 §2's K: the timeout is SRTT + K × RTTVAR (spec constant).
const K: u64 = 4;

/// See the module documentation.
#[derive(Debug, Clone, Copy, Default)]
pub struct SmoothedRtt {
    /// SRTT and RTTVAR, ns; `None` before the first sample.
    srtt_var: Option<(Nanos, Nanos)>,
}

impl SmoothedRtt {
    /// A sample (RFC 6298 §2.2 for the first, §2.3 after).
    pub fn on_sample(&mut self, sample: Nanos) {
        self.srtt_var = Some(match self.srtt_var {
            None => (sample, sample / 2),
            Some((s, v)) => {
                let err = s.abs_diff(sample);
                (
                    s - (s >> ALPHA_SHIFT) + (sample >> ALPHA_SHIFT),
                    v - (v >> BETA_SHIFT) + (err >> BETA_SHIFT),
                )
            }
        });
    }

    /// SRTT, once sampled.
    pub fn smoothed(&self) -> Option<Nanos> {
        self.srtt_var.map(|(s, _)| s)
    }

    /// RTTVAR (0 before the first sample).
    pub fn var(&self) -> Nanos {
        self.srtt_var.map_or(0, |(_, v)| v)
    }

    /// SRTT + 4 RTTVAR, once sampled.
    pub fn timeout(&self) -> Option<Nanos> {
        self.srtt_var
            .map(|(s, v)| s.saturating_add(v.saturating_mul(K)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NANOS_PER_MS;

    const MS: Nanos = NANOS_PER_MS;

    #[test]
    fn no_sample_no_estimate() {
        let r = SmoothedRtt::default();
        assert_eq!((r.smoothed(), r.var(), r.timeout()), (None, 0, None));
    }

    /// RFC 6298 §2.2: the first sample R gives SRTT = R, RTTVAR = R/2, so
    /// the timeout is 3R.
    #[test]
    fn the_first_sample_gives_three_times_itself() {
        let mut r = SmoothedRtt::default();
        r.on_sample(20 * MS);
        assert_eq!(r.timeout(), Some(60 * MS));
    }

    /// Steady samples: the variation decays, and the timeout comes down to
    /// a little above them.
    #[test]
    fn steady_samples_bring_the_timeout_down() {
        let mut r = SmoothedRtt::default();
        for _ in 0..60 {
            r.on_sample(40 * MS);
        }
        let t = r.timeout().unwrap();
        assert!((40 * MS..42 * MS).contains(&t), "{t}");
    }

    /// Samples that take longer now (a path's queue filled): the timeout
    /// follows them up within a few samples, above the new delay.
    #[test]
    fn slower_samples_raise_it() {
        let mut r = SmoothedRtt::default();
        for _ in 0..30 {
            r.on_sample(20 * MS);
        }
        for _ in 0..4 {
            r.on_sample(60 * MS);
        }
        assert!(r.timeout().unwrap() > 60 * MS);
    }
}
