//! The tunnel state machine: inner packets in, datagrams out, and back.
//!
//! The I/O layer drives a [`Tunnel`] with these calls, all taking `now`
//! (monotonic nanoseconds) where time matters:
//!
//! * sending — [`Tunnel::send_unsealed`] takes an inner IP packet read
//!   from the TUN, already placed at `buf[HEADER_LEN..]`, writes the header
//!   in place and returns a [`Transmit`] naming path, destination and the
//!   [`SealTicket`] to seal it with ([`Tunnel::sealer`], in parallel for a
//!   batch); [`Tunnel::send`] is the two in one; [`Tunnel::burst`] keeps
//!   the segments of one super-packet on one path (a guard);
//! * receiving — [`Tunnel::recv_start`], [`Opener::open`] and
//!   [`Tunnel::recv_finish`] (or [`Tunnel::recv`], the three in one) open a
//!   datagram in place; in-order data is delivered from the caller's
//!   buffer ([`Received::Deliver`]), early data is copied into the reorder
//!   buffer and handed out by [`Tunnel::deliver_ready`] (see `recv.rs`,
//!   `split.rs`);
//! * [`Tunnel::poll_transmit`] — everything else that leaves, in the
//!   order the wire needs it: the rest of a packet cut into pieces,
//!   control packets (handshakes, probes, echoes, reports, recovery), and
//!   packets that waited for their path (`output.rs`);
//! * [`Tunnel::poll_timeout`] / [`Tunnel::handle_timeout`] — timers
//!   (`timers.rs`);
//! * [`Tunnel::poll_event`] — events for the log (path up/down, sessions,
//!   address changes).
//!
//! Invariants:
//! * every packet that is neither transmitted nor delivered is counted under
//!   one [`DropReason`];
//! * data is only sent on paths that are up; with security on, nothing but a
//!   handshake initiation leaves without a session, and nothing is accepted
//!   that did not authenticate;
//! * nothing here blocks, allocates per in-order packet, or panics on input.

mod address;
mod control;
mod ecn;
mod fec;
pub use ecn::EcnStats;
mod config;
mod fragment;
mod handshake;
mod output;
mod pairing;
mod path_loss;
mod paths;
mod qos;
mod recovery;
mod recv;
mod release;
mod send;
mod slot;
pub use config::{ReleaseKind, SchedKind, TunnelConfig, QUEUE_MAX_BYTES, QUEUE_MAX_PACKETS};
pub use control::TAIL_PROBE_NS;
pub use output::{Carries, Seal, Transmit};
pub use qos::FILL_MARGIN_NS;
pub use send::{Burst, STAGED_MAX_PACKETS};
mod split;
mod status;
mod timers;

use std::collections::VecDeque;
use std::net::SocketAddr;

pub use fec::FecStats;
pub use recovery::RecoveryStats;
pub use split::{OpenTicket, Opener, RecvStart, SealTicket, Sealer};
pub use status::{QueueStatus, ReorderStatus, TunnelStatus};

use crate::crypto::replay::ReplayWindow;
use crate::crypto::state::{CryptoEvent, CryptoState, HandshakeRole};
use crate::crypto::TAG_LEN;
use crate::pace::{PathSender, RateControl, TargetDelay, Unpaced};
use crate::path::PathState;
use crate::qos::Qos;
use crate::queue::SendQueue;
use crate::reorder::{PathFrontier, ReleasePolicy, ReorderBuffer, ReorderStats, TimeoutOnly};
use crate::sched::{Ecf, PathView, Scheduler, SmoothWrr};
use crate::stats::{DropCounters, DropReason, TunnelCounters};
use crate::wire::{self, HeaderFields, PacketType, HEADER_LEN};
use crate::{Nanos, PathId};

/// Excess loss (over the best path's) below which weights do not move: the
/// noise of a 200-packet estimate at congestion-level loss (tuning knob).
pub const LOSS_DEAD_ZONE: f64 = 0.005;

