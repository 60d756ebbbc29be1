//! The tunnel state machine: inner packets in, datagrams out, and back.
//!
//! The I/O layer drives a [`Tunnel`] with four kinds of calls, all taking
//! `now` (monotonic nanoseconds):
//!
//! * [`Tunnel::send`] — an inner IP packet read from the TUN, already placed
//!   at `buf[HEADER_LEN..]`; the header is written in place (no copy) and a
//!   [`Transmit`] names the path and destination;
//! * [`Tunnel::recv`] — a datagram from a path socket; in-order data is
//!   delivered from the caller's buffer ([`Received::Deliver`]), early data is
//!   copied into the reorder buffer and drained with [`Tunnel::poll_deliver`];
//! * [`Tunnel::poll_transmit`] — control packets (probes, echoes) to send;
//! * [`Tunnel::poll_timeout`] / [`Tunnel::handle_timeout`] — timers.
//!
//! Events (path up/down) are drained with [`Tunnel::poll_event`].
//!
//! Invariants:
//! * every packet that is neither transmitted nor delivered is counted under
//!   one [`DropReason`];
//! * data is only sent on paths that are up; probes go on every path;
//! * nothing here blocks, allocates per in-order packet, or panics on input.

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;

use serde::Serialize;

use crate::path::{PathConfig, PathState, PathStatus};
use crate::reorder::{
    Accept, PathFrontier, ReleasePolicy, ReorderBuffer, ReorderStats, TimeoutOnly,
};
use crate::sched::{Scheduler, Share, SmoothWrr};
use crate::stats::{DropCounters, DropReason, TunnelCounters};
use crate::wire::{
    self, Header, HeaderFields, PacketType, ProbeBody, WireError, HEADER_LEN, PROBE_BODY_LEN,
    PROBE_FLAG_HEARING,
};
use crate::{Nanos, PathId};

/// Which reorder release policy to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleaseKind {
    /// Only `max_delay` and window overflow release gaps.
    Timeout,
    /// Also release once every live path has moved past a gap.
    PathFrontier,
}

/// Configuration of the core tunnel.
#[derive(Debug, Clone)]
pub struct TunnelConfig {
    pub paths: Vec<PathConfig>,
    /// Largest inner packet accepted from the TUN.
    pub mtu: usize,
    pub reorder_window: usize,
    pub reorder_max_delay: Nanos,
    pub release: ReleaseKind,
    /// Whether path weights share packets or bytes.
    pub share: Share,
}

/// A datagram to send: `buf[..len]` goes to `dst` over `path`'s socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    pub path: PathId,
    pub local_key: usize,
    pub dst: SocketAddr,
    pub len: usize,
}

/// Result of [`Tunnel::recv`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Received {
    /// `buf[offset..offset+len]` is the next inner packet: write it to the
    /// TUN now, then drain [`Tunnel::poll_deliver`].
    Deliver { offset: usize, len: usize },
    /// Consumed (held for reordering, or a control packet).
    Consumed,
    /// Dropped and counted.
    Dropped(DropReason),
}

/// Something worth logging.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    PathUp { path: PathId },
    PathDown { path: PathId, reason: &'static str },
    AllPathsDown,
}

/// The tunnel. See the module documentation.
pub struct Tunnel {
    paths: Vec<PathState>,
    up: Vec<bool>,
    sched: Box<dyn Scheduler>,
    policy: Box<dyn ReleasePolicy>,
    reorder: ReorderBuffer,
    mtu: usize,
    next_tunnel_seq: u64,
    counter: u64,
    wall_offset: i64,
    drops: DropCounters,
    counters: TunnelCounters,
    events: VecDeque<Event>,
}

impl Tunnel {
    pub fn new(cfg: TunnelConfig, now: Nanos) -> Self {
        let weights: Vec<u32> = cfg.paths.iter().map(|p| p.weight).collect();
        let n = cfg.paths.len();
        let policy: Box<dyn ReleasePolicy> = match cfg.release {
            ReleaseKind::Timeout => Box::new(TimeoutOnly),
            ReleaseKind::PathFrontier => Box::new(PathFrontier::new(n)),
        };
        Self {
            paths: cfg
                .paths
                .into_iter()
                .map(|p| PathState::new(p, now))
                .collect(),
            up: vec![false; n],
            sched: Box::new(SmoothWrr::with_share(&weights, cfg.share)),
            policy,
            reorder: ReorderBuffer::new(cfg.reorder_window, cfg.reorder_max_delay),
            mtu: cfg.mtu,
            next_tunnel_seq: 0,
            counter: 0,
            wall_offset: 0,
            drops: DropCounters::default(),
            counters: TunnelCounters::default(),
            events: VecDeque::new(),
        }
    }

