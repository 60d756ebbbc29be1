//! A class's fair share per flow, and the policing of flows that do not
//! answer drops: the ED-SGSN thesis's "drop the excess of misbehaving
//! flows at the input" (Lefebvre, `../shared/papers/lefebvre-ed-sgsn-thesis.txt`,
//! early demultiplexing: a flow beyond its share loses its excess before
//! it takes queue space or a copy).
//!
//! Why DRR alone is not enough: DRR is work-conserving. A TCP flow backs
//! off after each drop (CUBIC to 0.7 of its window) and stays below its
//! share while it grows back; DRR hands what it leaves to whoever has
//! packets waiting, and an unresponsive flow always has. Over Wi-Fi + LTE a
//! UDP flood at 5× the links took 40 Mbit/s next to four TCP flows with
//! 17-18 each, twice their rate.
//!
//! * A flow is *misbehaving* once it is *heavy* — it brought at least
//!   [`HEAVY_FACTOR`] times an equal share of the class's rate into the
//!   class in the last measured window — and, while heavy, the class is
//!   full and it is the fattest flow (it loses packets from its head,
//!   [`super::drr`]), or CoDel dropped [`UNRESPONSIVE_DROPS`] of its
//!   packets in one dropping episode. It stays so while it is still heavy
//!   by what it *offers* (admitted or refused) and keeps sending beyond
//!   its allowance, and [`FLAG_HOLD_NS`] after.
//! * Why offered and not refused: a TCP flow held to a token bucket keeps
//!   finding its bottom (its window's bursts are deeper than the bucket),
//!   so "refused" alone would hold a TCP flow that was flagged once (at a
//!   burst, in slow start) for the rest of its life, at a fraction of its
//!   share (over 200 + 10 Mbit/s, two of sixteen flows at 3.4 Mbit/s
//!   beside 12.3 for the rest, in one run of six). A TCP flow that backs
//!   off offers about its share, less than [`HEAVY_FACTOR`] of it, and is
//!   let go one hold after; a flood keeps offering many shares.
//! * Why heavy: a flow that backs off cannot be starved by one that does
//!   not. A TCP flow's rate into the class follows its acknowledgements,
//!   so it sends about what DRR serves it, an equal share; it can be the
//!   fattest backlog for a moment (its window's worth) and lose packets
//!   there, and it answers by halving its window. Policing it as well
//!   would be a second, harsher penalty (a token bucket a few ms deep cuts
//!   TCP far below its rate). Four TCP flows beside a flood on 60 + 15
//!   Mbit/s once got 3.8, 41.7, 4.3 and 3.8 Mbit/s (Jain 0.40): the
//!   pattern of three flows held by the policer and one left free. A flood
//!   is heavy by construction, and once policed its refusals keep its
//!   flag up.
//! * Its allowance is the rate admitted into the class over the last
//!   [`WINDOW_NS`], smoothed, or half the paths' estimated capacity (which
//!   the tunnel passes in) where that is higher, divided by the flows that
//!   share the class: those that carried at least 1 / [`SHARING_FRACTION`]
//!   of an equal share in that window, so that acknowledgements and
//!   telemetry do not shrink it; never more than the capacity estimate,
//!   since what is admitted beyond it does not leave (an unpoliced flood's
//!   rate would otherwise count as the class's and be shared out). It is
//!   policed at the input by a token bucket [`BUCKET_NS`] deep at that
//!   rate, and only while at least one other flow shares the class (every
//!   packet of the class counts, whether it waits in the class queue or,
//!   with that queue empty, goes straight to a path queue). The policed
//!   flow's own admitted rate is part of the class's, so beside elastic
//!   flows (TCP) the allowance settles where it gets their mean rate
//!   (a = (a + T) / n, so a = T / (n - 1)): what they leave unused while
//!   they grow back after a loss stays unused by it. Beside flows that
//!   send little, the capacity's half keeps it from being starved.
//!
//! Invariants: no allocation; there is no allowance until one window has
//! been measured (nothing is policed before), nor after a window of more
//! than twice the length (the input is only counted while some flow is
//! flagged); a flow is policed only while flagged.

use crate::{Nanos, NANOS_PER_MS};

