//! Receive-side reorder buffer: restores the tunnel-wide packet order.
//!
//! Packets arrive over paths with different delays. Each carries a
//! tunnel-wide sequence number; the buffer delivers them in sequence order,
//! holding early arrivals until the gap before them fills or is declared
//! lost. A gap is declared lost when one of these happens first:
//!
//! * a held packet has waited `max_delay` (the MPT library's
//!   `max_buffdelay_msec`), or longer when its owner says so: the tunnel
//!   times the oldest held packet out ([`ReorderBuffer::time_out_oldest`])
//!   no sooner than loss recovery's wait for the gaps below it;
//! * the window of `capacity` packets would overflow (the MPT library's
//!   `reorder_window`);
//! * the held packets would exceed the byte bound: the gap before the
//!   first held packet is given up;
//! * a release policy ([`ReleasePolicy`], driven by the tunnel) proves the
//!   missing packets cannot arrive any more, or that they can no longer
//!   arrive in time ([`crate::release`]).
//!
//! A packet that arrives after its gap was given up, within the last
//! `capacity` sequence numbers, is delivered at once, out of order
//! ([`Accept::DeliverLate`]): the inner protocol sees what a plain IP network
//! shows it, a reordered packet, instead of a loss (a TCP sender whose
//! retransmission then proves spurious undoes its congestion response,
//! RFC 2883 DSACK, RFC 3708). The bitmap of delivered sequence numbers
//! keeps it from being delivered twice.
//!
//! Invariants:
//! * packets leave through [`ReorderBuffer::pop`] in strictly increasing
//!   sequence order; every sequence number leaves at most once, in order or
//!   late;
//! * at most `capacity` packets are held; `capacity` is a power of two ≥ the
//!   configured window, so slot `seq % capacity` is unique for
//!   `seq ∈ [next, next + capacity)`;
//! * every operation is O(1) amortised or O(capacity) at worst; no input,
//!   however large a sequence jump, makes it loop longer;
//! * sequence numbers at or above [`SEQ_LIMIT`] are refused, so no sum of a
//!   sequence number and the capacity can overflow;
//! * at most [`ReorderBuffer::bytes_max`] bytes of packets are held: a
//!   packet waits at most `max_delay`, so what is held is the arrival rate
//!   times that wait, and the bound is sized from it:
//!   [`BYTES_PER_WINDOW`] times the most that arrived within a
//!   `max_delay` recently, at least [`REORDER_BYTES_MIN`] and at most
//!   [`REORDER_BYTES_MAX`] (`capacity` packets of the tunnel MTU would be
//!   47 MB; a concentrator's peer at a few Mbit/s is held to 2 MiB); held
//!   buffers come from and return to a pool of at most [`POOL_BUFFERS`];
//! * nothing of the window is allocated before the first packet arrives
//!   (a concentrator holds many idle peers).

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::Nanos;

/// Sequence numbers at or above this are refused (as `Late`): no sender
/// reaches 2^62 packets, and the bound keeps every sum below u64::MAX.
pub const SEQ_LIMIT: u64 = 1 << 62;

/// The bound on held bytes: this many times the most bytes that arrived
/// within one `max_delay` recently (tuning knob: what a packet's longest
/// wait can hold, twice), between a floor and a hard cap (tuning knobs:
/// 2 MiB is 160 ms of 100 Mbit/s; 64 MiB is 54 ms of 10 Gbit/s, where 12
/// paths of 1 Gbit/s held 2,500 packets).
pub const BYTES_PER_WINDOW: usize = 2;
pub const REORDER_BYTES_MIN: usize = 2 << 20;
pub const REORDER_BYTES_MAX: usize = 64 << 20;
/// Shortest window of the arrival count (with `max_delay` of 0).
const ARRIVAL_WINDOW_MIN_NS: Nanos = 10 * crate::NANOS_PER_MS;

/// Spare buffers kept for the next held packets (tuning knob: a burst of
/// reordering at a high rate; more are allocated, and freed after).
pub const POOL_BUFFERS: usize = 256;

