//! The send path: inner packets to a path, now or after a wait in mpt's
//! own queue.
//!
//! For each packet the scheduler sees a [`PathView`] of every path: up or
//! not, how long the packet would wait for the path's pacing budget
//! behind what already waits there, and the path's expected one-way
//! delay. With a paced scheduler ([`Scheduler::paced`], the default
//! [`crate::sched::Ecf`]):
//!
//! * a packet whose path has budget and nothing waiting leaves at once,
//!   encapsulated in the caller's buffer (no copy);
//! * otherwise it is copied into the path's FIFO in [`SendQueue`] if it is
//!   expected to leave within the queue bound, and dropped
//!   ([`DropReason::QueueFull`]) if not;
//! * [`Tunnel::poll_transmit`] releases waiting packets as budgets refill;
//!   [`Tunnel::poll_timeout`] includes the next refill.
//!
//! Invariants:
//! * a packet's tunnel sequence number is given when it enters (inner
//!   order is kept whichever path carries it); its path sequence number
//!   and nonce when it leaves (both count real sends);
//! * a packet waiting for a path that goes down moves to the path the
//!   scheduler picks then; with no path up it waits, within its bound;
//! * with an unpaced scheduler nothing waits once a session is up: the
//!   behaviour is the static-share tunnel's;
//! * a path carries tunnel sequence numbers in order: the pieces of a
//!   packet cut into fragments leave before any later packet on its path
//!   (callers drain [`Tunnel::poll_transmit`] after every send, and a
//!   paced send queues behind pieces still waiting);
//! * before the first session, the latest [`STAGED_MAX_PACKETS`] packets
//!   wait for it (as wireguard-go stages them; older ones are dropped as
//!   `no_session`) and then enter the send queue in the order they came.

use super::{Transmit, Tunnel};
use crate::queue::Queued;
use crate::sched::PathView;
use crate::stats::DropReason;
use crate::wire::{self, PacketType, HEADER_LEN};
use crate::{Nanos, PathId};

/// Most inner packets held while the first session is being set up
/// (tuning knob; wireguard-go stages up to 128 per peer).
pub const STAGED_MAX_PACKETS: usize = 128;

impl Tunnel {
    /// Fill the scheduler's view of every path for a packet of `len` bytes.
    fn fill_views(&mut self, now: Nanos, len: usize) {
        let paced = self.paced;
        for (i, p) in self.paths.iter_mut().enumerate() {
            let queue_ahead = p.queue_ahead_ns(now);
            let s = &mut p.sender;
            let need = self.queue.bytes(i as PathId) + len;
            let (wait_ns, spare_ns) = if paced {
                s.refill(now);
                (s.wait_ns(need), s.spare_ns(need))
            } else {
                (0, 0)
            };
            let delay_ns = p.state.rtt_min().map(|r| r / 2 + queue_ahead);
            self.views[i] = PathView {
                up: p.usable,
                wait_ns,
                delay_ns,
                spare_ns,
            };
        }
    }

    pub(super) fn pick(&mut self, now: Nanos, len: usize) -> Option<PathId> {
        self.fill_views(now, len);
        self.sched.pick(&self.views, len)
    }

    /// Encapsulate the inner packet at `buf[HEADER_LEN..HEADER_LEN + len]`
    /// (`buf` needs `TAG_LEN` bytes of room after it when security is on)
    /// and leave the body for the caller to seal with [`Tunnel::sealer`]
    /// and [`Transmit::seal`] (in parallel, a batch at a time) before the
    /// datagram leaves. `Transmit::len` includes the tag's room.
    /// [`Tunnel::send`] does both at once. `None`: the packet waits in
    /// the send queue ([`Tunnel::poll_transmit`] sends it later) or was
    /// dropped (counted).
    pub fn send_unsealed(&mut self, now: Nanos, buf: &mut [u8], len: usize) -> Option<Transmit> {
        if !self.fits(len, buf.len()) {
            self.drops.add(DropReason::TooBig);
            return None;
        }
        if !self.inner_admitted(&mut buf[HEADER_LEN..HEADER_LEN + len]) {
            return None;
        }
        let inner = &buf[HEADER_LEN..HEADER_LEN + len];
        if self.staging() {
            // Before the first session (the handshake is under way) and
            // its first usable path (peers pair paths on their first
            // probes), hold
            // a few packets, as wireguard-go stages them, rather than drop
            // what an application sent while the tunnel came up.
            // When full, the oldest goes (as in wireguard-go): what leaves
            // once the session is up is the most recent stretch, with no
            // gap before what follows it.
            // Staged packets go in order: real-time classes wait with the
            // rest, in their ordered class.
            let class = self.qos.as_ref().map_or(0, |q| q.classify(inner) as u8);
            if self.staged.len() >= STAGED_MAX_PACKETS {
                self.staged.pop_front();
                self.drops.add(if self.has_session() {
                    DropReason::NoPath
                } else {
                    DropReason::NoSession
                });
            }
            self.staged.push_back((class, inner.to_vec()));
            self.queue.count_staged();
            return None;
        }
        let (class_idx, flow) = match self.classify(now, buf, len) {
            super::qos::Classified::Done(t) => return t,
            super::qos::Classified::Ordered { class, flow } => (class, flow),
        };
        let class = class_idx as u8;
        if self.stage_busy() {
            self.stage_packet(now, class_idx, flow, &buf[HEADER_LEN..HEADER_LEN + len]);
            return None;
        }
        let path = self.path_now(now, class_idx, flow, &buf[HEADER_LEN..HEADER_LEN + len])?;
        let seq = self.next_tunnel_seq;
        self.store_for_recovery(now, seq, class, &buf[HEADER_LEN..HEADER_LEN + len]);
        self.leave_now(now, path, seq, class, buf, len)
    }