/// Measurement window of the class's admitted rate and sharing flows
/// (tuning knob: a few of the inner flows' round trips' worth of samples).
pub const WINDOW_NS: Nanos = 100 * NANOS_PER_MS;
/// CoDel drops in one dropping episode after which a flow counts as not
/// answering them (tuning knob: CoDel's drop rate rises as 1/sqrt(count),
/// a responsive TCP leaves the episode after one or two).
pub const UNRESPONSIVE_DROPS: u32 = 8;
/// How long a flow stays flagged after its last sign of misbehaviour
/// (tuning knob).
pub const FLAG_HOLD_NS: Nanos = 1_000 * NANOS_PER_MS;
/// Depth of a policed flow's bucket, as time at its allowance (tuning knob).
pub const BUCKET_NS: Nanos = 20 * NANOS_PER_MS;
/// The paths' capacity estimate counts for 1 / this (tuning knob: it
/// comes from pacing rates, which probe above the capacity and start high
/// on a path not yet measured; over Wi-Fi + LTE with a flood, the full
/// estimate let the flood take 39 Mbit/s beside four TCP flows with 15-16).
const CAPACITY_TRUST: u64 = 2;
/// A flow is heavy when it brought at least this many equal shares of the
/// class's rate into the class in the last window (tuning knob: a TCP
/// flow brings about one; a flood at its first window many).
pub const HEAVY_FACTOR: u64 = 2;
/// A flow counts as sharing the class if it carried at least 1 / this of
/// an equal share in the window (tuning knob).
pub const SHARING_FRACTION: u64 = 8;
/// Smoothing of the class's admitted rate: gain 1 / this per window (the
/// allowance's distance to where it settles shrinks by 1/2 + 1/(2n) per
/// window, n the flows).
const SMOOTHING_DIV: u64 = 2;
const NANOS_PER_S: u128 = 1_000_000_000;

/// Buckets tracked (the class's flow buckets).
const BITS: usize = super::FLOW_BUCKETS;

/// The class-wide side. See the module documentation.
#[derive(Debug, Clone)]
pub struct FairShare {
    window_start: Option<Nanos>,
    admitted_bytes: u64,
    /// Bytes admitted per bucket in the current window.
    bytes: [u32; BITS],
    /// Bytes offered (admitted or refused) per bucket in the current
    /// window.
    offered: [u32; BITS],
    /// Smoothed admitted rate, bytes per second.
    rate_bps: u64,
    /// What the class can carry, bytes per second (the tunnel's estimate).
    capacity_bps: Option<u64>,
    /// The rate shared out, bytes per second: the admitted rate, or half
    /// the capacity estimate where that is higher.
    base_bps: u64,
    /// Flows that carried at least [`SHARING_FRACTION`] of an equal share
    /// in the last complete window.
    flows: u32,
    /// Bytes offered per bucket in the last complete window, and what an
    /// equal share of the rate shared out was in it (0: not measured).
    last_offered: [u32; BITS],
    last_equal_bytes: u64,
}

impl Default for FairShare {
    fn default() -> Self {
        Self {
            window_start: None,
            admitted_bytes: 0,
            bytes: [0; BITS],
            offered: [0; BITS],
            rate_bps: 0,
            capacity_bps: None,
            base_bps: 0,
            flows: 0,
            last_offered: [0; BITS],
            last_equal_bytes: 0,
        }
    }
}

impl FairShare {
    /// `len` bytes of bucket `f` came to the class at `now` (before the
    /// policer: admitted or not).
    pub fn on_offered(&mut self, now: Nanos, f: usize, len: usize) {
        self.roll(now);
        self.offered[f] = self.offered[f].saturating_add(len as u32);
    }

    /// `len` bytes of bucket `f` entered the class at `now` (after
    /// [`Self::on_offered`]).
    pub fn on_admitted(&mut self, now: Nanos, f: usize, len: usize) {
        self.roll(now);
        self.admitted_bytes += len as u64;
        self.bytes[f] = self.bytes[f].saturating_add(len as u32);
    }

    /// What the class can carry, in bytes per second (`None`: unknown).
    pub fn set_capacity(&mut self, bps: Option<u64>) {
        self.capacity_bps = bps;
    }