/// How far behind `next` (in multiples of capacity) a sequence number must
/// be to be taken as a restart of the sender rather than a late packet.
const RESYNC_DISTANCE_WINDOWS: u64 = 4;

/// Outcome of [`ReorderBuffer::insert`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accept {
    /// The packet is next in order and nothing is queued before it: deliver
    /// it now from the caller's buffer, then drain [`ReorderBuffer::pop`].
    DeliverNow,
    /// Copied into the buffer; it leaves through [`ReorderBuffer::pop`].
    Held,
    /// Already delivered or already held: drop.
    Duplicate,
    /// Its gap was given up, and it was not delivered: deliver it now
    /// from the caller's buffer, out of order.
    DeliverLate,
    /// Too far behind the release point to tell whether it was delivered,
    /// or beyond [`SEQ_LIMIT`]: drop.
    Late,
}

/// Reorder statistics (exposed in `mpt status`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ReorderStats {
    /// Packets that arrived exactly in order.
    pub in_order: u64,
    /// Packets that arrived early and were held for reordering.
    pub reordered: u64,
    /// Sequence numbers given up as lost.
    pub lost: u64,
    /// Of those, given up by the release policy (and loss recovery, which
    /// holds the policy's floor back while it waits for an answer).
    pub lost_by_policy: u64,
    /// Of those, given up because a held packet waited `max_delay`.
    pub lost_by_timeout: u64,
    /// Of those, given up by the window, the byte bound or a sender's
    /// restart (the rest of `lost`).
    pub lost_by_limits: u64,
    /// Of those, packets that came after all and were delivered late.
    pub late_delivered: u64,
    /// Releases forced by `max_delay`.
    pub timeout_releases: u64,
    /// Releases forced by window overflow.
    pub overflow_releases: u64,
    /// Releases forced by the bound on held bytes.
    pub bytes_releases: u64,
    /// Releases proven safe by the release policy.
    pub policy_releases: u64,
    /// Sender restarts detected (sequence far behind).
    pub resyncs: u64,
    /// Largest number of packets held at once.
    pub max_held: u64,
    /// Largest number of bytes held at once.
    pub max_held_bytes: u64,
}

enum Slot {
    Empty,
    Held { seq: u64, buf: Vec<u8> },
}

/// The reorder buffer. See the module documentation.
pub struct ReorderBuffer {
    capacity: u64,
    max_delay: Nanos,
    next: u64,
    started: bool,
    slots: Vec<Slot>,
    /// Bit `seq % capacity` tells whether `seq ∈ [next-capacity, next)` was
    /// delivered (set) or given up (clear).
    delivered: Vec<u64>,
    held_count: usize,
    held_bytes: usize,
    /// Bytes that arrived in the current window (from `window_start`), the
    /// decaying peak of earlier windows, and a bound set by hand.
    window_start: Nanos,
    window_bytes: usize,
    peak_window_bytes: usize,
    fixed_bytes_max: Option<usize>,
    /// (arrival time, seq) of held packets in arrival order; entries whose
    /// seq is below `next` are stale and skipped lazily.
    arrivals: VecDeque<(Nanos, u64)>,
    ready: VecDeque<(u64, Vec<u8>)>,
    pool: Vec<Vec<u8>>,
    stats: ReorderStats,
}

impl ReorderBuffer {
    /// `window` packets (rounded up to a power of two, at least 2) and the
    /// longest time a packet may be held.
    pub fn new(window: usize, max_delay: Nanos) -> Self {
        let capacity = window.clamp(2, 1 << 20).next_power_of_two() as u64;
        Self {
            capacity,
            max_delay,
            next: 0,
            started: false,
            slots: Vec::new(),
            delivered: Vec::new(),
            held_count: 0,
            held_bytes: 0,
            window_start: 0,
            window_bytes: 0,
            peak_window_bytes: 0,
            fixed_bytes_max: None,
            arrivals: VecDeque::new(),
            ready: VecDeque::new(),
            pool: Vec::new(),
            stats: ReorderStats::default(),
        }
    }

    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// The longest time a packet may be held from now on (loss recovery
    /// raises it to the wait for a resend on long round trips).
    pub fn set_max_delay(&mut self, max_delay: Nanos) {
        self.max_delay = max_delay;
    }

