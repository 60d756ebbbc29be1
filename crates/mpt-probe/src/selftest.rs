//! The stamping self-test (`mpt-probe stamp`): how finely and how steadily
//! this host stamps packets, measured with back-to-back packets on the
//! loopback, where the path itself adds next to nothing.
//!
//! For each packet the sender's stamp (user space, just before `sendto`),
//! the kernel's receive stamp (`SO_TIMESTAMPNS`) and the receiver's own
//! stamp after `recvmsg` give two latencies; their spread is the jitter of
//! the stamping itself, the figure the NetFPGA thesis states for its
//! hardware (6.25 ns resolution, about 8 ns jitter). The spacing of the
//! kernel stamps of consecutive packets shows the finest interval the
//! stamps separate in practice.
//!
//! Invariants: sans-IO (the caller measures, this module only reduces);
//! empty input gives zeros, never a panic.

use serde::Serialize;

/// Distribution of one latency, ns.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Spread {
    pub min_ns: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
    /// Standard deviation (sensitive to the rare interrupted packet).
    pub sd_ns: f64,
    /// Interquartile range, p75 − p25: the typical spread.
    pub iqr_ns: u64,
}

impl Spread {
    /// Of `v` (any order).
    pub fn of(v: &[u64]) -> Self {
        if v.is_empty() {
            return Self::default();
        }
        let mut s = v.to_vec();
        s.sort_unstable();
        let at = |p: f64| s[((s.len() - 1) as f64 * p).round() as usize];
        let mean = s.iter().map(|&x| x as f64).sum::<f64>() / s.len() as f64;
        let var = s.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / s.len() as f64;
        Self {
            min_ns: s[0],
            p50_ns: at(0.5),
            p99_ns: at(0.99),
            max_ns: s[s.len() - 1],
            sd_ns: var.sqrt(),
            iqr_ns: at(0.75) - at(0.25),
        }
    }
}

/// One packet's three stamps, ns since the UNIX epoch.
#[derive(Debug, Clone, Copy)]
pub struct Stamps {
    pub sent: u64,
    pub kernel: u64,
    pub user: u64,
}

/// What `mpt-probe stamp` reports.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct StampReport {
    pub packets: u64,
    pub size: usize,
    pub clock_resolution_ns: u64,
    pub clock_granularity_ns: u64,
    /// Sender's stamp to the kernel's receive stamp.
    pub kernel_latency: Spread,
    /// Sender's stamp to the receiver's user-space stamp.
    pub user_latency: Spread,
    /// Smallest and median difference between the kernel stamps of
    /// consecutive packets of a burst.
    pub kernel_spacing_min_ns: u64,
    pub kernel_spacing_p50_ns: u64,
}

/// Reduce the stamps of packets sent in bursts of `burst` (spacing is taken
/// only within a burst).
pub fn reduce(
    stamps: &[Stamps],
    burst: usize,
    size: usize,
    clock_resolution_ns: u64,
    clock_granularity_ns: u64,
) -> StampReport {
    let lat = |f: fn(&Stamps) -> u64| -> Vec<u64> {
        stamps.iter().map(|s| f(s).saturating_sub(s.sent)).collect()
    };
    let spacing: Vec<u64> = stamps
        .chunks(burst.max(1))
        .flat_map(|c| {
            c.windows(2)
                .map(|w| w[1].kernel.saturating_sub(w[0].kernel))
        })
        .collect();
    let sp = Spread::of(&spacing);
    StampReport {
        packets: stamps.len() as u64,
        size,
        clock_resolution_ns,
        clock_granularity_ns,
        kernel_latency: Spread::of(&lat(|s| s.kernel)),
        user_latency: Spread::of(&lat(|s| s.user)),
        kernel_spacing_min_ns: sp.min_ns,
        kernel_spacing_p50_ns: sp.p50_ns,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_of_known_values() {
        let s = Spread::of(&[4, 1, 3, 2, 5]);
        assert_eq!((s.min_ns, s.p50_ns, s.p99_ns, s.max_ns), (1, 3, 5, 5));
        assert!((s.sd_ns - 2f64.sqrt()).abs() < 1e-9);
        assert_eq!(s.iqr_ns, 2);
        assert_eq!(Spread::of(&[]), Spread::default());
    }

    #[test]
    fn latencies_and_spacing_within_bursts() {
        let st = |sent, kernel, user| Stamps { sent, kernel, user };
        // Two bursts of two; the gap between bursts is not a spacing.
        let v = [
            st(0, 1_000, 3_000),
            st(100, 1_200, 3_100),
            st(50_000, 51_000, 53_000),
            st(50_100, 51_300, 53_100),
        ];
        let r = reduce(&v, 2, 64, 1, 20);
        assert_eq!(r.packets, 4);
        assert_eq!(r.kernel_latency.min_ns, 1_000);
        assert_eq!(r.kernel_latency.max_ns, 1_200);
        assert_eq!(r.user_latency.min_ns, 3_000);
        assert_eq!(
            (r.kernel_spacing_min_ns, r.kernel_spacing_p50_ns),
            (200, 300)
        );
        assert_eq!(reduce(&[], 8, 64, 1, 1).packets, 0);
    }
}
