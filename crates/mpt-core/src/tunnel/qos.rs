//! The tunnel's QoS: what happens to an inner packet between its
//! classification ([`crate::qos`]) and its path queue.
//!
//! * Real-time classes: the packet goes on the usable path where it is
//!   expected to arrive first (its wait for that path's budget behind
//!   other real-time packets, plus the path's one-way delay and standing
//!   queue), at once or at the head of that path's queue; with
//!   `redundant`, a copy goes on the second-best path. Real-time packets
//!   carry sequence numbers of their own, flagged in the class byte
//!   ([`wire::CLASS_UNORDERED`]); the receiver delivers them on arrival and
//!   removes duplicates ([`Tunnel::recv_unordered`]).
//! * Other classes: while the QoS stage is empty and the chosen path's
//!   queue is within its fill bound, as without QoS. Otherwise the packet
//!   waits in the stage, and [`Tunnel::drain_stage`] moves packets, by
//!   precedence and DRR, to the path queues as they make room.
//!
//! The fill bound of a path is how long its queue may be so that a packet
//! on it still arrives no later than one on the slowest usable path
//! ([`FILL_MARGIN_NS`] more, and more on a path with jitter): what
//! earliest-arrival scheduling needs to use
//! every path, and no more. Beyond it the backlog is the stage's, where
//! precedence, fairness and CoDel apply.
//!
//! Invariants:
//! * ordered packets get their tunnel sequence when they enter a path
//!   queue (or leave at once), so the receiver's order is the stage's
//!   output order and the path frontier stays exact;
//! * real-time packets never enter the reorder buffer or loss recovery.

use super::{Transmit, Tunnel};
use crate::crypto::replay::Replay;
use crate::stats::DropReason;
use crate::wire::{self, CLASS_UNORDERED, HEADER_LEN};
use crate::{Nanos, PathId, NANOS_PER_MS};

use super::Received;

/// Queue a path may hold beyond the delay gap to the slowest usable path
/// before the backlog waits in the QoS stage (tuning knob: several release
/// batches, and the jitter of a radio link).
pub const FILL_MARGIN_NS: Nanos = 5 * NANOS_PER_MS;
/// More margin per nanosecond of the path's reported RFC 3550 jitter, up
/// to a bound (tuning knobs). On a radio link the delay the scheduler
/// expects swings by several milliseconds with the FIFO's jitter, and so
/// does the gap; with 5 ms of margin an LTE-like path's queue ran dry at
/// each swing and it carried 14.6 of its 19.4 Mbit/s beside Wi-Fi
/// (19.0 with 12 ms). A wired path reports microseconds: its margin, and
/// the strict precedence of what waits in the stage, stay as they were.
pub const FILL_JITTER_GAIN: u64 = 6;
pub const FILL_JITTER_MAX_NS: Nanos = 10 * NANOS_PER_MS;

/// Delay assumed for a path without an RTT sample yet (ranks it last).
const UNKNOWN_DELAY_NS: Nanos = 1_000 * NANOS_PER_MS;

/// What the QoS classifier decided for a packet from the TUN.
pub(super) enum Classified {
    /// Sent, queued or dropped.
    Done(Option<Transmit>),
    /// An ordered class: `class` for the header, `flow` its flow hash if
    /// it was needed already.
    Ordered { class: usize, flow: Option<u64> },
}

/// What [`Tunnel::classify_inner`] made of an inner packet.
pub(super) enum Verdict {
    /// An ordered class: `class` for the header, `flow` its flow hash if
    /// it was needed already.
    Ordered { class: usize, flow: Option<u64> },
    /// Dropped at the input by the class's or the flow's policer (counted).
    Policed,
    /// A real-time class, which only a packet of one datagram can be
    /// (larger ones travel in order, as fragments).
    Realtime(usize),
}

/// The QoS flow hash's key, from the tunnel's seed.
pub(super) fn qos_key(seed: &[u8; 32]) -> u64 {
    let mut k = [0u8; 8];
    k.copy_from_slice(&seed[..8]);
    u64::from_le_bytes(k)
}