    pub fn max_delay(&self) -> Nanos {
        self.max_delay
    }

    /// Hold at most `bytes` bytes of packets whatever the arrival rate
    /// (at least one packet is always held).
    pub fn set_bytes_max(&mut self, bytes: usize) {
        self.fixed_bytes_max = Some(bytes);
    }

    /// The bound on held bytes now (see the module documentation).
    pub fn bytes_max(&self) -> usize {
        self.fixed_bytes_max.unwrap_or_else(|| {
            let peak = self.peak_window_bytes.max(self.window_bytes);
            peak.saturating_mul(BYTES_PER_WINDOW)
                .clamp(REORDER_BYTES_MIN, REORDER_BYTES_MAX)
        })
    }

    /// Count an arrival of `len` bytes at `now` for the byte bound: per
    /// window of `max_delay`; at each new window the peak halves, or
    /// becomes the window just ended if that was more.
    fn count_arrival(&mut self, now: Nanos, len: usize) {
        let window = self.max_delay.max(ARRIVAL_WINDOW_MIN_NS);
        if now >= self.window_start.saturating_add(window) {
            self.peak_window_bytes = (self.peak_window_bytes / 2).max(self.window_bytes);
            self.window_bytes = 0;
            self.window_start = now;
        }
        self.window_bytes += len;
    }
    pub fn held_bytes(&self) -> usize {
        self.held_bytes
    }

    /// Allocate the window (once, at the first packet or restart).
    fn allocate(&mut self) {
        if self.slots.is_empty() {
            let n = self.capacity as usize;
            self.slots = (0..n).map(|_| Slot::Empty).collect();
            self.delivered = vec![0; n.div_ceil(64)];
            self.arrivals.reserve(n);
            self.ready.reserve(n);
        }
    }

    /// Whether the window has been allocated (memory tests).
    pub fn is_allocated(&self) -> bool {
        !self.slots.is_empty()
    }
    /// The next sequence number to be delivered.
    pub fn next_seq(&self) -> u64 {
        self.next
    }
    pub fn held(&self) -> usize {
        self.held_count
    }
    pub fn stats(&self) -> &ReorderStats {
        &self.stats
    }

    fn idx(&self, seq: u64) -> usize {
        (seq & (self.capacity - 1)) as usize
    }

    /// Up to `max` sequence numbers in `[from, to)` that are neither
    /// delivered nor held (the gaps), ascending, appended to `out`. Looks at
    /// most one window ahead of the next sequence number.
    pub fn missing(&self, from: u64, to: u64, max: usize, out: &mut Vec<u64>) {
        let from = from.max(self.next);
        let to = to.min(self.next.saturating_add(self.capacity));
        let mut seq = from;
        while seq < to && out.len() < max {
            let held = !self.slots.is_empty()
                && matches!(&self.slots[self.idx(seq)], Slot::Held { seq: s, .. } if *s == seq);
            if !held {
                out.push(seq);
            }
            seq += 1;
        }
    }

    fn set_delivered(&mut self, seq: u64, yes: bool) {
        let i = self.idx(seq);
        let (w, b) = (i / 64, i % 64);
        if yes {
            self.delivered[w] |= 1 << b;
        } else {
            self.delivered[w] &= !(1 << b);
        }
    }

    fn was_delivered(&self, seq: u64) -> bool {
        let i = self.idx(seq);
        self.delivered[i / 64] & (1 << (i % 64)) != 0
    }

