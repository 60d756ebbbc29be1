//! Bottleneck capacity from the dispersion of back-to-back trains
//! (packet-pair/train method: Jacobson's pathchar idea, Keshav's packet
//! pair; Dovrolis, Ramanathan and Moore, "What do packet dispersion
//! techniques measure?", INFOCOM 2001).
//!
//! A train of K packets sent back to back leaves the narrowest link spaced
//! by its transmission time: the receiver sees the train spread over
//! Δ = t_K − t_1, and the link's capacity is C = (K − 1) · L / Δ, L being
//! each packet's size *on that link* (the UDP payload plus the IP and UDP
//! headers, plus whatever the link adds per packet, which the caller
//! gives). Cross traffic can only widen a train, so the per-train value is
//! the median over trains (robust to the few that were disturbed), reported
//! with the spread of the per-train values.
//!
//! The estimate itself is the median over every *pair* of consecutive
//! packets within the trains (Dovrolis et al.: the capacity is the mode of
//! the packet-pair distribution). A train's dispersion takes all its error
//! from its first and last packet: on a host where the first packet of a
//! train reaches the bottleneck a few tens of µs late (a sender's or an
//! emulator's wake-up), the packets behind it leave in a catch-up burst and
//! the whole train looks 2-5 % fast at 1 Gbit/s. The pairs disturbed so are
//! a few per train; their median is the link's transmission time.
//!
//! Invariants: a train counts only when all its K packets arrived (a loss
//! would shorten it and inflate the estimate); a pair counts only for
//! consecutive sequence numbers arriving in order; memory is one entry per
//! train plus a fixed histogram of pair rates (bins 0.1 % wide); nothing
//! here reads a clock.

use serde::Serialize;

/// What the dispersion of the received trains says.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Capacity {
    /// Median of the per-pair estimates, Mbit/s (within 0.1 %).
    pub mbps: f64,
    /// Median of the per-train estimates, Mbit/s.
    pub train_mbps: f64,
    /// 10th and 90th percentile of the per-train estimates, Mbit/s.
    pub p10_mbps: f64,
    pub p90_mbps: f64,
    /// Complete trains used.
    pub trains: u64,
    /// Consecutive pairs used.
    pub pairs: u64,
}

/// Pair rates are binned on a log scale from this rate up (Mbit/s)...
const PAIR_MIN_MBPS: f64 = 1e-3;
/// ... in bins this much wider than the one below (0.1 %)...
const PAIR_BIN_RATIO: f64 = 1.001;
/// ... up to 1e-3 · 1.001^21_000 ≈ 1.3 Tbit/s (higher rates, including a
/// pair stamped in the same ns, go to the top bin).
const PAIR_BINS: usize = 21_000;

#[derive(Debug, Clone, Copy, Default)]
struct Train {
    first_ns: u64,
    last_ns: u64,
    packets: u64,
    /// Bytes on the link after the train's first packet.
    bytes_after_first: u64,
    /// The sequence number and arrival of the packet last seen.
    prev_seq: u64,
    prev_ns: u64,
}

/// Arrival times per train. See the module documentation.
#[derive(Debug, Default)]
pub struct Dispersion {
    train_len: u64,
    /// Bytes each packet carries on the bottleneck beyond its UDP payload.
    overhead: u64,
    trains: Vec<Train>,
    /// Pairs per rate bin (allocated with the first pair).
    pair_bins: Vec<u32>,
    pairs: u64,
}

impl Dispersion {
    /// Trains of `train_len` packets (2 at least, else nothing is
    /// estimated), each packet `overhead` bytes longer on the link than
    /// its UDP payload.
    pub fn new(train_len: u64, overhead: u64) -> Self {
        Self {
            train_len,
            overhead,
            trains: vec![],
            pair_bins: vec![],
            pairs: 0,
        }
    }

    /// Packet `seq` (of train `seq / train_len`) with `payload` bytes
    /// arrived at `arrival_ns`; duplicates are the caller's to filter.
    pub fn on_packet(&mut self, seq: u64, payload: usize, arrival_ns: u64) {
        if self.train_len < 2 {
            return;
        }
        let i = (seq / self.train_len) as usize;
        if self.trains.len() <= i {
            self.trains.resize(i + 1, Train::default());
        }
        let bytes = payload as u64 + self.overhead;
        let t = &mut self.trains[i];
        let mut pair = None;
        if t.packets == 0 {
            (t.first_ns, t.last_ns) = (arrival_ns, arrival_ns);
        } else {
            t.first_ns = t.first_ns.min(arrival_ns);
            t.last_ns = t.last_ns.max(arrival_ns);
            t.bytes_after_first += bytes;
            if seq == t.prev_seq + 1 && arrival_ns >= t.prev_ns {
                pair = Some(arrival_ns - t.prev_ns);
            }
        }
        (t.prev_seq, t.prev_ns) = (seq, arrival_ns);
        t.packets += 1;
        if let Some(gap_ns) = pair {
            self.on_pair(bytes, gap_ns);
        }
    }

