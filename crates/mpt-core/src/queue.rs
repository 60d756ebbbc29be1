//! mpt's own send queue: inner packets that a path's pacing budget does
//! not let leave yet wait here, one FIFO per path, in the order the
//! scheduler assigned them.
//!
//! The bound is in time, not packets: the tunnel admits a packet only if
//! it is expected to leave within `queue_ms` at its path's pacing rate
//! ([`crate::stats::DropReason::QueueFull`] otherwise), so what waits is
//! the paths' pacing rates times `queue_ms`; [`SendQueue`] adds hard caps
//! of packets and of bytes as a memory bound, and keeps at most
//! [`POOL_BUFFERS`] spare buffers. This makes mpt the queue of
//! the bottleneck, where the inner TCP meets its drops, and where the QoS
//! issue classifies.
//!
//! Each path has a second, real-time lane (QoS real-time classes): its
//! packets leave before the path's ordinary ones. They carry sequence
//! numbers of their own, which the receiver does not reorder.
//!
//! Invariants:
//! * a packet keeps the tunnel sequence number it got when it entered,
//!   so the receiver restores the inner order whatever path it takes;
//! * per path and lane, packets leave in the order they entered; the
//!   real-time lane first. A packet moved off a path that went down
//!   ([`SendQueue::move_next`]) takes its place in the ordinary lane by
//!   its tunnel sequence number, so that lane stays in sequence order;
//! * buffers are recycled: after warm-up no allocation per packet;
//! * `bytes(p)` is always the sum of the lengths queued on path `p` (both
//!   lanes), `rt_bytes(p)` that of its real-time lane.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::{Nanos, PathId};

/// Spare buffers kept for the next packets (tuning knob: a burst at a high
/// rate; beyond it, buffers are allocated and freed after).
pub const POOL_BUFFERS: usize = 256;

/// One waiting inner packet.
#[derive(Debug)]
pub struct Queued {
    /// Tunnel sequence number given at entry.
    pub seq: u64,
    /// Traffic class (DSCP/ECN byte) for the header.
    pub class: u8,
    /// When it entered.
    pub at: Nanos,
    /// The inner packet is `buf[..len]`.
    pub len: usize,
    buf: Vec<u8>,
}

impl Queued {
    pub fn packet(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

/// Counters of the send queue, in `mpt status`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct QueueStats {
    /// Packets that waited (entered the queue).
    pub queued: u64,
    /// Packets that arrived before the first session and waited for it
    /// (the latest [`crate::tunnel::STAGED_MAX_PACKETS`] are kept).
    pub staged: u64,
    /// Packets that left the queue.
    pub released: u64,
    /// Packets moved off a path that went down while they waited.
    pub rerouted: u64,
    /// Longest wait of a released packet, nanoseconds.
    pub max_wait_ns: u64,
    /// Sum of the waits of released packets (mean = sum / released).
    pub wait_ns_total: u64,
}

/// Per-path FIFOs of waiting packets. See the module documentation.
#[derive(Debug)]
pub struct SendQueue {
    fifos: Vec<VecDeque<Queued>>,
    /// Real-time lanes, served first.
    rt: Vec<VecDeque<Queued>>,
    bytes: Vec<usize>,
    rt_bytes: Vec<usize>,
    pool: Vec<Vec<u8>>,
    packets: usize,
    max_packets: usize,
    /// Bytes waiting on all paths, and the cap on them.
    total_bytes: usize,
    max_bytes: usize,
    stats: QueueStats,
}

impl SendQueue {
    /// One more path (added at runtime), with empty lanes.
    pub fn add_path(&mut self) {
        self.fifos.push(VecDeque::new());
        self.rt.push(VecDeque::new());
        self.bytes.push(0);
        self.rt_bytes.push(0);
    }

    /// At most `max_packets` packets and `max_bytes` bytes wait.
    pub fn new(paths: usize, max_packets: usize, max_bytes: usize) -> Self {
        Self {
            fifos: (0..paths).map(|_| VecDeque::new()).collect(),
            rt: (0..paths).map(|_| VecDeque::new()).collect(),
            bytes: vec![0; paths],
            rt_bytes: vec![0; paths],
            pool: Vec::new(),
            packets: 0,
            max_packets,
            total_bytes: 0,
            max_bytes,
            stats: QueueStats::default(),
        }
    }

    /// Queue `pkt` on `path`, entered at `at`; `false` if a cap is
    /// reached.
    pub fn push(&mut self, path: PathId, seq: u64, class: u8, at: Nanos, pkt: &[u8]) -> bool {
        self.push_lane(false, path, seq, class, at, pkt)
    }

    /// Queue `pkt` on `path`'s real-time lane; `false` if the cap is reached.
    pub fn push_rt(&mut self, path: PathId, seq: u64, class: u8, at: Nanos, pkt: &[u8]) -> bool {
        self.push_lane(true, path, seq, class, at, pkt)
    }