    /// Offer packet `seq` with inner payload `payload` that arrived at `now`.
    pub fn insert(&mut self, seq: u64, payload: &[u8], now: Nanos) -> Accept {
        if seq >= SEQ_LIMIT {
            return Accept::Late;
        }
        self.count_arrival(now, payload.len());
        self.allocate();
        if !self.started {
            self.started = true;
            self.next = seq;
        }
        if seq < self.next {
            let behind = self.next - seq;
            if behind > RESYNC_DISTANCE_WINDOWS * self.capacity {
                self.resync(seq);
            } else if behind > self.capacity {
                return Accept::Late;
            } else if self.was_delivered(seq) {
                return Accept::Duplicate;
            } else {
                self.set_delivered(seq, true);
                self.stats.late_delivered += 1;
                return Accept::DeliverLate;
            }
        }
        if seq >= self.next + self.capacity {
            self.stats.overflow_releases += 1;
            let n = self.release_through(seq - self.capacity + 1);
            self.stats.lost_by_limits += n;
        }
        if seq == self.next && self.ready.is_empty() {
            self.stats.in_order += 1;
            self.set_delivered(seq, true);
            self.next += 1;
            self.drain_consecutive();
            return Accept::DeliverNow;
        }
        let i = self.idx(seq);
        if matches!(self.slots[i], Slot::Held { .. }) {
            return Accept::Duplicate;
        }
        let mut buf = self.pool.pop().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(payload);
        self.slots[i] = Slot::Held { seq, buf };
        self.held_count += 1;
        self.held_bytes += payload.len();
        self.stats.max_held = self.stats.max_held.max(self.held_count as u64);
        if seq == self.next {
            // In order, but packets are queued in `ready` before it.
            self.stats.in_order += 1;
            self.drain_consecutive();
        } else {
            self.stats.reordered += 1;
            // Drop stale entries first, so the queue stays within what is
            // really held and its preallocated room.
            while self.arrivals.front().is_some_and(|&(_, s)| s < self.next) {
                self.arrivals.pop_front();
            }
            self.arrivals.push_back((now, seq));
        }
        while self.held_count > 1 && self.held_bytes > self.bytes_max() {
            self.release_first_held();
        }
        self.stats.max_held_bytes = self.stats.max_held_bytes.max(self.held_bytes as u64);
        Accept::Held
    }

    /// Give up the gap before the first held packet and release it (and
    /// what follows it in order). O(capacity) at worst.
    fn release_first_held(&mut self) {
        let first = (self.next..self.next + self.capacity).find(
            |&seq| matches!(&self.slots[self.idx(seq)], Slot::Held { seq: s, .. } if *s == seq),
        );
        if let Some(seq) = first {
            self.stats.bytes_releases += 1;
            let n = self.release_through(seq + 1);
            self.stats.lost_by_limits += n;
        }
    }

    /// Move held packets that are now in order to the ready queue.
    fn drain_consecutive(&mut self) {
        while self.held_count > 0 {
            let i = self.idx(self.next);
            match std::mem::replace(&mut self.slots[i], Slot::Empty) {
                Slot::Held { seq, buf } if seq == self.next => {
                    self.held_count -= 1;
                    self.held_bytes -= buf.len();
                    self.ready.push_back((seq, buf));
                    self.set_delivered(seq, true);
                    self.next += 1;
                }
                other => {
                    self.slots[i] = other;
                    break;
                }
            }
        }
    }

    /// Give up every missing sequence number below `end` (exclusive) and
    /// release the held ones in order; returns how many were given up.
    /// Bounded by O(capacity).
    fn release_through(&mut self, end: u64) -> u64 {
        if end <= self.next {
            return 0;
        }
        let lost_before = self.stats.lost;
        let walk_end = end.min(self.next + self.capacity);
        for seq in self.next..walk_end {
            let i = self.idx(seq);
            match std::mem::replace(&mut self.slots[i], Slot::Empty) {
                Slot::Held { seq: s, buf } if s == seq => {
                    self.held_count -= 1;
                    self.held_bytes -= buf.len();
                    self.ready.push_back((seq, buf));
                    self.set_delivered(seq, true);
                }
                other => {
                    self.slots[i] = other;
                    self.stats.lost = self.stats.lost.saturating_add(1);
                    self.set_delivered(seq, false);
                }
            }
        }
        if end > walk_end {
            // A jump beyond the window: nothing can be held there.
            // Their bits take the slots of sequence numbers that leave the
            // window; those the walk set stay (they are within it).
            self.stats.lost = self.stats.lost.saturating_add(end - walk_end);
            if end - walk_end >= self.capacity {
                self.delivered.iter_mut().for_each(|w| *w = 0);
            } else {
                for seq in walk_end..end {
                    self.set_delivered(seq, false);
                }
            }
        }
        self.next = end;
        self.drain_consecutive();
        self.stats.lost.saturating_sub(lost_before)
    }