/// Weight factor for a path losing `excess` more of its packets than the
/// best path: 1 / (1 + 100·excess)², at least 1 %. A TCP flow through the
/// tunnel sees the share-weighted mean loss of the paths; this moves traffic
/// off a lossy path fast enough that the mean stays low (2 % excess → 1/9).
/// Loss that all paths share (congestion at their bottlenecks) is not
/// excess and changes no share.
pub fn loss_weight_factor(excess: f64) -> f64 {
    let e = (excess - LOSS_DEAD_ZONE).clamp(0.0, 1.0);
    (1.0 / (1.0 + 100.0 * e).powi(2)).max(0.01)
}

/// Result of [`Tunnel::recv`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Received {
    /// `buf[offset..offset+len]` is the next inner packet: write it to the
    /// TUN now, then call [`Tunnel::deliver_ready`].
    Deliver { offset: usize, len: usize },
    /// Consumed (held for reordering, or a control packet).
    Consumed,
    /// Dropped and counted.
    Dropped(DropReason),
}

/// Something worth logging.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    PathUp {
        path: PathId,
    },
    PathDown {
        path: PathId,
        reason: &'static str,
    },
    AllPathsDown,
    /// Data sent on a path went uncovered by the peer's reports for longer
    /// than its round trips explain (`stalled: true`; what it carried last
    /// is sent again on another path), or a report covered more again
    /// (`path/stall.rs`).
    Stalled {
        path: PathId,
        stalled: bool,
    },
    /// Our receive direction of a path changed: we hear the peer on it
    /// again, or no longer (sending on it continues while the peer hears us).
    Receiving {
        path: PathId,
        up: bool,
    },
    /// A new address of the peer did not answer its path challenge; the
    /// path stays with the old address.
    ValidationFailed {
        path: PathId,
        addr: SocketAddr,
    },
    /// The peer's address on a path changed (NAT rebinding, roaming).
    RemoteChanged {
        path: PathId,
        from: Option<SocketAddr>,
        to: SocketAddr,
    },
    Security(CryptoEvent),
    /// A handshake message failed on this path from this address.
    HandshakeRejected {
        path: PathId,
        from: SocketAddr,
        reason: DropReason,
    },
    /// The peer said, on this path from this address, that it no longer
    /// holds our session (it restarted): a handshake starts at once.
    SessionUnknown {
        path: PathId,
        from: SocketAddr,
    },
    /// Our path is paired with the peer's path of the same name (its id
    /// in the peer's numbering).
    PathPaired {
        path: PathId,
        peer_path: u8,
    },
    /// The peer names its path `name` (its id `peer_path`), which we do not
    /// have; our path `path` is the one its socket and address mean, and
    /// carries it (a concentrator's clients name their paths as they like).
    PathPairedBySocket {
        path: PathId,
        peer_path: u8,
        name: String,
    },
    /// The peer names a path (its id `peer_path`) that we do not have
    /// (`ours` is `None`), or that we have on another socket than the one
    /// the peer sends it to. Its packets are dropped as `unknown_path`.
    PathMismatch {
        peer_path: u8,
        name: String,
        from: SocketAddr,
        ours: Option<PathId>,
    },
    /// A datagram for a path id not configured on the socket it came in on
    /// (`UnknownPath`: the peers list their paths in another order or
    /// number), or from an address other than the path's remote
    /// (`UnknownSource`). Raised on the 1st, 2nd, 4th, 8th, ... of each
    /// reason, so a flood cannot fill the log.
    Stray {
        reason: DropReason,
        /// The path id the datagram claimed.
        claimed_path: u8,
        local_key: usize,
        from: SocketAddr,
        /// How many of this reason so far.
        count: u64,
    },
}