    fn push_lane(
        &mut self,
        rt: bool,
        path: PathId,
        seq: u64,
        class: u8,
        at: Nanos,
        pkt: &[u8],
    ) -> bool {
        let p = path as usize;
        if self.packets >= self.max_packets
            || self.total_bytes + pkt.len() > self.max_bytes
            || p >= self.fifos.len()
        {
            return false;
        }
        let mut buf = self.pool.pop().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(pkt);
        let q = Queued {
            seq,
            class,
            at,
            len: pkt.len(),
            buf,
        };
        if rt {
            self.rt[p].push_back(q);
            self.rt_bytes[p] += pkt.len();
        } else {
            self.fifos[p].push_back(q);
        }
        self.bytes[p] += pkt.len();
        self.total_bytes += pkt.len();
        self.packets += 1;
        self.stats.queued += 1;
        true
    }

    /// Take the next packet of `path` (real-time lane first); give it back
    /// with [`Self::recycle`].
    pub fn pop(&mut self, path: PathId, now: Nanos) -> Option<Queued> {
        let q = self.take_next(path)?;
        let wait = now.saturating_sub(q.at);
        self.stats.released += 1;
        self.stats.max_wait_ns = self.stats.max_wait_ns.max(wait);
        self.stats.wait_ns_total += wait;
        Some(q)
    }

    /// Drop the packet [`Self::pop`] would take next (its buffer goes back
    /// to the pool); not counted as released: the caller counts its drop
    /// reason. `false` if `path` has none.
    pub fn drop_next(&mut self, path: PathId) -> bool {
        let Some(q) = self.take_next(path) else {
            return false;
        };
        self.recycle(q);
        true
    }

    fn take_next(&mut self, path: PathId) -> Option<Queued> {
        let p = path as usize;
        let q = match self.rt.get_mut(p)?.pop_front() {
            Some(q) => {
                self.rt_bytes[p] -= q.len;
                q
            }
            None => self.fifos.get_mut(p)?.pop_front()?,
        };
        self.bytes[p] -= q.len;
        self.total_bytes -= q.len;
        self.packets -= 1;
        Some(q)
    }

    /// Return a popped packet's buffer to the pool.
    pub fn recycle(&mut self, q: Queued) {
        if self.pool.len() < POOL_BUFFERS.min(self.max_packets) {
            self.pool.push(q.buf);
        }
    }

    /// Count a packet held for the first session.
    pub fn count_staged(&mut self) {
        self.stats.staged += 1;
    }

    /// Move the packet [`Self::pop`] would take next from `from` to
    /// `to`'s lane of the same kind, where it waits for `to`'s budget like
    /// `to`'s own packets. In the ordinary lane it goes before the packets
    /// with later tunnel sequence numbers, so that `to` still sends them
    /// in order. Counted as rerouted; `false` if `from` has none.
    pub fn move_next(&mut self, from: PathId, to: PathId) -> bool {
        let (f, t) = (from as usize, to as usize);
        if t >= self.fifos.len() || f == t {
            return false;
        }
        let Some(fifo) = self.fifos.get_mut(f) else {
            return false;
        };
        if let Some(q) = self.rt[f].pop_front() {
            self.rt_bytes[f] -= q.len;
            self.rt_bytes[t] += q.len;
            self.bytes[f] -= q.len;
            self.bytes[t] += q.len;
            self.rt[t].push_back(q);
        } else if let Some(q) = fifo.pop_front() {
            self.bytes[f] -= q.len;
            self.bytes[t] += q.len;
            let lane = &mut self.fifos[t];
            let at = lane.partition_point(|o| o.seq < q.seq);
            lane.insert(at, q);
        } else {
            return false;
        }
        self.stats.rerouted += 1;
        true
    }

    pub fn bytes(&self, path: PathId) -> usize {
        self.bytes.get(path as usize).copied().unwrap_or(0)
    }

    /// Bytes waiting in `path`'s real-time lane.
    pub fn rt_bytes(&self, path: PathId) -> usize {
        self.rt_bytes.get(path as usize).copied().unwrap_or(0)
    }

    /// Packets waiting on `path`, both lanes.
    pub fn len(&self, path: PathId) -> usize {
        let p = path as usize;
        self.fifos.get(p).map_or(0, VecDeque::len) + self.rt.get(p).map_or(0, VecDeque::len)
    }

    /// Packets waiting in `path`'s real-time lane.
    pub fn rt_len(&self, path: PathId) -> usize {
        self.rt.get(path as usize).map_or(0, VecDeque::len)
    }

    pub fn is_empty(&self) -> bool {
        self.packets == 0
    }

    pub fn packets(&self) -> usize {
        self.packets
    }

    /// Bytes waiting on all paths, and the cap on them.
    pub fn total_bytes(&self) -> usize {
        self.total_bytes
    }
    pub fn max_bytes(&self) -> usize {
        self.max_bytes
    }

    /// The tunnel sequence of the oldest ordinary packet of `path`.
    pub fn oldest_seq(&self, path: PathId) -> Option<u64> {
        self.fifos.get(path as usize)?.front().map(|q| q.seq)
    }