impl Tunnel {
    /// Change the send queue's bound (`queue_ms` at runtime); what already
    /// waits stays.
    pub fn set_queue_max(&mut self, queue_max: Nanos) {
        self.queue_max = queue_max;
        if let Some(q) = self.qos.as_mut() {
            q.set_queue_bound(queue_max);
        }
    }

    /// Classify and police the inner packet at `buf[HEADER_LEN..][..len]`;
    /// real-time classes are sent here.
    pub(super) fn classify(&mut self, now: Nanos, buf: &mut [u8], len: usize) -> Classified {
        match self.classify_inner(now, &buf[HEADER_LEN..HEADER_LEN + len]) {
            Verdict::Ordered { class, flow } => Classified::Ordered { class, flow },
            Verdict::Policed => Classified::Done(None),
            Verdict::Realtime(class) => {
                let redundant = self.qos.as_ref().is_some_and(|q| q.is_redundant(class));
                Classified::Done(self.send_realtime(now, class, redundant, buf, len))
            }
        }
    }

    /// [`Self::classify`]'s classification and policing of `inner`.
    pub(super) fn classify_inner(&mut self, now: Nanos, inner: &[u8]) -> Verdict {
        let Some(qos) = self.qos.as_mut() else {
            return Verdict::Ordered {
                class: 0,
                flow: None,
            };
        };
        let len = inner.len();
        let class = qos.classify(inner);
        if !qos.police(class, now, len) {
            self.drops.add(DropReason::ClassRate);
            return Verdict::Policed;
        }
        // A real-time packet too large for one datagram travels in order,
        // as fragments (pieces are reassembled in sequence only).
        if qos.is_realtime(class) && len <= self.frag.body_max {
            return Verdict::Realtime(class);
        }
        // The flow hash costs a second look at the headers: only while the
        // class polices a flow (or for a packet that waits in the stage,
        // [`Self::stage_packet`]).
        if !qos.policing(class, now) {
            return Verdict::Ordered { class, flow: None };
        }
        let flow = qos.flow(inner);
        if !qos.admit(class, flow, now, len) {
            self.drops.add(DropReason::FlowShare);
            return Verdict::Policed;
        }
        Verdict::Ordered {
            class,
            flow: Some(flow),
        }
    }

    /// The usable path, other than `except`, where a real-time packet of
    /// `len` bytes is expected to arrive first.
    fn realtime_pick(&mut self, now: Nanos, len: usize, except: Option<PathId>) -> Option<PathId> {
        let mut best: Option<(Nanos, PathId)> = None;
        for i in 0..self.paths.len() {
            if !self.paths[i].usable
                || except == Some(i as PathId)
                || self.paths[i].remote.is_none()
            {
                continue;
            }
            let slot = &mut self.paths[i];
            let s = &mut slot.sender;
            let wait = if self.paced {
                s.refill(now);
                s.wait_ns(self.queue.rt_bytes(i as PathId) + len)
            } else {
                0
            };
            let queue_ahead = self.paths[i].queue_ahead_ns(now);
            let delay = self.paths[i]
                .state
                .rtt_min()
                .map_or(UNKNOWN_DELAY_NS, |r| r / 2 + queue_ahead);
            let arrival = wait + delay;
            if best.is_none_or(|(b, _)| arrival < b) {
                best = Some((arrival, i as PathId));
            }
        }
        best.map(|(_, p)| p)
    }

    fn send_realtime(
        &mut self,
        now: Nanos,
        class: usize,
        redundant: bool,
        buf: &mut [u8],
        len: usize,
    ) -> Option<Transmit> {
        let Some(path) = self.realtime_pick(now, len, None) else {
            self.drops.add(DropReason::NoPath);
            return None;
        };
        self.paths[path as usize].sender.on_realtime(now);
        let seq = self.rt_seq;
        self.rt_seq += 1;
        let class_byte = class as u8 | CLASS_UNORDERED;
        if redundant {
            if let Some(second) = self.realtime_pick(now, len, Some(path)) {
                self.paths[second as usize].sender.on_realtime(now);
                let pkt = &buf[HEADER_LEN..HEADER_LEN + len];
                if !self.queue.push_rt(second, seq, class_byte, now, pkt) {
                    self.drops.add(DropReason::QueueFull);
                }
            }
        }
        if self.paced {
            let s = &mut self.paths[path as usize].sender;
            s.refill(now);
            if self.queue.rt_len(path) > 0 || !s.has_budget() {
                let pkt = &buf[HEADER_LEN..HEADER_LEN + len];
                if !self.queue.push_rt(path, seq, class_byte, now, pkt) {
                    self.drops.add(DropReason::QueueFull);
                }
                return None;
            }
        }
        self.record_sent(class_byte, now, 0, len);
        self.emit_data(now, path, seq, class_byte, buf, len)
    }

