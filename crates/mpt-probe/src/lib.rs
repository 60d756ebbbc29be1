//! # mpt-probe — probe packets and the statistics of a received stream
//!
//! A probe payload starts with a 28-byte header (big-endian), format 2:
//!
//! ```text
//!  0  magic "MPT2"       4 bytes (format 1: "MPTP", a 20-byte header
//!                        without the last field; still read)
//!  4  sequence           u64, from 0 per stream
//! 12  send timestamp     u64, ns since the UNIX epoch (sender's real-time
//!                        clock, read in user space just before `send`)
//! 20  previous transmit  u64, the kernel's transmit stamp of probe
//!                        (sequence − 1), same clock; 0 if the sender has
//!                        none
//! 28  padding to the requested size
//! ```
//!
//! The last field is a two-step stamp, as PTP's follow-up (IEEE 1588):
//! the kernel stamps a datagram as the driver takes it, after it has left,
//! so the stamp travels in the next probe. One-way delay from it excludes
//! the sender's system call (a few µs, more on a cold core), as the
//! receive side's kernel stamp excludes the receiver's ([`sendstamp`]).
//!
//! (The NetFPGA timestamping work used a 64-bit timestamp followed by a
//! 32-bit sequence number; a 64-bit sequence here never wraps.)
//!
//! [`StreamStats`] turns arrivals into one-way delay (arrival − send; needs
//! synchronised clocks, exact between namespaces of one host), RFC 3550
//! interarrival jitter, loss from sequence gaps (told apart from
//! reordering: a late packet fills its gap and counts as reordered, not lost)
//! and duplicates, the reordering metrics of RFC 4737 ([`reorder`]), and
//! with trains the bottleneck capacity from their dispersion
//! ([`dispersion`]). Invariants: parsing never panics; statistics use O(1)
//! memory per packet seen plus a bitmap of sequence numbers.

use serde::Serialize;

pub mod dispersion;
pub mod reorder;
pub mod report;
pub mod selftest;
pub mod sendstamp;

pub use dispersion::{Capacity, Dispersion};
pub use reorder::{ReorderMeter, Reordering};
pub use selftest::{StampReport, Stamps};
pub use sendstamp::{SendStampCounts, SendStamps};

/// Format 2's magic (the current format).
pub const MAGIC: &[u8; 4] = b"MPT2";
/// Format 1's magic (no transmit stamp); still read.
pub const MAGIC_V1: &[u8; 4] = b"MPTP";
pub const PROBE_HEADER_LEN: usize = 28;
pub const PROBE_HEADER_LEN_V1: usize = 20;

/// A probe header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probe {
    pub seq: u64,
    /// The user-space send stamp (ns since the UNIX epoch).
    pub send_ns: u64,
    /// The kernel's transmit stamp of probe `seq − 1`, if sent (format 2).
    pub prev_tx_ns: Option<u64>,
    /// Format 2: the sender sends transmit stamps (maybe none yet).
    pub two_step: bool,
}

/// Write a format-2 probe header into `buf` (at least
/// [`PROBE_HEADER_LEN`] bytes).
pub fn encode(buf: &mut [u8], seq: u64, send_ns: u64, prev_tx_ns: Option<u64>) {
    buf[..4].copy_from_slice(MAGIC);
    buf[4..12].copy_from_slice(&seq.to_be_bytes());
    buf[12..20].copy_from_slice(&send_ns.to_be_bytes());
    buf[20..28].copy_from_slice(&prev_tx_ns.unwrap_or(0).to_be_bytes());
}

/// The header of a probe payload (format 1 or 2), or `None` if it is not
/// one.
pub fn decode(buf: &[u8]) -> Option<Probe> {
    let two_step = match buf.get(..4)? {
        m if m == MAGIC && buf.len() >= PROBE_HEADER_LEN => true,
        m if m == MAGIC_V1 && buf.len() >= PROBE_HEADER_LEN_V1 => false,
        _ => return None,
    };
    let u64_at = |i: usize| u64::from_be_bytes(buf[i..i + 8].try_into().unwrap_or([0; 8]));
    let prev = if two_step { u64_at(20) } else { 0 };
    Some(Probe {
        seq: u64_at(4),
        send_ns: u64_at(12),
        prev_tx_ns: (prev != 0).then_some(prev),
        two_step,
    })
}