    fn roll(&mut self, now: Nanos) {
        let start = *self.window_start.get_or_insert(now);
        if now < start + WINDOW_NS {
            return;
        }
        let elapsed = now - start;
        let bps = (u128::from(self.admitted_bytes) * NANOS_PER_S / u128::from(elapsed)) as u64;
        if elapsed <= 2 * WINDOW_NS {
            self.rate_bps = match self.rate_bps {
                0 => bps,
                r => r - r / SMOOTHING_DIV + bps / SMOOTHING_DIV,
            };
            // What was admitted beyond the capacity did not leave (a flood
            // before it is flagged): it is not shared out.
            let capacity = self.capacity_bps.unwrap_or(0);
            self.base_bps = (capacity / CAPACITY_TRUST).max(self.rate_bps);
            if capacity > 0 {
                self.base_bps = self.base_bps.min(capacity);
            }
            // Flows below a fraction of an equal share (acknowledgements,
            // telemetry) leave the others' shares as they are.
            let active = self.bytes.iter().filter(|b| **b > 0).count() as u64;
            let equal_bytes = match active {
                0 => 0,
                n => (u128::from(self.base_bps) * u128::from(elapsed) / NANOS_PER_S) as u64 / n,
            };
            let floor = (equal_bytes / SHARING_FRACTION).max(1);
            self.flows = self
                .bytes
                .iter()
                .filter(|b| u64::from(**b) >= floor)
                .count() as u32;
            self.last_offered = self.offered;
            self.last_equal_bytes = match self.flows {
                0 => 0,
                n => {
                    (u128::from(self.base_bps) * u128::from(elapsed) / NANOS_PER_S) as u64
                        / u64::from(n)
                }
            };
        } else {
            // A window much longer than the nominal one was idle in part,
            // or not measured (nothing was policed): nothing is known
            // until the next one.
            self.rate_bps = 0;
            self.base_bps = 0;
            self.flows = 0;
            self.last_equal_bytes = 0;
        }
        self.bytes = [0; BITS];
        self.offered = [0; BITS];
        self.admitted_bytes = 0;
        self.window_start = Some(now);
    }

    /// A flow's allowance in bytes per second, if flows share the class
    /// (none: no second flow, or nothing measured yet).
    pub fn allowance_bps(&self) -> Option<u64> {
        (self.flows >= 2 && self.base_bps > 0).then(|| self.base_bps / u64::from(self.flows))
    }

    /// Whether bucket `f` was heavy in the last window, by what it offered
    /// (see the module documentation): only a heavy flow is flagged, or
    /// stays so.
    pub fn heavy(&self, f: usize) -> bool {
        self.flows >= 2
            && self.last_equal_bytes > 0
            && u64::from(self.last_offered[f]) >= HEAVY_FACTOR * self.last_equal_bytes
    }

    /// Flows sharing the class in the last window (status).
    pub fn flows(&self) -> u32 {
        self.flows
    }
}

/// The per-flow side: the flag and the token bucket.
#[derive(Debug, Clone, Copy, Default)]
pub struct Police {
    flagged_until: Nanos,
    tokens: u64,
    refilled_at: Nanos,
}

impl Police {
    /// A sign of misbehaviour at `now`; whether it starts an episode (the
    /// flow was not flagged).
    pub fn flag(&mut self, now: Nanos) -> bool {
        let new = now >= self.flagged_until;
        if new {
            // A new episode starts with a full bucket.
            self.tokens = u64::MAX;
            self.refilled_at = now;
        }
        self.flagged_until = now + FLAG_HOLD_NS;
        new
    }

    pub fn flagged(&self, now: Nanos) -> bool {
        now < self.flagged_until
    }

    pub fn flagged_until(&self) -> Nanos {
        self.flagged_until
    }

