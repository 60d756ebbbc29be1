//! Tests of the reorder buffer, including a comparison against a simple
//! reference model on random inputs.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::*;

fn payload(seq: u64) -> Vec<u8> {
    seq.to_be_bytes().to_vec()
}

/// Feed and collect the delivery order.
fn deliver(rb: &mut ReorderBuffer, seq: u64, now: Nanos, out: &mut Vec<u64>) -> Accept {
    let a = rb.insert(seq, &payload(seq), now);
    if a == Accept::DeliverNow {
        out.push(seq);
    }
    drain(rb, out);
    a
}

fn drain(rb: &mut ReorderBuffer, out: &mut Vec<u64>) {
    while let Some(b) = rb.pop() {
        out.push(u64::from_be_bytes(b[..8].try_into().unwrap()));
        rb.recycle(b);
    }
}

#[test]
fn restores_order() {
    let mut rb = ReorderBuffer::new(16, 1_000);
    let mut out = vec![];
    for s in [0, 2, 1, 4, 3, 5] {
        deliver(&mut rb, s, 0, &mut out);
    }
    assert_eq!(out, vec![0, 1, 2, 3, 4, 5]);
    assert_eq!(rb.stats().reordered, 2);
    assert_eq!(rb.held(), 0);
}

#[test]
fn duplicates_are_rejected_and_late_packets_delivered_once() {
    let mut rb = ReorderBuffer::new(16, 1_000);
    let mut out = vec![];
    deliver(&mut rb, 0, 0, &mut out);
    assert_eq!(deliver(&mut rb, 0, 0, &mut out), Accept::Duplicate);
    deliver(&mut rb, 2, 0, &mut out);
    assert_eq!(deliver(&mut rb, 2, 0, &mut out), Accept::Duplicate);
    rb.handle_timeout(1_000); // gives up 1, releases 2
    drain(&mut rb, &mut out);
    assert_eq!(out, vec![0, 2]);
    // 1 was given up; when it comes after all it leaves at once, out of
    // order, and only once.
    assert_eq!(deliver(&mut rb, 1, 2_000, &mut out), Accept::DeliverLate);
    assert_eq!(deliver(&mut rb, 1, 2_000, &mut out), Accept::Duplicate);
    assert_eq!(deliver(&mut rb, 2, 2_000, &mut out), Accept::Duplicate);
    assert_eq!(rb.stats().lost, 1);
    assert_eq!(rb.stats().late_delivered, 1);
    // Beyond the window nothing tells delivered from given up: dropped.
    for s in 3..40 {
        deliver(&mut rb, s, 3_000, &mut out);
    }
    rb.handle_timeout(10_000);
    assert_eq!(deliver(&mut rb, 1, 10_000, &mut out), Accept::Late);
}

#[test]
fn timeout_releases_after_max_delay_only() {
    let mut rb = ReorderBuffer::new(16, 1_000);
    let mut out = vec![];
    deliver(&mut rb, 0, 0, &mut out);
    deliver(&mut rb, 3, 100, &mut out);
    deliver(&mut rb, 5, 200, &mut out);
    assert_eq!(rb.poll_timeout(), Some(1_100));
    rb.handle_timeout(1_099);
    drain(&mut rb, &mut out);
    assert_eq!(out, vec![0]);
    rb.handle_timeout(1_100);
    drain(&mut rb, &mut out);
    assert_eq!(out, vec![0, 3]);
    assert_eq!(rb.poll_timeout(), Some(1_200));
    deliver(&mut rb, 4, 1_150, &mut out);
    assert_eq!(out, vec![0, 3, 4, 5]);
    assert_eq!(rb.poll_timeout(), None);
}

#[test]
fn window_overflow_forces_release() {
    let mut rb = ReorderBuffer::new(4, 1_000_000);
    let mut out = vec![];
    deliver(&mut rb, 0, 0, &mut out);
    for s in 2..=4 {
        deliver(&mut rb, s, 0, &mut out);
    }
    assert_eq!(out, vec![0]);
    deliver(&mut rb, 5, 0, &mut out); // 5 >= next(1) + 4: give up 1
    assert_eq!(out, vec![0, 2, 3, 4, 5]);
    deliver(&mut rb, 10, 0, &mut out); // gives up 6, holds 10 in [7, 11)
    assert_eq!(out, vec![0, 2, 3, 4, 5]);
    assert_eq!(rb.next_seq(), 7);
    assert_eq!(rb.stats().overflow_releases, 2);
}

#[test]
fn huge_jumps_are_bounded_and_restart_resyncs() {
    let mut rb = ReorderBuffer::new(8, 1_000);
    let mut out = vec![];
    deliver(&mut rb, 0, 0, &mut out);
    deliver(&mut rb, SEQ_LIMIT - 1, 0, &mut out);
    assert_eq!(out, vec![0]);
    assert_eq!(rb.next_seq(), SEQ_LIMIT - 8);
    rb.handle_timeout(1_000);
    drain(&mut rb, &mut out);
    assert_eq!(out, vec![0, SEQ_LIMIT - 1]);
    // A restarted sender starting at 0 again is resynchronised.
    deliver(&mut rb, 0, 0, &mut out);
    deliver(&mut rb, 1, 0, &mut out);
    assert_eq!(out[2..], [0, 1]);
    assert_eq!(rb.stats().resyncs, 1);
}