    /// Count a packet of the class in `class_byte` leaving after `wait`.
    pub(super) fn record_sent(&mut self, class_byte: u8, now: Nanos, wait: Nanos, len: usize) {
        if let Some(q) = self.qos.as_mut() {
            q.sent(usize::from(class_byte & !CLASS_UNORDERED), now, wait, len);
        }
    }

    /// How long `path`'s queue may be for an ordered packet from the stage
    /// (module documentation). Uses the views of the last pick.
    pub(super) fn fill_bound(&self, path: PathId) -> Nanos {
        let slowest = (0..self.paths.len())
            .filter(|i| self.paths[*i].usable)
            .filter_map(|i| self.views[i].delay_ns)
            .max();
        let gap = match (slowest, self.views[path as usize].delay_ns) {
            (Some(s), Some(d)) => s.saturating_sub(d),
            _ => 0,
        };
        let jitter = self.paths[path as usize].sender.jitter_ns().unwrap_or(0);
        let margin = FILL_MARGIN_NS
            + jitter
                .saturating_mul(FILL_JITTER_GAIN)
                .min(FILL_JITTER_MAX_NS);
        (gap + margin).min(self.queue_max)
    }

    /// Give CoDel the round trip of the slowest usable path (the inner
    /// flows' round trip), and the classes the paths' capacity; run with
    /// the timers, not per packet.
    pub(super) fn update_qos_paths(&mut self) {
        let rtt = (0..self.paths.len())
            .filter(|i| self.paths[*i].usable)
            .filter_map(|i| self.paths[i].rtt_min())
            .max();
        if let (Some(q), Some(r)) = (self.qos.as_mut(), rtt) {
            q.set_rtt(r);
        }
        // The classes' capacity for their fair shares: the usable paths'
        // estimates, in inner bytes (less the header and tag a packet
        // costs at the tunnel's MTU). Unpaced (static weights): unknown.
        let capacity = self.paced.then(|| {
            (0..self.paths.len())
                .filter(|i| self.paths[*i].usable)
                .filter_map(|i| self.paths[i].sender.bandwidth_bps())
                .sum::<u64>()
        });
        if let Some(q) = self.qos.as_mut() {
            let per_packet = (self.mtu + HEADER_LEN + crate::crypto::TAG_LEN) as u64;
            let inner = capacity
                .filter(|c| *c > 0)
                .map(|c| c / 8 * self.mtu as u64 / per_packet);
            q.set_capacity(inner);
        }
    }

    /// Whether `path`'s queue is beyond its fill bound for the packet of
    /// the last pick (an empty queue never is, however slow the path).
    pub(super) fn beyond_fill(&self, path: PathId) -> bool {
        self.queue.len(path) > 0 && self.views[path as usize].wait_ns > self.fill_bound(path)
    }

    /// Put an ordered packet in the QoS stage (when the stage already
    /// holds packets, or its path's queue is beyond the fill bound).
    pub(super) fn stage_packet(&mut self, now: Nanos, class: usize, flow: Option<u64>, pkt: &[u8]) {
        let Some(qos) = self.qos.as_mut() else {
            self.drops.add(DropReason::QueueFull);
            return;
        };
        let flow = match flow {
            Some(f) => f,
            None => {
                // Not counted at the input yet (no flow was policed).
                let f = qos.flow(pkt);
                if !qos.admit(class, f, now, pkt.len()) {
                    self.drops.add(DropReason::FlowShare);
                    return;
                }
                f
            }
        };
        let e = qos.enqueue(class, flow, now, pkt);
        for _ in 0..e.dropped_full {
            self.drops.add(DropReason::ClassFull);
        }
    }

