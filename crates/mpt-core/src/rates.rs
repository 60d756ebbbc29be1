//! Throughput over the last second: bits and packets per second, per path
//! and in all, from the cumulative counters the tunnel keeps.
//!
//! [`RateWindow::update`] takes a snapshot of the counters at most once per
//! [`RATE_WINDOW_NS`]; the rates are the differences of the last two
//! snapshots over the time between them. Invariants: pure arithmetic on
//! `now` and counters (no clock); rates are `None` until two snapshots
//! exist; a counter that went backwards (a restart of the counting side)
//! reads as zero, never as a huge rate.

use serde::{Deserialize, Serialize};

use crate::{Nanos, NANOS_PER_MS};

/// Shortest interval between two snapshots (tuning knob: one second, the
/// interval of `ifstat`-like tools).
pub const RATE_WINDOW_NS: Nanos = 1_000 * NANOS_PER_MS;

/// Cumulative counters of one path (or of the tunnel) at one instant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub tx_bytes: u64,
    pub tx_packets: u64,
    pub rx_bytes: u64,
    pub rx_packets: u64,
}

/// Rates of one path or of the tunnel.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Rates {
    pub tx_bps: f64,
    pub tx_pps: f64,
    pub rx_bps: f64,
    pub rx_pps: f64,
}

/// Snapshots of every path's counters; see the module documentation.
#[derive(Debug, Clone, Default)]
pub struct RateWindow {
    last: Option<(Nanos, Vec<Counts>)>,
    rates: Vec<Rates>,
}

impl RateWindow {
    /// Whether a snapshot is due at `now` (cheap: call every turn).
    pub fn due(&self, now: Nanos) -> bool {
        self.last
            .as_ref()
            .is_none_or(|(t, _)| now.saturating_sub(*t) >= RATE_WINDOW_NS)
    }

    /// Snapshot `counts` (one per path) at `now` if one is due.
    pub fn update(&mut self, now: Nanos, counts: Vec<Counts>) {
        if !self.due(now) {
            return;
        }
        if let Some((t, prev)) = &self.last {
            let secs = now.saturating_sub(*t) as f64 / 1e9;
            let per_s = |a: u64, b: u64| a.saturating_sub(b) as f64 / secs;
            self.rates = counts
                .iter()
                .zip(prev.iter().chain(std::iter::repeat(&Counts::default())))
                .map(|(c, p)| Rates {
                    tx_bps: 8.0 * per_s(c.tx_bytes, p.tx_bytes),
                    tx_pps: per_s(c.tx_packets, p.tx_packets),
                    rx_bps: 8.0 * per_s(c.rx_bytes, p.rx_bytes),
                    rx_pps: per_s(c.rx_packets, p.rx_packets),
                })
                .collect();
        }
        self.last = Some((now, counts));
    }

    /// Rates of path `i` over the last window.
    pub fn path(&self, i: usize) -> Option<Rates> {
        self.rates.get(i).copied()
    }

    /// Rates of all paths together.
    pub fn total(&self) -> Option<Rates> {
        if self.rates.is_empty() {
            return None;
        }
        Some(self.rates.iter().fold(Rates::default(), |a, r| Rates {
            tx_bps: a.tx_bps + r.tx_bps,
            tx_pps: a.tx_pps + r.tx_pps,
            rx_bps: a.rx_bps + r.rx_bps,
            rx_pps: a.rx_pps + r.rx_pps,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Nanos = 1_000_000_000;

    fn c(tx: u64, rx: u64) -> Counts {
        Counts {
            tx_bytes: tx,
            tx_packets: tx / 1000,
            rx_bytes: rx,
            rx_packets: rx / 1000,
        }
    }

    #[test]
    fn rates_over_the_last_window() {
        let mut w = RateWindow::default();
        w.update(0, vec![c(0, 0), c(0, 0)]);
        assert_eq!(w.path(0), None);
        // Not due yet: ignored.
        w.update(S / 2, vec![c(999_999, 0), c(0, 0)]);
        w.update(2 * S, vec![c(2_000_000, 500_000), c(250_000, 0)]);
        let p0 = w.path(0).unwrap();
        assert_eq!(p0.tx_bps, 8_000_000.0);
        assert_eq!(p0.tx_pps, 1_000.0);
        assert_eq!(p0.rx_bps, 2_000_000.0);
        let t = w.total().unwrap();
        assert_eq!(t.tx_bps, 9_000_000.0);
        // A counter that went backwards reads as zero.
        w.update(3 * S, vec![c(0, 0), c(250_000, 0)]);
        assert_eq!(w.path(0).unwrap().tx_bps, 0.0);
    }
}