    /// When the packet [`Self::pop`] takes next from `path` entered, and
    /// its length.
    pub fn oldest(&self, path: PathId) -> Option<(Nanos, usize)> {
        let p = path as usize;
        self.rt
            .get(p)?
            .front()
            .or_else(|| self.fifos.get(p)?.front())
            .map(|q| (q.at, q.len))
    }

    /// Call `f` with the class byte of every packet in a real-time lane.
    pub fn for_each_rt(&self, mut f: impl FnMut(u8)) {
        self.rt.iter().flatten().for_each(|q| f(q.class));
    }

    pub fn stats(&self) -> &QueueStats {
        &self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_moved_packet_keeps_the_new_paths_lane_in_sequence_order() {
        let mut q = SendQueue::new(2, 16, 1 << 20);
        assert!(q.push(1, 5, 0, 0, &[0; 100]));
        assert!(q.push(1, 9, 0, 0, &[0; 100]));
        assert!(q.push(0, 7, 0, 0, &[0; 300]));
        assert!(q.push_rt(0, 1, 0, 0, &[0; 50]));
        // The real-time packet first, to the real-time lane.
        assert!(q.move_next(0, 1));
        assert_eq!((q.rt_len(1), q.rt_bytes(1), q.bytes(0)), (1, 50, 300));
        assert!(q.move_next(0, 1));
        assert!(!q.move_next(0, 1));
        assert_eq!((q.len(0), q.bytes(0), q.len(1), q.bytes(1)), (0, 0, 4, 550));
        assert_eq!(q.stats().rerouted, 2);
        let order: Vec<u64> = std::iter::from_fn(|| q.pop(1, 0).map(|p| p.seq)).collect();
        assert_eq!(order, vec![1, 5, 7, 9]);
        assert_eq!((q.packets(), q.total_bytes()), (0, 0));
    }

    #[test]
    fn the_byte_cap_refuses_what_does_not_fit() {
        let mut q = SendQueue::new(2, 100, 250);
        assert!(q.push(0, 1, 0, 0, &[1; 100]));
        assert!(q.push_rt(1, 2, 0, 0, &[2; 100]));
        assert!(!q.push(0, 3, 0, 0, &[3; 51]), "301 > 250");
        assert!(q.push(1, 3, 0, 0, &[3; 50]));
        assert_eq!((q.total_bytes(), q.packets()), (250, 3));
        let p = q.pop(1, 1).unwrap();
        q.recycle(p);
        assert_eq!(q.total_bytes(), 150);
        assert!(q.push(0, 4, 0, 0, &[4; 100]));
    }

    #[test]
    fn per_path_fifo_bytes_and_cap() {
        let mut q = SendQueue::new(2, 3, usize::MAX);
        assert!(q.push(0, 1, 0, 10, &[1; 100]));
        assert!(q.push(1, 2, 0, 11, &[2; 50]));
        assert!(q.push(0, 3, 0, 12, &[3; 10]));
        assert!(!q.push(1, 4, 0, 13, &[4; 10]), "cap of 3 packets");
        assert!(!q.push(7, 4, 0, 13, &[4; 10]), "no such path");
        assert_eq!((q.bytes(0), q.bytes(1), q.packets()), (110, 50, 3));
        let a = q.pop(0, 20).unwrap();
        assert_eq!((a.seq, a.packet()), (1, &[1u8; 100][..]));
        q.recycle(a);
        let b = q.pop(0, 30).unwrap();
        assert_eq!(b.seq, 3);
        q.recycle(b);
        assert!(q.pop(0, 30).is_none());
        assert_eq!(q.bytes(0), 0);
        assert_eq!(q.oldest(1), Some((11, 50)));
        assert_eq!(q.stats().max_wait_ns, 18);
        assert_eq!(q.stats().released, 2);
        // Recycled buffers are reused.
        assert!(q.push(0, 5, 0, 40, &[5; 20]));
        assert_eq!(q.pop(0, 40).unwrap().packet(), &[5u8; 20][..]);
        // A dropped packet leaves the bytes and counts but is no release.
        assert!(q.drop_next(1));
        assert!(!q.drop_next(1), "none left");
        assert_eq!((q.bytes(1), q.packets()), (0, 0));
        assert_eq!(q.stats().released, 3);
    }

    #[test]
    fn the_real_time_lane_leaves_first_and_keeps_out_of_the_frontier() {
        let mut q = SendQueue::new(1, 10, usize::MAX);
        assert!(q.push(0, 10, 0, 1, &[1; 100]));
        assert!(q.push_rt(0, 7, 0x81, 2, &[2; 60]));
        assert_eq!(
            (q.len(0), q.rt_len(0), q.bytes(0), q.rt_bytes(0)),
            (2, 1, 160, 60)
        );
        assert_eq!(
            q.oldest_seq(0),
            Some(10),
            "the frontier is the ordered lane's"
        );
        assert_eq!(q.oldest(0), Some((2, 60)), "what pop takes next");
        let a = q.pop(0, 5).unwrap();
        assert_eq!((a.seq, a.class), (7, 0x81));
        assert_eq!(q.rt_bytes(0), 0);
        assert_eq!(q.pop(0, 5).unwrap().seq, 10);
    }
}