    /// Whether `len` bytes may enter at `now` under `allowance` (bytes per
    /// second; `None`: nothing to police against). A refusal does not by
    /// itself keep the flag up: the caller flags again a flow that is
    /// still heavy ([`FairShare::heavy`]).
    pub fn admit(&mut self, now: Nanos, len: usize, allowance: Option<u64>) -> bool {
        let (true, Some(rate)) = (self.flagged(now), allowance) else {
            return true;
        };
        let depth =
            ((u128::from(rate) * u128::from(BUCKET_NS) / NANOS_PER_S) as u64).max(2 * len as u64);
        let add = u128::from(rate) * u128::from(now.saturating_sub(self.refilled_at)) / NANOS_PER_S;
        self.tokens = (u128::from(self.tokens.min(depth)) + add).min(u128::from(depth)) as u64;
        self.refilled_at = now;
        if self.tokens >= len as u64 {
            self.tokens -= len as u64;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Nanos = NANOS_PER_MS;

    /// `len` bytes of `f` came and were admitted.
    fn came(s: &mut FairShare, now: Nanos, f: usize, len: usize) {
        s.on_offered(now, f, len);
        s.on_admitted(now, f, len);
    }

    #[test]
    fn the_allowance_is_the_capacity_over_the_flows_that_share_it() {
        let mut s = FairShare::default();
        assert_eq!(s.allowance_bps(), None);
        // 5 flows, 1000 bytes each per ms (5 MB/s), and 2 that send 10
        // bytes per ms (acknowledgements): they do not count.
        let run = |s: &mut FairShare, from: u64| {
            for t in from..=from + 300 {
                for f in 0..5 {
                    came(s, t * MS, f * 40, 1000);
                }
                came(s, t * MS, 201, 10);
                came(s, t * MS, 202, 10);
            }
        };
        run(&mut s, 0);
        assert_eq!(s.flows(), 5);
        let a = s.allowance_bps().unwrap();
        assert!((995_000..=1_010_000).contains(&a), "{a}");
        // With a capacity estimate of 20 MB/s, each gets a fifth of its
        // half (the estimate comes from pacing rates, which run high).
        s.set_capacity(Some(20_000_000));
        run(&mut s, 400);
        assert_eq!(s.allowance_bps(), Some(2_000_000));
    }

    #[test]
    fn a_flood_admitted_beyond_the_capacity_is_not_shared_out() {
        // A flood at 50 MB/s before it is flagged, beside four flows at
        // 1 MB/s, over a tunnel that carries 10 MB/s: each gets a fifth of
        // the capacity, not of what was admitted.
        let mut s = FairShare::default();
        s.set_capacity(Some(10_000_000));
        for t in 0..=300 {
            came(&mut s, t * MS, 7, 50_000);
            for f in [1, 2, 3, 4] {
                came(&mut s, t * MS, f, 1000);
            }
        }
        assert_eq!(s.flows(), 5);
        assert_eq!(s.allowance_bps(), Some(2_000_000));
    }

    #[test]
    fn only_a_flow_far_beyond_an_equal_share_is_heavy() {
        // The flood brings 50 MB/s, four TCP-like flows 2 MB/s each (one
        // of them briefly 3.5), over a tunnel of 10 MB/s: 2 MB/s is an
        // equal share; only the flood is heavy.
        let mut s = FairShare::default();
        s.set_capacity(Some(10_000_000));
        assert!(!s.heavy(7), "nothing measured yet");
        for t in 0..=300 {
            came(&mut s, t * MS, 7, 50_000);
            for f in [1, 2, 3] {
                came(&mut s, t * MS, f, 2000);
            }
            came(&mut s, t * MS, 4, 3500);
        }
        assert!(s.heavy(7));
        assert!(!s.heavy(1) && !s.heavy(4) && !s.heavy(9));
    }

    #[test]
    fn a_heavy_flow_among_light_ones_is_not_policed() {
        // A video-like stream beside three telemetry-like flows: it alone
        // shares the class, whatever drops it had.
        let mut s = FairShare::default();
        s.set_capacity(Some(2_000_000));
        for t in 0..=300 {
            came(&mut s, t * MS, 9, 1000);
            for f in [1, 2, 3] {
                came(&mut s, t * MS, f, 10);
            }
        }
        assert_eq!((s.flows(), s.allowance_bps()), (1, None));
    }

    #[test]
    fn one_flow_alone_is_not_policed() {
        let mut s = FairShare::default();
        for t in 0..=300 {
            came(&mut s, t * MS, 3, 1000);
        }
        assert_eq!(s.allowance_bps(), None);
        let mut p = Police::default();
        p.flag(0);
        assert!((0..1000).all(|i| p.admit(i * 10_000, 1500, s.allowance_bps())));
    }

    #[test]
    fn a_flagged_flow_gets_its_allowance_for_one_hold() {
        let mut p = Police::default();
        let allowance = Some(1_000_000); // 1 MB/s
        assert!(p.admit(0, 1000, allowance), "unflagged: admitted");
        assert!(p.flag(0), "an episode begins");
        assert!(!p.flag(0), "the same episode");
        // Offered 10 MB/s for the hold: about 1 MB/s (plus one bucket)
        // admitted.
        let mut admitted = 0u64;
        for i in 0..10_000u64 {
            if p.admit(i * 100_000, 1000, allowance) {
                admitted += 1000;
            }
        }
        assert!((1_000_000..=1_030_000).contains(&admitted), "{admitted}");
        // Refusals alone do not hold the flag (the class flags a flow
        // that is still heavy again): no longer policed after the hold.
        assert!(!p.flagged(FLAG_HOLD_NS));
        assert!(p.admit(FLAG_HOLD_NS, 1000, allowance));
    }

    #[test]
    fn what_a_policed_flow_offers_keeps_it_heavy_not_what_it_is_admitted() {
        // A flood offers 50 MB/s and is admitted 2; four flows at 2 MB/s.
        let mut s = FairShare::default();
        s.set_capacity(Some(10_000_000));
        for t in 0..=300 {
            s.on_offered(t * MS, 7, 50_000);
            s.on_admitted(t * MS, 7, 2_000);
            for f in [1, 2, 3, 4] {
                s.on_offered(t * MS, f, 2000);
                s.on_admitted(t * MS, f, 2000);
            }
        }
        assert!(s.heavy(7));
        assert!(!s.heavy(1));
    }
}