/// The tunnel. See the module documentation.
pub struct Tunnel {
    /// Every path's state, one slot per path id (`slot.rs`).
    paths: Vec<slot::PathSlot>,
    /// Per path: whether it is up, as the release policy reads it (a
    /// copy of each slot's `up`, kept by its one writer, `refresh_up`).
    live: Vec<bool>,
    /// The peer's path ids paired with ours (`pairing.rs`).
    pairing: pairing::Pairing,
    /// Probes naming a path we have on another socket (log rate limit).
    mismatches: u64,
    /// Some path has been usable since the tunnel started (until then,
    /// inner packets are staged, see `send.rs`).
    first_path_up: bool,
    sched: Box<dyn Scheduler>,
    policy: Box<dyn ReleasePolicy>,
    reorder: ReorderBuffer,
    mtu: usize,
    /// Fragmentation and reassembly (`fragment.rs`).
    frag: fragment::FragState,
    /// ECN carried across the tunnel on receipt (`ecn.rs`, RFC 6040).
    ecn_in: ecn::EcnIn,
    next_tunnel_seq: u64,
    counter: u64,
    /// The last packet's transit (our clock minus the peer's), ns: where
    /// the next timestamp is widened (`recv::peer_time`).
    last_transit_ns: i64,
    wall_offset: i64,
    drops: DropCounters,
    counters: TunnelCounters,
    events: VecDeque<Event>,
    crypto: Option<CryptoState>,
    /// Handshake responses waiting to be sent: (path, destination, bytes).
    handshake_out: VecDeque<(PathId, SocketAddr, Vec<u8>)>,
    /// Path chosen for the current burst (see [`Tunnel::burst`]).
    burst_path: Option<PathId>,
    /// What the scheduler sees of each path (scratch, one per path).
    views: Vec<PathView>,
    /// Packets waiting for their path's budget.
    queue: SendQueue,
    /// Inner packets that arrived before the first session, sent once it
    /// is up (see `send.rs`).
    staged: std::collections::VecDeque<(u8, Vec<u8>)>,
    paced: bool,
    queue_max: Nanos,
    /// [`TunnelConfig::local_queue`].
    local_queue: Nanos,
    /// The path `poll_queued` looks at first (round robin).
    release_next: usize,
    /// A release of `release_next`'s waiting packets is under way.
    releasing: bool,
    adapt_to_loss: bool,
    reorder_max_delay: Nanos,
    recovery: Option<recovery::Recovery>,
    /// Forward error correction (`fec.rs`); `None`: off.
    fec: Option<fec::Fec>,
    /// The QoS stage (`qos.rs`); `None` with QoS off.
    qos: Option<Qos>,
    /// The key of the QoS flow hash (from the seed).
    qos_key: u64,
    /// Next sequence of a real-time packet (their own space).
    rt_seq: u64,
    /// Real-time sequences received (duplicates of redundant copies).
    rt_window: ReplayWindow,
    /// When [`Tunnel::handle_timeout`] last ran: deadlines up to it are done.
    timers_ran_at: Option<Nanos>,
    /// Per path: how late a packet may arrive after a later one (`release.rs`).
    late_ns: Vec<Option<Nanos>>,
    late_margin: crate::release::LateMargin,
}

/// Handshake responses and cookie replies queued at most: a flood answered
/// with cookies must not crowd out the reply to a real client within one
/// receive batch (tuning knob; each entry is at most 141 bytes).
const HANDSHAKE_OUT_MAX: usize = 256;