    /// Whether ordered packets wait in the QoS stage.
    pub(super) fn stage_busy(&self) -> bool {
        self.qos.as_ref().is_some_and(|q| !q.is_empty())
    }

    /// Move packets from the QoS stage to the path queues while the path
    /// each would take is within its fill bound.
    pub(super) fn drain_stage(&mut self, now: Nanos) {
        loop {
            let Some((_, len)) = self.qos.as_mut().and_then(|q| q.next_len(now)) else {
                return;
            };
            let Some(path) = self.pick(now, len) else {
                // No path: what waited longer than the bound is dropped.
                let q = self.qos.as_mut().expect("stage checked above");
                if q.oldest()
                    .is_some_and(|at| now.saturating_sub(at) > self.queue_max)
                {
                    for _ in 0..q.clear(now) {
                        self.drops.add(DropReason::NoPath);
                    }
                }
                return;
            };
            if self.beyond_fill(path) {
                return;
            }
            let q = self.qos.as_mut().expect("stage checked above");
            let mut aqm = 0u32;
            let mut expired = 0u32;
            let served = q.pop(now, |d| match d {
                crate::qos::QosDrop::Aqm => aqm += 1,
                _ => expired += 1,
            });
            (0..aqm).for_each(|_| self.drops.add(DropReason::Aqm));
            (0..expired).for_each(|_| self.drops.add(DropReason::QueueFull));
            let Some((class, item)) = served else {
                continue;
            };
            self.queue_ordered(path, class as u8, item.at, &item.buf);
            if let Some(q) = self.qos.as_mut() {
                q.recycle(item.buf);
            }
        }
    }

    /// A real-time data packet: delivered on arrival unless it is a
    /// duplicate (a redundant copy) or older than the duplicate window.
    pub(super) fn recv_unordered(&mut self, seq: u32, body: &[u8]) -> Received {
        let seq = wire::widen_u32(seq, self.rt_window.highest());
        match self.rt_window.update(seq) {
            Replay::Fresh => {}
            Replay::Duplicate => return self.drop_counted(DropReason::Duplicate),
            Replay::TooOld => return self.drop_counted(DropReason::Late),
        }
        self.counters.rx_packets += 1;
        self.counters.rx_bytes += body.len() as u64;
        self.counters.rx_unordered += 1;
        Received::Deliver {
            offset: HEADER_LEN,
            len: body.len(),
        }
    }

    /// Replace the traffic classes (a configuration reload). What waits in
    /// the stage is classified again into the new classes (keeping its
    /// entry time), or, with QoS turned off, moves to the path queues.
    pub fn set_qos(&mut self, cfg: Option<crate::qos::QosConfig>, now: Nanos) {
        let waiting = self.qos.as_mut().map(|q| q.take_all()).unwrap_or_default();
        self.qos = cfg.map(|c| crate::qos::Qos::new(c, self.qos_key, self.mtu, self.queue_max));
        for (at, pkt) in waiting {
            if let Some(q) = self.qos.as_mut() {
                let class = q.classify(&pkt);
                let e = q.enqueue(class, q.flow(&pkt), at, &pkt);
                (0..e.dropped_full).for_each(|_| self.drops.add(DropReason::ClassFull));
                continue;
            }
            let Some(path) = self.pick(now, pkt.len()) else {
                self.drops.add(DropReason::NoPath);
                continue;
            };
            self.queue_ordered(path, 0, at, &pkt);
        }
    }

    /// Real-time packets waiting in path queues, by class (status).
    pub(super) fn realtime_waiting(&self) -> Vec<usize> {
        let n = self.qos.as_ref().map_or(0, crate::qos::Qos::class_count);
        let mut out = vec![0; n];
        self.queue.for_each_rt(|class| {
            if let Some(c) = out.get_mut(usize::from(class & !CLASS_UNORDERED)) {
                *c += 1;
            }
        });
        out
    }
}