#[test]
fn sequence_numbers_near_the_top_are_refused() {
    let mut rb = ReorderBuffer::new(8, 1_000);
    let mut out = vec![];
    for s in [u64::MAX, u64::MAX - 1, SEQ_LIMIT] {
        assert_eq!(deliver(&mut rb, s, 0, &mut out), Accept::Late);
    }
    deliver(&mut rb, SEQ_LIMIT - 1, 0, &mut out);
    assert_eq!(out, vec![SEQ_LIMIT - 1]);
    // Found by fuzzing: repeated jumps near the limit saturate the lost count.
    for k in 1..8 {
        deliver(&mut rb, SEQ_LIMIT - 1 - (8 - k), 0, &mut out);
        deliver(&mut rb, k, 0, &mut out);
    }
    assert!(rb.stats().lost > 0);
    let mut p = PathFrontier::new(1);
    p.on_data(0, u64::MAX, 0);
    p.on_frontier(0, u64::MAX);
    let view = ReleaseView {
        now: 0,
        live: &[true],
        late_ns: &[None],
        next: 0,
        oldest: None,
    };
    assert_eq!(p.lost_below(&view), 0);
}

/// Reference model: the same specification written with ordered maps.
struct Model {
    cap: u64,
    max_delay: Nanos,
    next: Option<u64>,
    held: BTreeMap<u64, Nanos>,
    delivered: BTreeSet<u64>,
    out: Vec<u64>,
    late: Vec<u64>,
    /// Delivered since the last resync (a restarted sender's new sequence
    /// space starts with nothing delivered).
    session: BTreeSet<u64>,
}

impl Model {
    fn release_through(&mut self, end: u64) {
        let next = self.next.unwrap();
        for s in next..end {
            if self.held.remove(&s).is_some() {
                self.out.push(s);
                self.delivered.insert(s);
                self.session.insert(s);
            }
        }
        self.next = Some(end);
        self.drain();
    }
    fn drain(&mut self) {
        let mut n = self.next.unwrap();
        while self.held.remove(&n).is_some() {
            self.out.push(n);
            self.delivered.insert(n);
            self.session.insert(n);
            n += 1;
        }
        self.next = Some(n);
    }
    fn insert(&mut self, seq: u64, now: Nanos) {
        let mut next = *self.next.get_or_insert(seq);
        if seq < next && next - seq > 4 * self.cap {
            let last = self.held.keys().next_back().copied().unwrap_or(next);
            self.release_through(last + 1);
            self.next = Some(seq);
            self.session.clear();
            next = seq;
        }
        if seq < next && next - seq <= self.cap && self.session.insert(seq) {
            self.delivered.insert(seq);
            self.late.push(seq);
        }
        if seq < next || self.held.contains_key(&seq) {
            return;
        }
        if seq >= next + self.cap {
            self.release_through(seq - self.cap + 1);
        }
        self.held.insert(seq, now);
        self.drain();
    }
    fn timeout(&mut self, now: Nanos) {
        loop {
            let oldest = self
                .held
                .iter()
                .min_by_key(|(s, t)| (**t, **s))
                .map(|(s, t)| (*s, *t));
            match oldest {
                Some((s, t)) if t + self.max_delay <= now => self.release_through(s + 1),
                _ => break,
            }
        }
    }
}

proptest! {
    #[test]
    fn matches_reference_model(
        ops in proptest::collection::vec((0u64..200, 0u64..50), 1..400),
        window in 2usize..64,
    ) {
        let max_delay = 100;
        let mut rb = ReorderBuffer::new(window, max_delay);
        let mut m = Model {
            cap: rb.capacity(),
            max_delay,
            next: None,
            held: BTreeMap::new(),
            delivered: BTreeSet::new(),
            out: vec![],
            late: vec![],
            session: BTreeSet::new(),
        };
        let mut out = vec![];
        let mut late = vec![];
        let mut now = 0;
        for (seq, dt) in ops {
            now += dt;
            rb.handle_timeout(now);
            drain(&mut rb, &mut out);
            m.timeout(now);
            if deliver(&mut rb, seq, now, &mut out) == Accept::DeliverLate {
                late.push(seq);
            }
            m.insert(seq, now);
            prop_assert_eq!(&out, &m.out);
            prop_assert_eq!(&late, &m.late);
        }
        // Strictly increasing and no duplicates (a detected sender restart
        // starts a new sequence space, so only check runs without one).
        if rb.stats().resyncs == 0 {
            prop_assert!(out.windows(2).all(|w| w[0] < w[1]));
            prop_assert!(m.delivered.len() == out.len() + late.len());
            let mut all: Vec<u64> = out.iter().chain(&late).copied().collect();
            all.sort_unstable();
            all.dedup();
            prop_assert_eq!(all.len(), out.len() + late.len(), "each at most once");
        }
    }

    /// Every sequence number given up is counted under exactly one cause,
    /// whichever release gave it up (policy, timeout, window, bytes,
    /// restart).
    #[test]
    fn every_loss_has_one_cause(
        ops in proptest::collection::vec((0u64..300, 0u64..50, 0u8..8), 1..400),
        window in 2usize..64,
    ) {
        let mut rb = ReorderBuffer::new(window, 100);
        rb.set_bytes_max(64);
        let mut out = vec![];
        let mut now = 0;
        for (seq, dt, op) in ops {
            now += dt;
            match op {
                0 => rb.release_below(rb.next_seq() + seq % 8),
                1 => rb.restart_at(seq),
                _ => {
                    rb.handle_timeout(now);
                    deliver(&mut rb, seq, now, &mut out);
                }
            }
            drain(&mut rb, &mut out);
            let s = rb.stats();
            prop_assert_eq!(s.lost, s.lost_by_policy + s.lost_by_timeout + s.lost_by_limits, "{:?}", s);
        }
    }
}