impl Tunnel {
    pub fn new(cfg: TunnelConfig, now: Nanos) -> Self {
        let weights: Vec<u32> = cfg.paths.iter().map(|p| p.weight).collect();
        let n = cfg.paths.len();
        let policy: Box<dyn ReleasePolicy> = match cfg.release {
            ReleaseKind::Timeout => Box::new(TimeoutOnly),
            ReleaseKind::PathFrontier => Box::new(PathFrontier::new(crate::MAX_PATHS)),
        };
        let sched: Box<dyn Scheduler> = match cfg.scheduler {
            SchedKind::Ecf => Box::new(Ecf),
            SchedKind::Wrr => Box::new(SmoothWrr::with_share(&weights, cfg.share)),
        };
        let paced = sched.paced();
        let paths = cfg
            .paths
            .into_iter()
            .map(|p| {
                let control: Box<dyn RateControl> = if paced {
                    Box::new(TargetDelay::default())
                } else {
                    Box::new(Unpaced)
                };
                let sender = PathSender::new(control, p.rate_cap_bps.filter(|_| paced));
                slot::PathSlot::new(PathState::new(p, now), sender)
            })
            .collect();
        Self {
            paths,
            live: vec![false; n],
            pairing: pairing::Pairing::default(),
            mismatches: 0,
            first_path_up: false,
            sched,
            views: vec![PathView::default(); n],
            queue: SendQueue::new(n, QUEUE_MAX_PACKETS, QUEUE_MAX_BYTES),
            staged: std::collections::VecDeque::new(),
            paced,
            queue_max: cfg.queue_max,
            local_queue: cfg.local_queue,
            release_next: 0,
            releasing: false,
            policy,
            reorder: ReorderBuffer::new(cfg.reorder_window, cfg.reorder_max_delay),
            mtu: cfg.mtu,
            frag: fragment::FragState::new(
                cfg.datagram_body.unwrap_or(cfg.mtu).clamp(
                    wire::FRAGMENT_HEADER_LEN + 1,
                    cfg.mtu.max(wire::FRAGMENT_HEADER_LEN + 1),
                ),
                cfg.mss_clamp.clone(),
            ),
            ecn_in: ecn::EcnIn::default(),
            next_tunnel_seq: 0,
            counter: 0,
            last_transit_ns: 0,
            wall_offset: 0,
            drops: DropCounters::default(),
            counters: TunnelCounters::default(),
            events: VecDeque::new(),
            crypto: cfg.security.map(|s| CryptoState::new(s, cfg.seed)),
            handshake_out: VecDeque::new(),
            burst_path: None,
            adapt_to_loss: cfg.adapt_to_loss,
            reorder_max_delay: cfg.reorder_max_delay,
            recovery: cfg.recover.then(recovery::Recovery::new),
            fec: cfg.fec.map(|(k, m)| fec::Fec::new(0, k, m)),
            qos: cfg
                .qos
                .map(|q| Qos::new(q, qos::qos_key(&cfg.seed), cfg.mtu, cfg.queue_max)),
            qos_key: qos::qos_key(&cfg.seed),
            rt_seq: 0,
            rt_window: ReplayWindow::default(),
            timers_ran_at: None,
            late_ns: Vec::new(),
            late_margin: Default::default(),
        }
    }