    /// Whether an inner packet of `len` bytes may be sent from a buffer of
    /// `buf_len` (else it is `too_big`): within the tunnel MTU, with room
    /// for the header, and cut into no more pieces than the wire allows.
    fn fits(&self, len: usize, buf_len: usize) -> bool {
        len <= self.mtu
            && buf_len >= HEADER_LEN + len
            && wire::pieces(len, self.frag.body_max).is_some()
    }

    /// Whether `inner` is an IP packet (else dropped, counted); TCP SYNs
    /// get their MSS clamped (`mss_clamp`).
    fn inner_admitted(&mut self, inner: &mut [u8]) -> bool {
        if wire::inner_ip_version(inner).is_none() {
            self.drops.add(DropReason::BadInner);
            return false;
        }
        if let Some(c) = &self.frag.mss_clamp {
            if c.apply(inner) {
                self.frag.mss_clamped += 1;
            }
        }
        true
    }

    /// The path an ordered packet (`inner`, of class `class_idx`) leaves on
    /// now; `None` when it does not leave now: dropped (counted), staged or
    /// copied into its path's queue.
    fn path_now(
        &mut self,
        now: Nanos,
        class_idx: usize,
        flow: Option<u64>,
        inner: &[u8],
    ) -> Option<PathId> {
        let len = inner.len();
        let class = class_idx as u8;
        let burst = self.burst_path.filter(|p| self.paths[*p as usize].usable);
        let Some(path) = burst.or_else(|| self.pick(now, len)) else {
            self.drops.add(DropReason::NoPath);
            return None;
        };
        let p = path as usize;
        if self.paths[p].remote.is_none() {
            self.drops.add(DropReason::NoPath);
            return None;
        }
        if self.paced {
            // Pieces of an earlier packet still to leave on this path go
            // first (a path carries tunnel sequence numbers in order).
            let pieces_first = self.fragment_frontier(path).is_some();
            let s = &mut self.paths[p].sender;
            s.refill(now);
            if self.queue.len(path) > 0 || !s.has_budget() || pieces_first {
                let wait = s.wait_ns(self.queue.bytes(path) + len);
                s.on_held();
                if self.qos.is_some() && self.queue.len(path) > 0 && wait > self.fill_bound(path) {
                    self.stage_packet(now, class_idx, flow, inner);
                    return None;
                }
                if wait > self.queue_max {
                    self.drops.add(DropReason::QueueFull);
                } else {
                    self.queue_ordered(path, class, now, inner);
                }
                return None;
            }
        }
        Some(path)
    }

    /// Data packet `seq` (in `buf`, as for [`Tunnel::send_unsealed`]) leaves
    /// now on `path`: its sequence numbers are taken.
    fn leave_now(
        &mut self,
        now: Nanos,
        path: PathId,
        seq: u64,
        class: u8,
        buf: &mut [u8],
        len: usize,
    ) -> Option<Transmit> {
        self.next_tunnel_seq += self.seq_span(len);
        self.record_sent(class, now, 0, len);
        self.emit_data(now, path, seq, class, buf, len)
    }