    /// The sender is a new incarnation (it announced so in a handshake):
    /// flush what is held, in order, and continue at `seq`.
    pub fn restart_at(&mut self, seq: u64) {
        if self.started {
            self.allocate();
            self.resync(seq);
        } else {
            self.started = true;
            self.next = seq;
        }
    }

    /// The sender restarted: flush what is held, in order, and continue at
    /// `seq`.
    fn resync(&mut self, seq: u64) {
        self.stats.resyncs += 1;
        let end = self.next + self.capacity;
        let n = self.release_through(end);
        self.stats.lost_by_limits += n;
        self.arrivals.clear();
        self.delivered.iter_mut().for_each(|w| *w = 0);
        self.next = seq;
    }

    /// Declare every missing packet below `floor` lost (a release policy
    /// proved it) and release what it held back.
    pub fn release_below(&mut self, floor: u64) {
        if floor > self.next && self.held_count > 0 {
            self.stats.policy_releases += 1;
            let n = self.release_through(floor);
            self.stats.lost_by_policy += n;
        }
    }

    /// When the oldest held packet reaches `max_delay`, if any.
    pub fn poll_timeout(&mut self) -> Option<Nanos> {
        while let Some(&(t, seq)) = self.arrivals.front() {
            if seq < self.next {
                self.arrivals.pop_front();
            } else {
                return Some(t.saturating_add(self.max_delay));
            }
        }
        None
    }

    /// The held packet that arrived first, as (arrival time, sequence
    /// number): the first evidence of the gap at [`Self::next_seq`].
    pub fn oldest_arrival(&mut self) -> Option<(Nanos, u64)> {
        while let Some(&(t, seq)) = self.arrivals.front() {
            if seq < self.next {
                self.arrivals.pop_front();
            } else {
                return Some((t, seq));
            }
        }
        None
    }

    /// Release everything that has been held for `max_delay` by `now`.
    pub fn handle_timeout(&mut self, now: Nanos) {
        while self.poll_timeout().is_some_and(|d| d <= now) {
            self.time_out_oldest();
        }
    }

    /// The oldest held packet's wait is over (its `max_delay`, or a
    /// later bound its owner keeps, such as loss recovery's wait for the
    /// gaps below it): give up every gap below it and release through it.
    pub fn time_out_oldest(&mut self) {
        if let Some((_, seq)) = self.oldest_arrival() {
            self.arrivals.pop_front();
            self.stats.timeout_releases += 1;
            let n = self.release_through(seq + 1);
            self.stats.lost_by_timeout += n;
        }
    }

    /// Next packet ready for delivery, in order.
    pub fn pop(&mut self) -> Option<Vec<u8>> {
        self.ready.pop_front().map(|(_, b)| b)
    }

    /// Next packet ready for delivery, in order, with its sequence number.
    pub fn pop_seq(&mut self) -> Option<(u64, Vec<u8>)> {
        self.ready.pop_front()
    }

    /// Return a delivered buffer to the pool.
    pub fn recycle(&mut self, buf: Vec<u8>) {
        if self.pool.len() < POOL_BUFFERS.min(self.capacity as usize) {
            self.pool.push(buf);
        }
    }
}

pub use crate::release::{PathFrontier, ReleasePolicy, ReleaseView, TimeoutOnly};

#[cfg(test)]
#[path = "reorder_tests.rs"]
mod tests;