    fn on_pair(&mut self, bytes: u64, gap_ns: u64) {
        if self.pair_bins.is_empty() {
            self.pair_bins = vec![0; PAIR_BINS];
        }
        let bin = if gap_ns == 0 {
            PAIR_BINS - 1
        } else {
            let mbps = bytes as f64 * 8.0 / gap_ns as f64 * 1e3;
            let b = (mbps / PAIR_MIN_MBPS).ln() / PAIR_BIN_RATIO.ln();
            (b.max(0.0) as usize).min(PAIR_BINS - 1)
        };
        self.pair_bins[bin] = self.pair_bins[bin].saturating_add(1);
        self.pairs += 1;
    }

    /// The median pair rate: the middle of its bin, Mbit/s.
    fn pair_median(&self) -> Option<f64> {
        let total: u64 = self.pair_bins.iter().map(|&c| u64::from(c)).sum();
        if total == 0 {
            return None;
        }
        let mut seen = 0;
        for (i, &c) in self.pair_bins.iter().enumerate() {
            seen += u64::from(c);
            if 2 * seen >= total {
                return Some(PAIR_MIN_MBPS * PAIR_BIN_RATIO.powf(i as f64 + 0.5));
            }
        }
        None
    }

    /// The estimate, once at least one complete train arrived.
    pub fn capacity(&self) -> Option<Capacity> {
        let mut rates: Vec<f64> = self
            .trains
            .iter()
            .filter(|t| t.packets == self.train_len && t.last_ns > t.first_ns)
            .map(|t| t.bytes_after_first as f64 * 8.0 / (t.last_ns - t.first_ns) as f64 * 1e3)
            .collect();
        if rates.is_empty() {
            return None;
        }
        rates.sort_by(f64::total_cmp);
        let at = |q: f64| rates[((rates.len() - 1) as f64 * q).round() as usize];
        Some(Capacity {
            mbps: self.pair_median().unwrap_or(at(0.5)),
            train_mbps: at(0.5),
            p10_mbps: at(0.1),
            p90_mbps: at(0.9),
            trains: rates.len() as u64,
            pairs: self.pairs,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Trains of `k` packets of `payload` bytes through a link of `mbps`,
    /// arriving back to back (one transmission time apart).
    fn feed(d: &mut Dispersion, trains: u64, k: u64, payload: usize, overhead: u64, mbps: f64) {
        let tx_ns = (payload as u64 + overhead) as f64 * 8.0 / mbps * 1e3;
        for t in 0..trains {
            let start = t * 10_000_000;
            for j in 0..k {
                d.on_packet(t * k + j, payload, start + (j as f64 * tx_ns) as u64);
            }
        }
    }

    #[test]
    fn back_to_back_trains_give_the_link_rate() {
        for mbps in [100.0, 1000.0] {
            let mut d = Dispersion::new(16, 28);
            feed(&mut d, 50, 16, 1472, 28, mbps);
            let c = d.capacity().unwrap();
            assert_eq!(c.trains, 50);
            assert!((c.mbps - mbps).abs() / mbps < 0.001, "{c:?}");
            assert!((c.train_mbps - mbps).abs() / mbps < 0.001, "{c:?}");
        }
    }

    #[test]
    fn incomplete_and_disturbed_trains_do_not_move_the_median() {
        let mut d = Dispersion::new(4, 28);
        feed(&mut d, 9, 4, 1000, 28, 100.0);
        // Train 9 lost a packet; train 10 was spread by cross traffic.
        for (seq, at) in [(36, 0), (37, 82_240), (39, 246_720)] {
            d.on_packet(seq, 1000, 200_000_000 + at);
        }
        for (seq, at) in [(40, 0), (41, 500_000), (42, 1_000_000), (43, 1_500_000)] {
            d.on_packet(seq, 1000, 300_000_000 + at);
        }
        let c = d.capacity().unwrap();
        assert_eq!(c.trains, 10);
        assert!((c.mbps - 100.0).abs() < 0.1, "{c:?}");
        assert!(c.p10_mbps > 99.0 && c.p90_mbps < 101.0, "{c:?}");
    }

    #[test]
    fn a_late_first_packet_and_its_catch_up_burst_do_not_move_the_pairs() {
        // 1 Gbit/s, 1514-byte frames: 12.112 µs apart. Each train's first
        // packet leaves 27 µs late and the next ten catch up 3 µs apart,
        // as measured on a loaded 2-core host: the train dispersion reads
        // 2.5 % fast, the pairs within 0.1 %.
        let (k, tx) = (50u64, 12_112u64);
        let mut d = Dispersion::new(k, 42);
        for t in 0..20 {
            let start = t * 20_000_000;
            for j in 0..k {
                let on_time = start + j * tx;
                let at = match j {
                    0 => on_time + 27_000,
                    1..=10 => (start + 27_000 + j * 3_000).max(on_time),
                    _ => on_time,
                };
                d.on_packet(t * k + j, 1472, at);
            }
        }
        let c = d.capacity().unwrap();
        assert!(c.train_mbps > 1020.0, "{c:?}");
        assert!((c.mbps - 1000.0).abs() < 2.0, "{c:?}");
        assert_eq!(c.pairs, 20 * 49);
    }

    #[test]
    fn single_packets_estimate_nothing() {
        let mut d = Dispersion::new(1, 28);
        d.on_packet(0, 100, 0);
        assert_eq!(d.capacity(), None);
        assert_eq!(Dispersion::new(3, 0).capacity(), None);
    }
}