    /// Replace the scheduler (for experiments and tests).
    pub fn set_scheduler(&mut self, s: Box<dyn Scheduler>) {
        self.sched = s;
    }

    /// Wall-clock offset: wire timestamps are `now + offset` (ns since the
    /// UNIX epoch when the caller sets it from the real-time clock).
    pub fn set_wall_offset(&mut self, offset: i64) {
        self.wall_offset = offset;
    }

    fn wall(&self, now: Nanos) -> u64 {
        (now as i64).wrapping_add(self.wall_offset) as u64
    }

    pub fn path_count(&self) -> usize {
        self.paths.len()
    }
    pub fn path(&self, id: PathId) -> Option<&PathState> {
        self.paths.get(id as usize)
    }
    pub fn drops(&self) -> &DropCounters {
        &self.drops
    }
    pub fn counters(&self) -> &TunnelCounters {
        &self.counters
    }
    pub fn reorder_stats(&self) -> &ReorderStats {
        self.reorder.stats()
    }

    /// Count a drop that happened outside the core (I/O errors).
    pub fn count_drop(&mut self, reason: DropReason) {
        self.drops.add(reason);
    }

    /// A send on `path` failed. `hard` means the network said it cannot
    /// deliver (unreachable, link down): the path is taken out of the
    /// schedule at once instead of after `dead`, until it is heard again.
    pub fn on_send_error(&mut self, path: PathId, hard: bool, now: Nanos) {
        self.drops.add(DropReason::SendFailed);
        if hard {
            if let Some(p) = self.paths.get_mut(path as usize) {
                p.send_blocked = true;
                self.refresh_up(path, now);
            }
        }
    }

    fn next_fields(
        &mut self,
        path: PathId,
        now: Nanos,
        class: u8,
        tunnel_seq: u64,
        len: usize,
    ) -> HeaderFields {
        let path_seq = self.paths[path as usize].on_transmit(len);
        let counter = self.counter;
        self.counter += 1;
        HeaderFields {
            path,
            class,
            session: 0,
            counter,
            path_seq,
            timestamp_ns: self.wall(now),
            tunnel_seq,
        }
    }

    /// Encapsulate the inner packet at `buf[HEADER_LEN..HEADER_LEN + len]`.
    pub fn send(&mut self, now: Nanos, buf: &mut [u8], len: usize) -> Option<Transmit> {
        if len > self.mtu || buf.len() < HEADER_LEN + len {
            self.drops.add(DropReason::TooBig);
            return None;
        }
        let inner = &buf[HEADER_LEN..HEADER_LEN + len];
        if wire::inner_ip_version(inner).is_none() {
            self.drops.add(DropReason::BadInner);
            return None;
        }
        let class = wire::inner_traffic_class(inner);
        let Some(path) = self.sched.pick(&self.up, len) else {
            self.drops.add(DropReason::NoPath);
            return None;
        };
        let seq = self.next_tunnel_seq;
        self.next_tunnel_seq += 1;
        let total = HEADER_LEN + len;
        let f = self.next_fields(path, now, class, seq, total);
        wire::write_header(buf, PacketType::Data, &f);
        self.counters.tx_packets += 1;
        self.counters.tx_bytes += len as u64;
        let p = &self.paths[path as usize].cfg;
        Some(Transmit {
            path,
            local_key: p.local_key,
            dst: p.remote,
            len: total,
        })
    }