/// arrival − send in ns, saturated (a sender's clock may say anything).
fn transit_ns(arrival: u64, sent: u64) -> i64 {
    (i128::from(arrival) - i128::from(sent)).clamp(i128::from(i64::MIN), i128::from(i64::MAX))
        as i64
}

/// Statistics of one received stream.
#[derive(Debug, Default)]
pub struct StreamStats {
    seen: Vec<u64>,
    received: u64,
    duplicates: u64,
    reordered: u64,
    invalid: u64,
    highest: Option<u64>,
    owd_sum: i128,
    owd_min: Option<i64>,
    owd_max: Option<i64>,
    owds: Vec<i64>,
    last_transit: Option<i64>,
    jitter: f64,
    first_arrival: Option<u64>,
    last_arrival: u64,
    bytes: u64,
    reorder: ReorderMeter,
    dispersion: Dispersion,
    send_stamps: SendStamps,
    /// Scratch for the probes `send_stamps` releases.
    released: Vec<(u64, u64)>,
}

/// Summary printed as JSON.
#[derive(Debug, Serialize, PartialEq)]
pub struct Summary {
    pub received: u64,
    pub expected: u64,
    pub lost: u64,
    pub loss: f64,
    pub duplicates: u64,
    pub reordered: u64,
    pub invalid: u64,
    pub owd_mean_ms: Option<f64>,
    pub owd_min_ms: Option<f64>,
    pub owd_max_ms: Option<f64>,
    pub owd_p50_ms: Option<f64>,
    pub owd_p99_ms: Option<f64>,
    pub jitter_ms: f64,
    pub mbps: f64,
    /// The one-way delay distribution: `[percentile, ms]` at 0, 5, …, 95,
    /// 99, 99.9 and 100 % (for CDF plots); empty without samples.
    pub owd_cdf_ms: Vec<[f64; 2]>,
    /// RFC 4737 reordering metrics.
    pub reordering: Reordering,
    /// Bottleneck capacity from train dispersion (`--train` of 2 or more).
    pub capacity: Option<Capacity>,
    /// How the send times were taken (the kernel's transmit stamps, or
    /// user-space stamps).
    pub send_stamps: SendStampCounts,
}

/// Percentiles of [`Summary::owd_cdf_ms`].
pub const CDF_PERCENTILES: [f64; 24] = [
    0.0, 5.0, 10.0, 15.0, 20.0, 25.0, 30.0, 35.0, 40.0, 45.0, 50.0, 55.0, 60.0, 65.0, 70.0, 75.0,
    80.0, 85.0, 90.0, 95.0, 99.0, 99.9, 99.99, 100.0,
];

/// Largest sequence number tracked (bounds the bitmap at 16 MiB).
const MAX_SEQ: u64 = 1 << 27;

impl StreamStats {
    /// Statistics of a stream sent in trains of `train` packets, each
    /// `overhead` bytes longer on the bottleneck than its UDP payload
    /// (for the capacity estimate; see [`dispersion`]).
    pub fn with_trains(train: u64, overhead: u64) -> Self {
        Self {
            dispersion: Dispersion::new(train, overhead),
            ..Self::default()
        }
    }