#[test]
fn the_window_is_allocated_at_the_first_packet_not_before() {
    let mut rb = ReorderBuffer::new(4096, 100);
    rb.restart_at(5);
    let mut out = vec![];
    rb.missing(0, 10, 10, &mut out);
    assert!(!rb.is_allocated(), "an idle peer holds no window");
    assert_eq!(out, (5..10).collect::<Vec<_>>());
    out.clear();
    assert_eq!(deliver(&mut rb, 5, 0, &mut out), Accept::DeliverNow);
    assert!(rb.is_allocated());
    assert_eq!(out, vec![5]);
}

#[test]
fn held_bytes_are_bounded_by_giving_up_the_first_gap() {
    // Room for 1000 packets, but 3 KB: three of these 1000-byte packets.
    let mut rb = ReorderBuffer::new(1000, 1_000_000);
    rb.set_bytes_max(3000);
    let pkt = |seq: u64| {
        let mut p = vec![0u8; 1000];
        p[..8].copy_from_slice(&seq.to_be_bytes());
        p
    };
    let mut out = vec![];
    assert_eq!(rb.insert(0, &pkt(0), 0), Accept::DeliverNow);
    out.push(0);
    // 1 is missing; 2, 3, 4 are held (3000 bytes, at the bound).
    for s in [2, 3, 4] {
        assert_eq!(rb.insert(s, &pkt(s), 0), Accept::Held);
    }
    assert_eq!((rb.held(), rb.held_bytes()), (3, 3000));
    drain(&mut rb, &mut out);
    assert_eq!(out, [0]);
    // 6 would make 4000: the gap at 1 is given up, 2-4 leave in order,
    // 6 waits for 5.
    assert_eq!(rb.insert(6, &pkt(6), 0), Accept::Held);
    drain(&mut rb, &mut out);
    assert_eq!(out, [0, 2, 3, 4]);
    assert_eq!((rb.held(), rb.held_bytes()), (1, 1000));
    let st = rb.stats();
    assert_eq!(
        (st.bytes_releases, st.lost, st.max_held_bytes),
        (1, 1, 3000)
    );
    // The late packet is still delivered, out of order.
    assert_eq!(rb.insert(1, &pkt(1), 0), Accept::DeliverLate);
    assert_eq!(rb.insert(5, &pkt(5), 0), Accept::DeliverNow);
    out.push(5);
    drain(&mut rb, &mut out);
    assert_eq!(out, [0, 2, 3, 4, 5, 6]);
    assert_eq!(rb.held_bytes(), 0);
}

#[test]
fn the_pool_keeps_a_bounded_number_of_buffers() {
    let mut rb = ReorderBuffer::new(4096, 1_000_000);
    let mut out = vec![];
    deliver(&mut rb, 0, 0, &mut out);
    for s in 2..2000 {
        deliver(&mut rb, s, 0, &mut out);
    }
    deliver(&mut rb, 1, 0, &mut out);
    assert_eq!(out.len(), 2000);
    assert!(rb.pool.len() <= POOL_BUFFERS, "{}", rb.pool.len());
}

#[test]
fn the_byte_bound_follows_the_arrival_rate_between_its_floor_and_cap() {
    let ms = crate::NANOS_PER_MS;
    let mut rb = ReorderBuffer::new(4096, 100 * ms);
    assert_eq!(rb.bytes_max(), REORDER_BYTES_MIN);
    // 10 Gbit/s: 1.25 MB per ms, for 300 ms, in order.
    let pkt = vec![0u8; 12_500];
    let mut seq = 0;
    for t in 0..300 * 10 {
        for _ in 0..10 {
            assert_eq!(rb.insert(seq, &pkt, t * ms / 10), Accept::DeliverNow);
            seq += 1;
        }
    }
    assert_eq!(rb.bytes_max(), REORDER_BYTES_MAX);
    // A peer at 8 Mbit/s (1 KB per ms) for a second: the peak decays to
    // the floor.
    let small = vec![0u8; 1_000];
    for t in 300..1300 {
        assert_eq!(rb.insert(seq, &small, t * ms), Accept::DeliverNow);
        seq += 1;
    }
    assert_eq!(rb.bytes_max(), REORDER_BYTES_MIN);
}