    /// Handle a datagram that arrived on local socket `local_key` from
    /// `from`. `buf` holds exactly the datagram.
    pub fn recv(&mut self, now: Nanos, local_key: usize, from: SocketAddr, buf: &[u8]) -> Received {
        let h = match Header::new_checked(buf) {
            Ok(h) => h,
            Err(e) => {
                let r = match e {
                    WireError::Truncated => DropReason::Truncated,
                    WireError::BadVersion => DropReason::BadVersion,
                    WireError::BadType => DropReason::BadType,
                };
                return self.drop(r);
            }
        };
        let pid = h.path();
        let Some(p) = self.paths.get(pid as usize) else {
            return self.drop(DropReason::UnknownPath);
        };
        if p.cfg.local_key != local_key {
            return self.drop(DropReason::UnknownPath);
        }
        if p.cfg.remote != from {
            return self.drop(DropReason::UnknownSource);
        }
        if h.packet_type() == PacketType::Data && wire::inner_ip_version(h.body()).is_none() {
            return self.drop(DropReason::BadInner);
        }
        let transit = (self.wall(now) as i64).wrapping_sub(h.timestamp_ns() as i64);
        self.paths[pid as usize].on_receive(now, buf.len(), h.path_seq(), transit);
        self.refresh_up(pid, now);
        match h.packet_type() {
            PacketType::Data => self.recv_data(now, pid, &h),
            PacketType::Probe | PacketType::Echo => {
                self.recv_control(now, pid, &h);
                Received::Consumed
            }
        }
    }

    fn drop(&mut self, r: DropReason) -> Received {
        self.drops.add(r);
        Received::Dropped(r)
    }

    fn recv_data(&mut self, now: Nanos, pid: PathId, h: &Header<'_>) -> Received {
        let seq = h.tunnel_seq();
        let body = h.body();
        let resyncs = self.reorder.stats().resyncs;
        let accept = self.reorder.insert(seq, body, now);
        if self.reorder.stats().resyncs != resyncs {
            self.policy.reset();
        }
        self.policy.on_data(pid, seq);
        let r = match accept {
            Accept::DeliverNow => {
                self.counters.rx_packets += 1;
                self.counters.rx_bytes += body.len() as u64;
                Received::Deliver {
                    offset: HEADER_LEN,
                    len: body.len(),
                }
            }
            Accept::Held => Received::Consumed,
            Accept::Duplicate => return self.drop(DropReason::Duplicate),
            Accept::Late => return self.drop(DropReason::Late),
        };
        self.apply_policy();
        r
    }

    fn apply_policy(&mut self) {
        if self.reorder.held() > 0 {
            let floor = self.policy.lost_below(&self.up);
            self.reorder.release_below(floor);
        }
    }

    fn recv_control(&mut self, now: Nanos, pid: PathId, h: &Header<'_>) {
        let Ok(body) = ProbeBody::parse(h.body()) else {
            return;
        };
        let hearing = body.flags & PROBE_FLAG_HEARING != 0;
        let p = &mut self.paths[pid as usize];
        match h.packet_type() {
            PacketType::Probe => {
                p.echo_due = Some((h.timestamp_ns(), now));
                p.on_peer_report(body.rx_packets, body.rx_path_seq, hearing);
            }
            PacketType::Echo => {
                // The echo answers our probe: the peer hears us by definition.
                p.on_peer_report(body.rx_packets, body.rx_path_seq, true);
                let now_wall = (now as i64).wrapping_add(self.wall_offset) as u64;
                let rtt = now_wall
                    .wrapping_sub(body.echo_timestamp_ns)
                    .saturating_sub(body.hold_ns);
                // Ignore absurd samples (clock steps, forged echoes): > 60 s.
                if rtt < 60_000 * crate::NANOS_PER_MS {
                    p.on_rtt_sample(rtt);
                }
            }
            PacketType::Data => {}
        }
        self.policy.on_frontier(pid, h.tunnel_seq());
        self.refresh_up(pid, now);
        self.apply_policy();
    }

    /// Re-evaluate whether path `pid` is up, emitting events on change.
    fn refresh_up(&mut self, pid: PathId, now: Nanos) {
        let p = &mut self.paths[pid as usize];
        let hearing = p.hearing(now);
        let up = hearing && p.peer_hears_us && !p.send_blocked;
        if up == p.up {
            return;
        }
        p.up = up;
        self.up[pid as usize] = up;
        if up {
            p.ups += 1;
            self.events.push_back(Event::PathUp { path: pid });
        } else {
            p.downs += 1;
            let reason = if hearing {
                "peer stopped hearing us"
            } else {
                "silent for dead interval"
            };
            self.events.push_back(Event::PathDown { path: pid, reason });
            if !self.up.iter().any(|u| *u) {
                self.events.push_back(Event::AllPathsDown);
            }
        }
    }