    /// Account a datagram `payload` that arrived at `arrival_ns`
    /// (real-time clock).
    pub fn on_datagram(&mut self, payload: &[u8], arrival_ns: u64) {
        let Some(probe) = decode(payload) else {
            self.invalid += 1;
            return;
        };
        let seq = probe.seq;
        if seq >= MAX_SEQ {
            self.invalid += 1;
            return;
        }
        let (w, b) = ((seq / 64) as usize, seq % 64);
        if self.seen.len() <= w {
            self.seen.resize(w + 1, 0);
        }
        if self.seen[w] & (1 << b) != 0 {
            self.duplicates += 1;
            return;
        }
        self.seen[w] |= 1 << b;
        self.received += 1;
        self.bytes += payload.len() as u64;
        self.reorder.on_packet(seq);
        self.dispersion.on_packet(seq, payload.len(), arrival_ns);
        match self.highest {
            Some(h) if seq < h => self.reordered += 1,
            _ => self.highest = Some(seq),
        }
        let mut done = std::mem::take(&mut self.released);
        self.send_stamps.on_probe(&probe, arrival_ns, &mut done);
        for (arrival, sent) in done.drain(..) {
            self.on_delay(transit_ns(arrival, sent));
        }
        self.released = done;
        self.first_arrival.get_or_insert(arrival_ns);
        self.last_arrival = arrival_ns;
    }

    /// One probe's transit time (arrival − send, ns).
    fn on_delay(&mut self, transit: i64) {
        self.owd_sum += i128::from(transit);
        self.owd_min = Some(self.owd_min.map_or(transit, |m| m.min(transit)));
        self.owd_max = Some(self.owd_max.map_or(transit, |m| m.max(transit)));
        self.owds.push(transit);
        if let Some(prev) = self.last_transit {
            // RFC 3550 §6.4.1: J += (|D| - J) / 16.
            let d = (i128::from(transit) - i128::from(prev)).abs() as f64;
            self.jitter += (d - self.jitter) / 16.0;
        }
        self.last_transit = Some(transit);
    }