    /// [`Tunnel::send_unsealed`] for an inner packet built in `pkt` (all of
    /// it) rather than in `buf`: with loss recovery on, a packet larger
    /// than one datagram that leaves at once is kept by the recovery ring
    /// without a copy (`pkt` then holds a buffer to build the next packet
    /// in, of any length and content) and only what `buf` must carry now is
    /// copied there (its first piece; the others are cut from the ring). One
    /// copy of the packet fewer per send than building it in `buf`. With
    /// QoS on (the default) such a packet is of an ordered class (a
    /// real-time one travels in order once it is cut) and is classified
    /// and policed as `send_unsealed` would; if it waits (the QoS stage,
    /// its path's queue) it is copied there. In every other case (recovery
    /// off, a packet of one datagram, before the first session) it is
    /// copied into `buf` and sent as by `send_unsealed`. `buf` is as for
    /// `send_unsealed`.
    pub fn send_owned(
        &mut self,
        now: Nanos,
        pkt: &mut Vec<u8>,
        buf: &mut [u8],
    ) -> Option<Transmit> {
        let len = pkt.len();
        let body_max = self.frag.body_max;
        let owned = self.recovery.is_some()
            && len > body_max
            && self.fits(len, buf.len())
            && !self.staging();
        if !owned {
            let Some(room) = buf.get_mut(HEADER_LEN..HEADER_LEN + len) else {
                self.drops.add(DropReason::TooBig);
                return None;
            };
            room.copy_from_slice(pkt);
            return self.send_unsealed(now, buf, len);
        }
        if !self.inner_admitted(pkt) {
            return None;
        }
        // Larger than one datagram: never of a real-time class.
        let super::qos::Verdict::Ordered {
            class: class_idx,
            flow,
        } = self.classify_inner(now, pkt)
        else {
            return None;
        };
        if self.stage_busy() {
            self.stage_packet(now, class_idx, flow, pkt);
            return None;
        }
        let class = class_idx as u8;
        let path = self.path_now(now, class_idx, flow, pkt)?;
        let seq = self.next_tunnel_seq;
        // The first piece alone when the others leave from the ring at the
        // caller's next drain (`emit_first_fragment`); the whole packet
        // when the path holds them (the ring may let its copy go).
        let whole = self.pieces_release_at(now, path) > now;
        let n = if whole {
            len
        } else {
            wire::piece_range(len, body_max, 0).end
        };
        let r = self.recovery.as_mut()?;
        r.store_owned(now, seq, class, pkt);
        let held = r.stored(seq)?;
        buf[HEADER_LEN..HEADER_LEN + n].copy_from_slice(&held[..n]);
        self.leave_now(now, path, seq, class, buf, len)
    }

    pub(super) fn store_for_recovery(&mut self, now: Nanos, seq: u64, class: u8, pkt: &[u8]) {
        if let Some(r) = self.recovery.as_mut() {
            r.store(now, seq, class, pkt);
        }
    }

    /// Header and accounting of a data packet that leaves now on `path`.
    pub(super) fn emit_data(
        &mut self,
        now: Nanos,
        path: PathId,
        seq: u64,
        class: u8,
        buf: &mut [u8],
        len: usize,
    ) -> Option<Transmit> {
        let dst = self.paths[path as usize].remote?;
        let inner = &buf[HEADER_LEN..HEADER_LEN + len];
        let dscp = self.qos.as_ref().map_or(0, |q| {
            q.outer_tos(usize::from(class & !wire::CLASS_UNORDERED), inner)
        });
        // RFC 6040 normal mode on secure tunnels (`ecn.rs`).
        let ecn = if self.crypto.is_some() {
            crate::ecn_tunnel::outer_ecn(inner)
        } else {
            0
        };
        let tos = dscp | ecn;
        let (total, seal) = if len > self.frag.body_max {
            self.emit_first_fragment(now, path, seq, class, tos, buf, len)?
        } else {
            self.emit(now, path, PacketType::Data, class, seq, buf, len)?
        };
        if self.paced {
            self.paths[path as usize].sender.on_send(total);
        }
        self.paths[path as usize].tail_since = Some(now);
        self.counters.tx_packets += 1;
        self.counters.tx_bytes += len as u64;
        Some(self.data_transmit(path, dst, total, seal, tos, super::Carries::Packet))
    }

    /// A data datagram of `len` bytes leaving on `path` for `dst`.
    pub(super) fn data_transmit(
        &self,
        path: PathId,
        dst: std::net::SocketAddr,
        len: usize,
        seal: Option<super::SealTicket>,
        tos: u8,
        carries: super::Carries,
    ) -> Transmit {
        Transmit {
            path,
            local_key: self.paths[path as usize].cfg.local_key,
            dst,
            len,
            seal: seal.into(),
            carries,
            tos,
        }
    }