    /// Next inner packet released by the reorder buffer, in order.
    pub fn poll_deliver(&mut self) -> Option<Vec<u8>> {
        let b = self.reorder.pop()?;
        self.counters.rx_packets += 1;
        self.counters.rx_bytes += b.len() as u64;
        Some(b)
    }

    /// Return a buffer obtained from [`Tunnel::poll_deliver`].
    pub fn recycle(&mut self, buf: Vec<u8>) {
        self.reorder.recycle(buf);
    }

    /// Write the next due control packet into `buf` (at least
    /// `HEADER_LEN + PROBE_BODY_LEN` bytes).
    pub fn poll_transmit(&mut self, now: Nanos, buf: &mut [u8]) -> Option<Transmit> {
        if buf.len() < HEADER_LEN + PROBE_BODY_LEN {
            return None;
        }
        for i in 0..self.paths.len() {
            let pid = i as PathId;
            let p = &mut self.paths[i];
            let (ty, echo_ts, hold) = if let Some((ts, arrived)) = p.echo_due.take() {
                (PacketType::Echo, ts, now.saturating_sub(arrived))
            } else if p.probe_due {
                p.probe_due = false;
                (PacketType::Probe, 0, 0)
            } else {
                continue;
            };
            let (rx_packets, rx_path_seq) = p.report();
            let flags = if p.hearing(now) {
                PROBE_FLAG_HEARING
            } else {
                0
            };
            let len = HEADER_LEN + PROBE_BODY_LEN;
            let f = self.next_fields(pid, now, 0, self.next_tunnel_seq, len);
            wire::write_header(buf, ty, &f);
            ProbeBody {
                echo_timestamp_ns: echo_ts,
                hold_ns: hold,
                rx_packets,
                rx_path_seq,
                flags,
            }
            .write(&mut buf[HEADER_LEN..]);
            let c = &self.paths[i].cfg;
            return Some(Transmit {
                path: pid,
                local_key: c.local_key,
                dst: c.remote,
                len,
            });
        }
        None
    }

    /// Earliest time at which [`Tunnel::handle_timeout`] has work.
    pub fn poll_timeout(&mut self) -> Option<Nanos> {
        let mut t = self.reorder.poll_timeout();
        for p in &self.paths {
            let mut cand = p.next_probe_at;
            if let (true, Some(rx)) = (p.up, p.last_rx) {
                cand = cand.min(rx.saturating_add(p.cfg.dead));
            }
            t = Some(t.map_or(cand, |x| x.min(cand)));
        }
        t
    }

    /// Run timers that are due at `now`.
    pub fn handle_timeout(&mut self, now: Nanos) {
        for i in 0..self.paths.len() {
            let p = &mut self.paths[i];
            if p.next_probe_at <= now {
                p.probe_due = true;
                p.next_probe_at = now + p.cfg.keepalive;
            }
            self.refresh_up(i as PathId, now);
        }
        self.reorder.handle_timeout(now);
    }

    /// Next event for the log.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Snapshot for `mpt status`.
    pub fn status(&self, now: Nanos) -> TunnelStatus {
        TunnelStatus {
            paths: self.paths.iter().map(|p| p.status(now)).collect(),
            paths_up: self.up.iter().filter(|u| **u).count(),
            scheduler: self.sched.name(),
            release_policy: self.policy.name(),
            mtu: self.mtu,
            counters: self.counters.clone(),
            reorder: ReorderStatus {
                window: self.reorder.capacity(),
                held_now: self.reorder.held(),
                next_seq: self.reorder.next_seq(),
                stats: self.reorder.stats().clone(),
            },
            drops: self.drops.iter().collect(),
        }
    }
}

/// Reorder buffer part of the status.
#[derive(Debug, Clone, Serialize)]
pub struct ReorderStatus {
    pub window: u64,
    pub held_now: usize,
    pub next_seq: u64,
    #[serde(flatten)]
    pub stats: ReorderStats,
}

/// Whole-tunnel status (the core's part of `mpt status --json`).
#[derive(Debug, Clone, Serialize)]
pub struct TunnelStatus {
    pub paths: Vec<PathStatus>,
    pub paths_up: usize,
    pub scheduler: &'static str,
    pub release_policy: &'static str,
    pub mtu: usize,
    pub counters: TunnelCounters,
    pub reorder: ReorderStatus,
    /// Drop counters by reason.
    pub drops: BTreeMap<&'static str, u64>,
}
