//! [`ResendDelay`]: how long the answers to this receiver's requests
//! (NACKs) actually took to arrive, as RFC 6298 estimates a round trip
//! for TCP's retransmission timer: a smoothed delay and its variation,
//! and a timeout of the smoothed delay plus four variations.
//!
//! Why: a resend leaves the peer paced like data on its recovery path.
//! It waits for that path's budget (on a 4 Mbit/s path, a pacing burst
//! and one packet of eight pieces are 50 ms of it) and then in the path's
//! bottleneck queue, none of which the paths' round trips show. The wait
//! built from round trips alone ran out first: over two 4 Mbit/s paths
//! (5 and 30 ms), 113 of 145 gaps were given up, and 122 of their
//! answers arrived after that (`reorder.late_delivered`): losses to the
//! inner TCP all the same.
//!
//! A sample is the time from a gap's request (or, when answers to other
//! gaps were still due, from when its own answer could follow theirs) to
//! the arrival of the packet it asked for, whether within the wait or
//! after it (those are what it must learn); a packet asked for whose
//! answer never comes gives none.
//!
//! Invariants: no sample, no estimate; the timeout never exceeds
//! [`super::recovery::RECOVERY_WAIT_MAX_NS`] (the caller's bound); no
//! allocation.

use crate::Nanos;

/// Gain of a new sample in the smoothed delay and in its variation
/// (RFC 6298 §2: alpha = 1/8, beta = 1/4; spec constants).
const ALPHA_DIV: i64 = 8;
const BETA_DIV: i64 = 4;
/// The timeout is the smoothed delay plus this many variations (RFC 6298
/// §2's K; spec constant).
const K: u64 = 4;

/// See the module documentation.
#[derive(Debug, Clone, Copy, Default)]
pub struct ResendDelay {
    /// Smoothed delay and its mean deviation, ns; `None` before the
    /// first sample.
    srtt_var: Option<(Nanos, Nanos)>,
}

impl ResendDelay {
    /// The answer to a request sent `delay_ns` ago arrived.
    pub fn on_sample(&mut self, delay_ns: Nanos) {
        self.srtt_var = Some(match self.srtt_var {
            None => (delay_ns, delay_ns / 2),
            Some((srtt, var)) => {
                let err = (srtt as i64 - delay_ns as i64).unsigned_abs();
                let var = var as i64 + (err as i64 - var as i64) / BETA_DIV;
                let srtt = srtt as i64 + (delay_ns as i64 - srtt as i64) / ALPHA_DIV;
                (srtt.max(0) as Nanos, var.max(0) as Nanos)
            }
        });
    }

    /// How long an answer may take: the smoothed delay plus four
    /// variations; `None` before any sample.
    pub fn timeout(&self) -> Option<Nanos> {
        self.srtt_var
            .map(|(srtt, var)| srtt.saturating_add(var.saturating_mul(K)))
    }

    /// The smoothed delay, ns (status).
    pub fn smoothed(&self) -> Option<Nanos> {
        self.srtt_var.map(|(s, _)| s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NANOS_PER_MS;

    const MS: Nanos = NANOS_PER_MS;

    #[test]
    fn no_sample_no_estimate() {
        assert_eq!(ResendDelay::default().timeout(), None);
    }

    /// RFC 6298 §2.2: the first sample R gives SRTT = R, RTTVAR = R/2, so
    /// the timeout is 3R.
    #[test]
    fn the_first_sample_gives_three_times_itself() {
        let mut d = ResendDelay::default();
        d.on_sample(20 * MS);
        assert_eq!(d.timeout(), Some(60 * MS));
    }

    /// Steady answers: the variation decays, and the timeout comes down to
    /// a little above them.
    #[test]
    fn steady_answers_bring_the_timeout_down() {
        let mut d = ResendDelay::default();
        for _ in 0..60 {
            d.on_sample(40 * MS);
        }
        let t = d.timeout().unwrap();
        assert!((40 * MS..42 * MS).contains(&t), "{t}");
    }

    /// Answers that take longer now (a path's queue filled): the timeout
    /// follows them up within a few samples, above the new delay.
    #[test]
    fn slower_answers_raise_it() {
        let mut d = ResendDelay::default();
        for _ in 0..30 {
            d.on_sample(20 * MS);
        }
        for _ in 0..4 {
            d.on_sample(60 * MS);
        }
        let t = d.timeout().unwrap();
        assert!(t > 60 * MS, "{t}");
    }
}