    /// The next waiting packet whose path has budget now, encapsulated in
    /// `buf` (which needs room for the header, the largest inner packet
    /// and the tag) and left to seal like [`Tunnel::send_unsealed`]'s.
    ///
    /// A path's release starts once its budget covers a batch
    /// ([`crate::pace::TokenBucket::release_need`]) and then goes on while
    /// it has budget, so that its packets leave together (one batch send)
    /// before the next path's. Call until `None`, at one `now`.
    pub(super) fn poll_queued(&mut self, now: Nanos, buf: &mut [u8]) -> Option<Transmit> {
        if !self.staged.is_empty() && !self.staging() {
            self.unstage(now);
        }
        if self.stage_busy() {
            self.drain_stage(now);
        }
        if self.queue.is_empty() {
            self.releasing = false;
            return None;
        }
        let n = self.paths.len();
        for k in 0..n {
            let path = ((self.release_next + k) % n) as PathId;
            let p = path as usize;
            if self.queue.len(path) == 0 {
                continue;
            }
            // Held pieces (`pieces_held`) go before the path's ordered
            // packets; only its real-time packets pass them.
            if self.queue.rt_len(path) == 0 && self.fragment_frontier(path).is_some() {
                continue;
            }
            if !self.paths[p].usable {
                self.reroute(now, path);
                continue;
            }
            let s = &mut self.paths[p].sender;
            s.refill(now);
            // Real-time packets leave as soon as there is budget.
            let ready = if (k == 0 && self.releasing) || self.queue.rt_len(path) > 0 {
                s.has_budget()
            } else {
                s.release_ready(self.queue.bytes(path))
            };
            if !ready {
                continue;
            }
            let q = self.queue.pop(path, now)?;
            self.release_next = p;
            self.releasing = true;
            let t = self.emit_queued(now, path, &q, buf);
            self.queue.recycle(q);
            if t.is_some() {
                return t;
            }
        }
        self.releasing = false;
        self.release_next = (self.release_next + 1) % n.max(1);
        None
    }

    /// Move the packets waiting on a path that went down to the paths the
    /// scheduler picks now, where they wait for those paths' budget like
    /// their own packets; what would wait there longer than the queue's
    /// bound is dropped (`queue_full`), as a new packet would be. With no
    /// path up they wait until their bound, then are dropped (`no_path`).
    /// (Sent at once instead, the queue of an LTE path in an outage, a
    /// second or more at its rate, overflowed the other path's bottleneck
    /// and left it no budget for as long: its pacing debt.)
    fn reroute(&mut self, now: Nanos, from: PathId) {
        while let Some((at, len)) = self.queue.oldest(from) {
            let Some(to) = self.pick(now, len) else {
                if now.saturating_sub(at) > self.queue_max {
                    self.drop_oldest(from, DropReason::NoPath);
                    continue;
                }
                return;
            };
            // `pick` filled the views: the wait behind `to`'s queue.
            if self.views[to as usize].wait_ns > self.queue_max {
                self.drop_oldest(from, DropReason::QueueFull);
                continue;
            }
            if !self.queue.move_next(from, to) {
                // Not a path of the queue's (cannot happen: the scheduler
                // picks among the tunnel's paths); never loop on it.
                return;
            }
        }
    }

    /// Drop the packet `path`'s queue would release next, counted.
    fn drop_oldest(&mut self, path: PathId, reason: DropReason) {
        if self.queue.drop_next(path) {
            self.drops.add(reason);
        }
    }

    fn emit_queued(
        &mut self,
        now: Nanos,
        path: PathId,
        q: &Queued,
        buf: &mut [u8],
    ) -> Option<Transmit> {
        let Some(room) = buf.get_mut(HEADER_LEN..HEADER_LEN + q.len) else {
            self.drops.add(DropReason::TooBig);
            return None;
        };
        room.copy_from_slice(q.packet());
        self.record_sent(q.class, now, now.saturating_sub(q.at), q.len);
        self.emit_data(now, path, q.seq, q.class, buf, q.len)
    }