    /// Replace the scheduler (for experiments and tests); pacing follows
    /// the new scheduler's [`Scheduler::paced`].
    pub fn set_scheduler(&mut self, s: Box<dyn Scheduler>) {
        self.paced = s.paced();
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

    /// Largest inner packet accepted.
    pub fn mtu(&self) -> usize {
        self.mtu
    }

    pub fn path_count(&self) -> usize {
        self.paths.len()
    }
    pub fn path(&self, id: PathId) -> Option<&PathState> {
        self.paths.get(id as usize).map(|p| &p.state)
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
    /// A concentrator's guard handles load and cookies for this tunnel's
    /// handshakes (its own load check is skipped).
    pub fn set_handshake_guarded(&mut self) {
        if let Some(c) = self.crypto.as_mut() {
            c.guarded = true;
        }
    }
    /// Whether the reorder window is allocated (not before data arrives).
    pub fn reorder_allocated(&self) -> bool {
        self.reorder.is_allocated()
    }
    /// Whether this side is the server of a secure tunnel.
    fn is_responder(&self) -> bool {
        self.crypto
            .as_ref()
            .is_some_and(|c| c.role() == HandshakeRole::Responder)
    }

    /// Whether a session is established (always true in plaintext mode).
    pub fn has_session(&self) -> bool {
        self.crypto.as_ref().is_none_or(|c| c.has_session())
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

    /// Write the header for a packet of `ty` whose plaintext body occupies
    /// `buf[HEADER_LEN..HEADER_LEN + body_len]`, and return the datagram
    /// length (the tag's room included when secure) with what sealing it
    /// needs. `None`: no session or no room (counted).
    #[allow(clippy::too_many_arguments)] // the header's fields, passed as they are
    fn emit(
        &mut self,
        now: Nanos,
        path: PathId,
        ty: PacketType,
        class: u8,
        tunnel_seq: u64,
        buf: &mut [u8],
        body_len: usize,
    ) -> Option<(usize, Option<SealTicket>)> {
        let (session, counter, ticket) = match self.crypto.as_mut() {
            Some(c) => match c.seal_session(now) {
                Some((s, counter)) => {
                    let t = SealTicket {
                        session: s.local_index,
                        counter,
                    };
                    (s.remote_index, counter, Some(t))
                }
                None => {
                    self.drops.add(DropReason::NoSession);
                    return None;
                }
            },
            None => {
                let c = self.counter;
                self.counter = (c + 1) % wire::COUNTER_LIMIT;
                (0, c, None)
            }
        };
        let total = HEADER_LEN + body_len + if ticket.is_some() { TAG_LEN } else { 0 };
        if buf.len() < total {
            self.drops.add(DropReason::TooBig);
            return None;
        }
        let path_seq = self.paths[path as usize].on_transmit(total);
        if matches!(ty, PacketType::Data | PacketType::Fragment) {
            self.paths[path as usize].on_data_sent(now, path_seq);
            if class & wire::CLASS_UNORDERED == 0 {
                self.recovery_on_sent(path, path_seq, tunnel_seq);
            }
        }
        let f = HeaderFields {
            path,
            class,
            session,
            counter,
            path_seq: path_seq as u16,
            timestamp_us: wire::timestamp_us(self.wall(now)),
            tunnel_seq: tunnel_seq as u32,
        };
        wire::write_header(buf, ty, &f);
        if matches!(ty, PacketType::Data | PacketType::Fragment)
            && class & wire::CLASS_UNORDERED == 0
        {
            self.fec_on_sent(now, path, path_seq as u16, &buf[..HEADER_LEN + body_len]);
        }
        Some((total, ticket))
    }

    /// Recompute the scheduler's weights from the paths' recent loss.
    pub(super) fn adapt_weights(&mut self) {
        if !self.adapt_to_loss {
            return;
        }
        let best = self
            .paths
            .iter()
            .filter(|p| p.up)
            .map(|p| p.tx_loss_recent())
            .fold(f64::INFINITY, f64::min);
        let best = if best.is_finite() { best } else { 0.0 };
        let mut changed = false;
        for p in &mut self.paths {
            let f = loss_weight_factor(p.tx_loss_recent() - best);
            if (f - p.weight_factor).abs() > 0.02 * p.weight_factor.max(f) {
                p.weight_factor = f;
                changed = true;
            }
        }
        if changed {
            self.refresh_weights();
        }
    }

    /// The one way inner packets leave the core: hand `write` (the TUN),
    /// in order, the packet a datagram just carried in place (`arrived`:
    /// what [`Tunnel::recv_finish`] or [`Tunnel::recv_start`] said, with
    /// the datagram; a [`Received::Deliver`] is still in it), then every
    /// packet the reorder buffer releases behind it (or, with `None`,
    /// after a timer). An `Err` is counted as that drop. Returns how many
    /// packets were handed over.
    pub fn deliver(
        &mut self,
        arrived: Option<(&Received, &[u8])>,
        mut write: impl FnMut(&[u8]) -> Result<(), DropReason>,
    ) -> usize {
        let mut n = 0;
        if let Some((&Received::Deliver { offset, len }, datagram)) = arrived {
            match datagram.get(offset..offset + len).map(&mut write) {
                Some(Ok(())) => n += 1,
                Some(Err(why)) => self.drops.add(why),
                None => self.drops.add(DropReason::Truncated),
            }
        }
        n + self.deliver_released(&mut write)
    }

    /// [`Tunnel::deliver`] of what the reorder buffer releases alone.
    pub fn deliver_ready(&mut self, write: impl FnMut(&[u8]) -> Result<(), DropReason>) -> usize {
        self.deliver(None, write)
    }

    /// Next event for the log.
    pub fn poll_event(&mut self) -> Option<Event> {
        if let Some(e) = self.events.pop_front() {
            return Some(e);
        }
        self.crypto.as_mut()?.poll_event().map(Event::Security)
    }

    /// The peer's public key in its text form (base64), `None` in
    /// plaintext mode — for logs.
    pub fn peer_key_text(&self) -> Option<String> {
        self.crypto
            .as_ref()
            .map(|c| crate::crypto::keys::encode(&c.peer_public().0))
    }

    /// Whether this side starts handshakes (client) — for logs.
    pub fn is_initiator(&self) -> bool {
        self.crypto
            .as_ref()
            .is_some_and(|c| c.role() == HandshakeRole::Initiator)
    }
}
