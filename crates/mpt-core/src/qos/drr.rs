//! The queue of one traffic class: per-flow queues served by Deficit Round
//! Robin (Shreedhar and Varghese, SIGCOMM 1995), each with its own CoDel
//! (RFC 8289), as FQ-CoDel arranges them (RFC 8290).
//!
//! Flows hash into [`FLOW_BUCKETS`] buckets. An active bucket is served a
//! quantum of bytes per round, so backlogged flows share the class's
//! service equally in bytes whatever their packet sizes or rates. When the
//! class is at its packet limit, the fattest bucket loses packets from its
//! head (RFC 8290 §4.1): the flow that sends beyond its share pays for it,
//! not the others; a packet of the fattest flow itself is refused at the
//! input without being copied.
//!
//! Invariants:
//! * `packets` and `bytes` are the sums over the buckets; a bucket is in
//!   `active` exactly when it holds packets;
//! * within a flow, packets leave in the order they came;
//! * buffers are recycled through the caller's pool: no allocation per
//!   packet after warm-up; memory is bounded by `limit` packets.

use std::collections::VecDeque;

use super::codel::{Codel, Params};
use crate::Nanos;

/// Flow buckets per class (tuning knob; FQ-CoDel's default is 1024, a
/// tunnel carries fewer concurrent flows per class).
pub const FLOW_BUCKETS: usize = 256;

/// Packets dropped from the fattest flow at once when the class is full
/// (tuning knob; RFC 8290's implementation drops up to 64).
const DROP_BATCH_PACKETS: usize = 16;

/// One waiting packet.
#[derive(Debug)]
pub struct Item {
    /// When it entered mpt.
    pub at: Nanos,
    pub buf: Vec<u8>,
}

#[derive(Debug, Default)]
struct Flow {
    q: VecDeque<Item>,
    bytes: usize,
    deficit: i64,
    codel: Codel,
}

/// What [`ClassQueue::push`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushed {
    /// Queued; `dropped` packets of the fattest flow made room.
    Queued { dropped: usize },
    /// Refused: the class is full and this packet's flow is the fattest.
    Refused,
}

/// One class's flows. See the module documentation.
#[derive(Debug)]
pub struct ClassQueue {
    flows: Vec<Flow>,
    active: VecDeque<usize>,
    packets: usize,
    bytes: usize,
    limit: usize,
    quantum: i64,
    aqm: bool,
}

impl ClassQueue {
    /// A class holding at most `limit` packets, serving `quantum` bytes per
    /// flow and round, with CoDel on each flow if `aqm`.
    pub fn new(limit: usize, quantum: usize, aqm: bool) -> Self {
        Self {
            flows: (0..FLOW_BUCKETS).map(|_| Flow::default()).collect(),
            active: VecDeque::new(),
            packets: 0,
            bytes: 0,
            limit: limit.max(1),
            quantum: quantum.max(1) as i64,
            aqm,
        }
    }

    pub fn packets(&self) -> usize {
        self.packets
    }
    pub fn bytes(&self) -> usize {
        self.bytes
    }
    pub fn is_empty(&self) -> bool {
        self.packets == 0
    }
    /// Flows with packets waiting.
    pub fn active_flows(&self) -> usize {
        self.active.len()
    }

    /// The bucket holding the most bytes.
    fn fattest(&self) -> Option<usize> {
        self.active
            .iter()
            .copied()
            .max_by_key(|f| self.flows[*f].bytes)
    }

    /// Queue `pkt` of flow `hash`, making room in the fattest flow when
    /// the class is full; dropped buffers go back to `pool`.
    pub fn push(&mut self, hash: u64, at: Nanos, pkt: &[u8], pool: &mut Vec<Vec<u8>>) -> Pushed {
        let f = (hash % FLOW_BUCKETS as u64) as usize;
        let mut dropped = 0;
        if self.packets >= self.limit {
            let Some(fat) = self.fattest() else {
                return Pushed::Refused;
            };
            if fat == f {
                return Pushed::Refused;
            }
            while dropped < DROP_BATCH_PACKETS {
                let Some(item) = self.flows[fat].q.pop_front() else {
                    break;
                };
                self.take(fat, item.buf.len());
                pool.push(item.buf);
                dropped += 1;
            }
            if self.flows[fat].q.is_empty() {
                self.active.retain(|x| *x != fat);
                self.flows[fat].deficit = 0;
            }
        }
        let mut buf = pool.pop().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(pkt);
        let flow = &mut self.flows[f];
        if flow.q.is_empty() {
            self.active.push_back(f);
            flow.deficit = self.quantum;
        }
        flow.bytes += pkt.len();
        flow.q.push_back(Item { at, buf });
        self.packets += 1;
        self.bytes += pkt.len();
        Pushed::Queued { dropped }
    }

    fn take(&mut self, f: usize, len: usize) {
        self.flows[f].bytes -= len;
        self.packets -= 1;
        self.bytes -= len;
    }