    /// Summary; `expected` overrides the count inferred from the highest
    /// sequence (pass the number sent when known, so tail losses count).
    pub fn summary(&mut self, expected: Option<u64>) -> Summary {
        let mut done = Vec::new();
        self.send_stamps.flush(&mut done);
        for (arrival, sent) in done {
            self.on_delay(transit_ns(arrival, sent));
        }
        let expected = expected.unwrap_or(self.highest.map_or(0, |h| h + 1));
        let lost = expected.saturating_sub(self.received);
        let ms = |ns: i64| ns as f64 / 1e6;
        let mut sorted = self.owds.clone();
        sorted.sort_unstable();
        let pct = |p: f64| {
            (!sorted.is_empty())
                .then(|| ms(sorted[((sorted.len() - 1) as f64 * p).round() as usize]))
        };
        let span = self
            .last_arrival
            .saturating_sub(self.first_arrival.unwrap_or(0));
        Summary {
            received: self.received,
            expected,
            lost,
            loss: if expected > 0 {
                lost as f64 / expected as f64
            } else {
                0.0
            },
            duplicates: self.duplicates,
            reordered: self.reordered,
            invalid: self.invalid,
            owd_mean_ms: (self.received > 0)
                .then(|| self.owd_sum as f64 / self.received as f64 / 1e6),
            owd_min_ms: self.owd_min.map(ms),
            owd_max_ms: self.owd_max.map(ms),
            owd_p50_ms: pct(0.5),
            owd_p99_ms: pct(0.99),
            jitter_ms: self.jitter / 1e6,
            mbps: if span > 0 {
                self.bytes as f64 * 8.0 / span as f64 * 1e3
            } else {
                0.0
            },
            owd_cdf_ms: CDF_PERCENTILES
                .iter()
                .filter_map(|p| pct(p / 100.0).map(|v| [*p, v]))
                .collect(),
            reordering: self.reorder.summary(),
            capacity: self.dispersion.capacity(),
            send_stamps: self.send_stamps.counts,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pkt(seq: u64, ts: u64) -> Vec<u8> {
        let mut b = vec![0u8; 64];
        encode(&mut b, seq, ts, None);
        b
    }

    #[test]
    fn vector_roundtrip() {
        let mut b = vec![0u8; 32];
        encode(&mut b, 0x0102, 0x0a0b, Some(0x0c0d));
        assert_eq!(
            &b[..28],
            b"MPT2\0\0\0\0\0\0\x01\x02\0\0\0\0\0\0\x0a\x0b\0\0\0\0\0\0\x0c\x0d"
        );
        let p = Probe {
            seq: 0x0102,
            send_ns: 0x0a0b,
            prev_tx_ns: Some(0x0c0d),
            two_step: true,
        };
        assert_eq!(decode(&b), Some(p));
        assert_eq!(decode(&b[..27]), None);
        encode(&mut b, 0, 5, None);
        assert_eq!(decode(&b).unwrap().prev_tx_ns, None);
        assert_eq!(decode(b"XXXX0000000000000000"), None);
        assert_eq!(decode(b"MPT"), None);
    }

    #[test]
    fn format_1_is_still_read() {
        let v1 = b"MPTP\0\0\0\0\0\0\x01\x02\0\0\0\0\0\0\x0a\x0b";
        let p = decode(v1).unwrap();
        assert_eq!(
            (p.seq, p.send_ns, p.prev_tx_ns, p.two_step),
            (0x0102, 0x0a0b, None, false)
        );
        assert_eq!(decode(&v1[..19]), None);
    }

    #[test]
    fn delays_are_taken_from_the_transmit_stamps_the_next_probe_carries() {
        let mut s = StreamStats::default();
        let mut b = vec![0u8; 64];
        // User stamps 1 µs before the kernel's; the link takes 10 µs from
        // the kernel's stamp.
        for seq in 0..100u64 {
            let user = seq * 1_000_000;
            let prev_tx = seq.checked_sub(1).map(|p| p * 1_000_000 + 1_000);
            encode(&mut b, seq, user, prev_tx);
            s.on_datagram(&b, user + 1_000 + 10_000);
        }
        let m = s.summary(None);
        assert_eq!(m.owd_p50_ms, Some(0.01));
        assert_eq!(
            m.owd_max_ms,
            Some(0.011),
            "the last probe has only its user stamp"
        );
        assert_eq!((m.send_stamps.kernel, m.send_stamps.user), (99, 1));
    }

    #[test]
    fn loss_reordering_and_duplicates_are_told_apart() {
        let mut s = StreamStats::default();
        for (seq, at) in [(0, 10), (2, 30), (1, 40), (1, 41), (4, 60)] {
            s.on_datagram(&pkt(seq, at - 5), at);
        }
        s.on_datagram(b"junk", 70);
        let m = s.summary(Some(6));
        assert_eq!(
            (m.received, m.lost, m.reordered, m.duplicates, m.invalid),
            (4, 2, 1, 1, 1)
        );
        assert_eq!(m.owd_mean_ms, Some(5e-6));
        assert_eq!((m.reordering.reordered, m.reordering.extent_max), (1, 1));
        assert_eq!(m.jitter_ms, 0.0);
    }

    #[test]
    fn jitter_follows_rfc3550() {
        let mut s = StreamStats::default();
        s.on_datagram(&pkt(0, 0), 1_000);
        s.on_datagram(&pkt(1, 0), 2_600);
        assert!((s.summary(None).jitter_ms - 100.0 / 1e6).abs() < 1e-12);
    }

    #[test]
    fn the_delay_cdf_rises_from_the_minimum_to_the_maximum() {
        let mut s = StreamStats::default();
        assert!(s.summary(None).owd_cdf_ms.is_empty());
        // Delays 1..=100 µs.
        for seq in 0..100u64 {
            s.on_datagram(&pkt(seq, 0), (seq + 1) * 1_000);
        }
        let cdf = s.summary(None).owd_cdf_ms;
        assert_eq!(cdf.len(), CDF_PERCENTILES.len());
        assert_eq!(cdf[0], [0.0, 0.001]);
        assert_eq!(cdf[cdf.len() - 1], [100.0, 0.1]);
        assert!(cdf
            .windows(2)
            .all(|w| w[0][1] <= w[1][1] && w[0][0] < w[1][0]));
    }
}