    /// When the next waiting packet's path has budget again.
    pub(super) fn queue_deadline(&self, now: Nanos) -> Option<Nanos> {
        if !self.staged.is_empty() && !self.staging() {
            return Some(now);
        }
        let pieces = self.pieces_deadline(now);
        if pieces == Some(now) {
            return pieces;
        }
        let any_up = self.paths.iter().any(|p| p.usable);
        // The QoS stage drains as path queues make room (their deadlines
        // below); with every path queue empty, at once; with no path,
        // when its oldest packet is due to be dropped.
        let stage = self.qos.as_ref().and_then(|q| q.oldest()).map(|at| {
            if !any_up {
                at.saturating_add(self.queue_max + 1)
            } else if self.queue.is_empty() {
                now
            } else {
                Nanos::MAX
            }
        });
        if self.queue.is_empty() {
            return stage.into_iter().chain(pieces).min();
        }
        (0..self.paths.len())
            .filter_map(|i| {
                let (at, _) = self.queue.oldest(i as PathId)?;
                Some(
                    if self.paths[i].usable && self.queue.rt_len(i as PathId) > 0 {
                        self.paths[i].sender.budget_at(now)
                    } else if self.paths[i].usable {
                        self.paths[i]
                            .sender
                            .release_at(now, self.queue.bytes(i as PathId))
                    } else if any_up {
                        now
                    } else {
                        at.saturating_add(self.queue_max + 1)
                    },
                )
            })
            .chain(stage)
            .chain(pieces)
            .min()
    }

    /// The lowest tunnel sequence that may still leave on `path`: its
    /// oldest waiting packet's or piece's, or the next one given out.
    pub(super) fn frontier(&self, path: PathId) -> u64 {
        let queued = self.queue.oldest_seq(path).unwrap_or(self.next_tunnel_seq);
        self.fragment_frontier(path)
            .map_or(queued, |f| f.min(queued))
    }

    /// Packets waiting in the send queue (and pieces of a packet whose
    /// first piece has left).
    pub fn queued(&self) -> usize {
        let staged = if self.staging() { 0 } else { self.staged.len() };
        let stage = self.qos.as_ref().map_or(0, crate::qos::Qos::packets);
        self.queue.packets() + staged + stage + self.frag.pieces_waiting()
    }

    /// Whether inner packets are held for the tunnel's start: before the
    /// first session, and before the first path is usable after it.
    pub(super) fn staging(&self) -> bool {
        !self.first_path_up || !self.has_session()
    }

    /// The first session is up: packets held for it enter the send queue
    /// on the paths the scheduler picks, in the order they came.
    fn unstage(&mut self, now: Nanos) {
        while let Some((class, pkt)) = self.staged.pop_front() {
            let Some(path) = self.pick(now, pkt.len()) else {
                self.drops.add(DropReason::NoPath);
                continue;
            };
            self.queue_ordered(path, class, now, &pkt);
        }
    }

    /// Give an ordered packet (entered at `at`) the next tunnel sequence
    /// and queue it on `path`, kept for loss recovery; counted as
    /// `queue_full` if the queue is at its packet cap.
    pub(super) fn queue_ordered(&mut self, path: PathId, class: u8, at: Nanos, pkt: &[u8]) {
        let seq = self.next_tunnel_seq;
        if !self.queue.push(path, seq, class, at, pkt) {
            self.drops.add(DropReason::QueueFull);
            return;
        }
        self.store_for_recovery(at, seq, class, pkt);
        self.next_tunnel_seq += self.seq_span(pkt.len());
    }

    /// Send the next packets (`packets` of them, `bytes` in all: the
    /// segments of one TSO super-packet) on one path, so that the I/O layer
    /// can batch them (sendmmsg, UDP GSO). The scheduler charges the burst
    /// as a whole. The burst lasts as long as the returned guard; send
    /// through it ([`Burst`] dereferences to the tunnel).
    pub fn burst(&mut self, now: Nanos, bytes: usize, packets: usize) -> Burst<'_> {
        self.fill_views(now, bytes);
        self.burst_path = self.sched.pick_burst(&self.views, bytes, packets);
        Burst { tunnel: self }
    }
}

/// A burst of sends on one path (see [`Tunnel::burst`]); ends when dropped.
pub struct Burst<'a> {
    tunnel: &'a mut Tunnel,
}

impl std::ops::Deref for Burst<'_> {
    type Target = Tunnel;
    fn deref(&self) -> &Tunnel {
        self.tunnel
    }
}

impl std::ops::DerefMut for Burst<'_> {
    fn deref_mut(&mut self) -> &mut Tunnel {
        self.tunnel
    }
}

impl Drop for Burst<'_> {
    fn drop(&mut self) {
        self.tunnel.burst_path = None;
    }
}
