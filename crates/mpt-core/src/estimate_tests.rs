//! The estimators against a bottleneck model in virtual time: a sender
//! offering a rate into a FIFO link of known capacity, queue limit and
//! propagation delay, with the receiver's clock off by an arbitrary offset.

use super::*;

const MS: Nanos = NANOS_PER_MS;
const PKT: usize = 1250;
/// The receiver's clock runs this far from the sender's.
const OFFSET_NS: i64 = -123_456_789_012;

/// A bottleneck link. `capacity(t)` may change over time.
struct Link {
    delay: Nanos,
    queue_limit: Nanos,
    busy_until: Nanos,
    /// Drop every n-th packet on the wire (link loss), 0: none.
    drop_every: u64,
    sent: u64,
}

struct Arrival {
    at: Nanos,
    transit: i64,
    lost_before: u64,
}

impl Link {
    fn new(delay: Nanos, queue_limit: Nanos) -> Self {
        Self {
            delay,
            queue_limit,
            busy_until: 0,
            drop_every: 0,
            sent: 0,
        }
    }

    /// A packet offered at `t` over a link of `mbps`: its arrival, or
    /// `None` if the queue overflowed or the link dropped it.
    fn offer(&mut self, t: Nanos, mbps: u64) -> Option<(Nanos, i64)> {
        self.sent += 1;
        let service = PKT as u64 * 8 * 1_000 / mbps; // ns
        let start = self.busy_until.max(t);
        if start - t > self.queue_limit {
            return None;
        }
        self.busy_until = start + service;
        if self.sent.checked_rem(self.drop_every) == Some(0) {
            return None;
        }
        let at = self.busy_until + self.delay;
        Some((at, (at - t) as i64 + OFFSET_NS))
    }
}

/// Offer `offered_mbps` from `from` to `to` over `link` whose capacity is
/// `capacity(t)`; returns the arrivals in order with the losses before each.
fn run(
    link: &mut Link,
    from: Nanos,
    to: Nanos,
    offered_mbps: u64,
    capacity: impl Fn(Nanos) -> u64,
) -> Vec<Arrival> {
    let gap = PKT as u64 * 8 * 1_000 / offered_mbps;
    let mut out = vec![];
    let mut lost = 0;
    let mut t = from;
    while t < to {
        match link.offer(t, capacity(t)) {
            Some((at, transit)) => {
                out.push(Arrival {
                    at,
                    transit,
                    lost_before: lost,
                });
                lost = 0;
            }
            None => lost += 1,
        }
        t += gap;
    }
    out
}

fn feed(m: &mut PathMeters, arrivals: &[Arrival]) {
    for a in arrivals {
        m.on_packet(a.at, PKT, a.transit, a.lost_before);
    }
}

fn mbps(bps: Option<u64>) -> f64 {
    bps.expect("a rate") as f64 / 1e6
}

#[test]
fn capacity_is_within_5_percent_after_1_s_of_saturation() {
    let mut link = Link::new(10 * MS, 50 * MS);
    let arrivals = run(&mut link, 0, 1_000 * MS, 150, |_| 100);
    let mut m = PathMeters::default();
    feed(&mut m, &arrivals);
    let now = arrivals.last().unwrap().at;
    let est = mbps(m.rate.rate_bps(now));
    assert!((95.0..=105.0).contains(&est), "{est} Mbit/s for 100");
}

#[test]
fn a_step_down_and_a_step_up_are_followed_within_1_s() {
    let mut link = Link::new(5 * MS, 50 * MS);
    let cap = |t: Nanos| {
        if t < 2_000 * MS {
            100
        } else if t < 5_000 * MS {
            10
        } else {
            60
        }
    };
    let arrivals = run(&mut link, 0, 7_000 * MS, 150, cap);
    let mut m = PathMeters::default();
    let at = |t: Nanos, m: &mut PathMeters, i: &mut usize| {
        while *i < arrivals.len() && arrivals[*i].at <= t {
            let a = &arrivals[*i];
            m.on_packet(a.at, PKT, a.transit, a.lost_before);
            *i += 1;
        }
        mbps(m.rate.rate_bps(t))
    };
    let mut i = 0;
    let before = at(1_990 * MS, &mut m, &mut i);
    assert!(
        (95.0..=105.0).contains(&before),
        "before the drop: {before}"
    );
    let after_drop = at(3_000 * MS, &mut m, &mut i);
    assert!(
        (9.5..=10.5).contains(&after_drop),
        "1 s after 100 -> 10: {after_drop}"
    );
    let after_rise = at(6_000 * MS, &mut m, &mut i);
    assert!(
        (57.0..=63.0).contains(&after_rise),
        "1 s after 10 -> 60: {after_rise}"
    );
}