    /// Length of the packet DRR serves next (rotating the round as far as
    /// needed; a later [`Self::pop`] serves exactly that flow).
    pub fn peek_len(&mut self) -> Option<usize> {
        // Each rotation adds a quantum; a flow is served within
        // (largest packet / quantum + 1) rounds.
        loop {
            let f = *self.active.front()?;
            let flow = &mut self.flows[f];
            let len = flow.q.front().map_or(0, |i| i.buf.len());
            if flow.deficit >= len as i64 {
                return Some(len);
            }
            flow.deficit += self.quantum;
            self.active.rotate_left(1);
        }
    }

    /// Serve the next packet by DRR. Packets that entered before
    /// `expired_before`, and those CoDel drops, are dropped on the way and
    /// handed to `dropped` (`true`: CoDel's; their buffers go to `pool`).
    /// A drop does not use the flow's deficit (as in RFC 8290), so a flow
    /// losing packets is not served less for it. `mtu` is CoDel's
    /// one-packet allowance.
    pub fn pop(
        &mut self,
        now: Nanos,
        expired_before: Nanos,
        mtu: usize,
        codel: Params,
        pool: &mut Vec<Vec<u8>>,
        mut dropped: impl FnMut(&Item, bool),
    ) -> Option<Item> {
        loop {
            self.peek_len()?;
            let f = *self.active.front()?;
            let item = self.flows[f].q.pop_front()?;
            let len = item.buf.len();
            self.take(f, len);
            let flow = &mut self.flows[f];
            let sojourn = now.saturating_sub(item.at);
            let expired = item.at < expired_before;
            let aqm = !expired
                && self.aqm
                && flow.codel.should_drop(now, sojourn, flow.bytes, mtu, codel);
            if !expired && !aqm {
                flow.deficit -= len as i64;
            }
            if flow.q.is_empty() {
                self.active.pop_front();
                flow.deficit = 0;
            }
            if expired || aqm {
                dropped(&item, aqm);
                pool.push(item.buf);
                continue;
            }
            return Some(item);
        }
    }

    /// When the oldest head of any flow entered.
    pub fn oldest(&self) -> Option<Nanos> {
        self.active
            .iter()
            .filter_map(|f| self.flows[*f].q.front().map(|i| i.at))
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(q: &mut ClassQueue, pool: &mut Vec<Vec<u8>>) -> Vec<u8> {
        let mut out = vec![];
        while let Some(i) = q.pop(0, 0, 1500, Params::default(), pool, |_, _| {
            panic!("no drop")
        }) {
            out.push(i.buf[0]);
        }
        out
    }

    #[test]
    fn round_robin_by_bytes_between_flows() {
        let mut pool = vec![];
        let mut q = ClassQueue::new(100, 1000, false);
        // Flow 1: four 1000-byte packets; flow 2: eight 500-byte ones.
        for _ in 0..4 {
            q.push(1, 0, &[1; 1000], &mut pool);
        }
        for _ in 0..8 {
            q.push(2, 0, &[2; 500], &mut pool);
        }
        assert_eq!((q.packets(), q.bytes(), q.active_flows()), (12, 8000, 2));
        let order = drain(&mut q, &mut pool);
        assert_eq!(order, [1, 2, 2, 1, 2, 2, 1, 2, 2, 1, 2, 2]);
        assert!(q.is_empty() && q.active_flows() == 0);
    }

    #[test]
    fn a_full_class_drops_from_the_fattest_flow() {
        let mut pool = vec![];
        let mut q = ClassQueue::new(20, 1500, false);
        for _ in 0..20 {
            assert_eq!(
                q.push(9, 0, &[9; 100], &mut pool),
                Pushed::Queued { dropped: 0 }
            );
        }
        assert_eq!(q.push(9, 0, &[9; 100], &mut pool), Pushed::Refused);
        assert_eq!(
            q.push(3, 0, &[3; 100], &mut pool),
            Pushed::Queued {
                dropped: DROP_BATCH_PACKETS
            }
        );
        assert_eq!(q.packets(), 20 - DROP_BATCH_PACKETS + 1);
        let order = drain(&mut q, &mut pool);
        assert_eq!(order, [9, 9, 9, 9, 3]);
    }

    #[test]
    fn codel_drops_a_standing_queue() {
        let mut pool = vec![];
        let mut q = ClassQueue::new(10_000, 1500, true);
        let ms = crate::NANOS_PER_MS;
        let mut drops = 0;
        let mut sent = 0;
        // One packet in and one out per ms, 30 ms behind: a standing queue.
        for t in 0..30 {
            q.push(1, t * ms, &[0; 1500], &mut pool);
        }
        for t in 30..1030 {
            q.push(1, t * ms, &[0; 1500], &mut pool);
            if q.pop(t * ms, 0, 1500, Params::default(), &mut pool, |_, aqm| {
                drops += usize::from(aqm)
            })
            .is_some()
            {
                sent += 1;
            }
        }
        assert!(drops > 3, "{drops}");
        assert!(sent > 900);
        assert_eq!(q.oldest().is_some(), !q.is_empty());
    }
}