#[test]
fn below_capacity_the_rate_is_what_was_sent_and_no_queue_stands() {
    let mut link = Link::new(20 * MS, 50 * MS);
    let arrivals = run(&mut link, 0, 1_000 * MS, 20, |_| 100);
    let mut m = PathMeters::default();
    feed(&mut m, &arrivals);
    let now = arrivals.last().unwrap().at;
    let est = mbps(m.rate.rate_bps(now));
    assert!((19.0..=21.5).contains(&est), "{est} Mbit/s offered 20");
    let q = m.delay.queueing_ns(now).unwrap();
    assert!(q < MS / 2, "queueing {q} ns on an idle link");
}

#[test]
fn queueing_delay_is_exact_whatever_the_clock_offset() {
    // Saturated with a 30 ms queue limit: the standing queue settles at
    // the limit.
    let mut link = Link::new(8 * MS, 30 * MS);
    let arrivals = run(&mut link, 0, 2_000 * MS, 120, |_| 100);
    let mut m = PathMeters::default();
    feed(&mut m, &arrivals);
    let now = arrivals.last().unwrap().at;
    let q = m.delay.queueing_ns(now).unwrap() as f64 / 1e6;
    assert!(
        (27.0..=31.0).contains(&q),
        "queueing {q} ms for a 30 ms queue"
    );
    // The floor holds the offset (and one packet's service time, 0.1 ms),
    // the difference does not.
    let floor = m.delay.floor_ns(now).unwrap() - OFFSET_NS - 8 * MS as i64;
    assert!(
        (0..=MS as i64 / 5).contains(&floor),
        "floor {floor} ns above 8 ms"
    );
}

#[test]
fn losses_are_told_apart_by_the_queue_they_met() {
    // A lossy radio link at low load: every 50th packet vanishes, no queue.
    let mut radio = Link::new(5 * MS, 50 * MS);
    radio.drop_every = 50;
    let mut m = PathMeters::default();
    feed(&mut m, &run(&mut radio, 0, 1_000 * MS, 10, |_| 100));
    assert!(m.loss.link >= 15 && m.loss.congestion == 0, "{:?}", m.loss);
    // An overloaded link: drops at a full queue.
    let mut full = Link::new(5 * MS, 20 * MS);
    let mut c = PathMeters::default();
    feed(&mut c, &run(&mut full, 0, 1_000 * MS, 200, |_| 100));
    assert!(c.loss.congestion > 100, "{:?}", c.loss);
    assert!(c.loss.link * 20 < c.loss.congestion, "{:?}", c.loss);
}

#[test]
fn nothing_is_known_before_the_first_sample() {
    let m = PathMeters::default();
    assert_eq!(m.estimates(0), Estimates::default());
}

#[test]
fn jitter_alone_does_not_read_as_a_queue() {
    // A radio-like link with no queue: each packet's delay is 40 ms plus
    // a normal jitter of 5 ms (sum of twelve uniforms), 200 packets a
    // second for 10 s. The lowest single delay lies about 17 ms below the
    // typical one; the queueing delay is measured against the lowest
    // smoothed delay instead, which halves the reading (16.5 ms on average
    // against the lowest sample, 8.5 ms against the lowest smoothed value).
    let mut m = PathMeters::default();
    let mut rng: u64 = 0x2545_F491_4F6C_DD1D;
    let mut normal = || {
        let mut sum = 0.0;
        for _ in 0..12 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            sum += (rng >> 11) as f64 / (1u64 << 53) as f64;
        }
        sum - 6.0
    };
    let (mut sum, mut n) = (0, 0);
    for i in 0..2_000u64 {
        let now = i * 5 * MS;
        let transit = 40 * MS as i64 + (normal() * 5e6) as i64;
        m.on_packet(now, PKT, transit + OFFSET_NS, 0);
        if now > 2_000 * MS {
            sum += m.delay.queueing_ns(now).unwrap();
            n += 1;
        }
    }
    let floor = m.delay.floor_ns(9_995 * MS).unwrap() - OFFSET_NS;
    assert!(floor < 30 * MS as i64, "lowest sample {floor} ns");
    let mean = sum / n;
    assert!(
        mean < 10 * MS,
        "queueing read {mean} ns on average with no queue"
    );
}
