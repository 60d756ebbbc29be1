//! A concentrator spread over cores by peer: one thread per shard, each a
//! [`Hub`] with its own concentrator shard
//! ([`mpt_core::concentrator::shard`]), its own TUN queue and its own
//! socket in each path's `SO_REUSEPORT` group.
//!
//! Shard 0 is the leader: the [`crate::hub_driver::HubDriver`] with the
//! signals, the control socket and the peer hooks (routes). The others
//! are [`Follower`]s. Between them run messages ([`ToShard`]), each with a
//! wake of the receiving loop:
//!
//! * handoffs: what a shard read for another's peer (the kernel chooses
//!   the TUN queue by flow and the socket by remote address, not by peer);
//! * control operations, sent by the leader to every shard in the same
//!   order, so that a peer gets the same id in every shard ([`Op`]), and
//!   answered on a channel of their own;
//! * liveness changes of a peer, from its owner to the leader (routes to
//!   announce);
//! * a follower's loop ending unasked (an error or a panic), to the
//!   leader, which then stops the daemon with an error: a shard's peers
//!   would otherwise go silent while the others run on.
//!
//! Invariants:
//! * a peer's packets are handled by one thread, its owner's, so they
//!   keep their order; a handoff is a FIFO message, so packets one shard
//!   reads for another keep theirs too;
//! * a shard loop blocks only in `poll`; only the leader waits for
//!   answers (bounded by [`ASK_TIMEOUT`]), and followers never wait for
//!   anyone, so no two loops can wait for each other;
//! * a message to a shard that is gone is a counted failure, not a panic.

use std::io;
use std::os::fd::AsRawFd;
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

use libc::{
    BPF_A, BPF_ABS, BPF_ALU, BPF_B, BPF_JEQ, BPF_JMP, BPF_K, BPF_LD, BPF_MOD, BPF_RET, BPF_RSH,
    BPF_W,
};
use mio::{Events, Poll, Token, Waker};
use mpt_core::concentrator::{Handoff, PeerConfig, PeerId};
use mpt_core::crypto::state::INDEX_SLOT_BITS;
use mpt_sys::steer::{attach_reuseport_cbpf, BpfInsn};
use mpt_sys::tun::Tun;
use serde_json::{json, Value};
use tracing::{info, warn};

use crate::driver::{TOKEN_SOCKET_BASE, TOKEN_TUN};
use crate::engine::{Ready, BATCH_PACKETS};
use crate::hub::Hub;
use crate::linux::{SystemClock, UdpPaths};
use crate::seam::{Clock, PathIo, TunDevice};
use crate::stop::Drain;
use crate::udp::PathSocket;
use crate::workers::{Engage, Workers};
use mpt_control::status::{HandoffDoc, IoDoc, PeerDoc, ShardPart};

/// The waker token of a shard's inbox.
pub(crate) const TOKEN_SHARD: Token = Token(5);

/// Tuning knob: how long the leader waits for a shard's answer.
pub const ASK_TIMEOUT: Duration = Duration::from_secs(2);

/// What the leader asks of every shard (or of a peer's owner).
#[derive(Debug, Clone)]
pub enum Op {
    /// Add a peer (answer: `{"id": N}` or `{"error": …}`).
    Add(PeerConfig),
    /// Remove a peer (answer: `{"was_live": bool}`).
    Remove(PeerId),
    /// Update a peer in place (a reload; answer: `{"ok": bool,
    /// "was_live": bool}`, its liveness forgotten when its prefixes or
    /// sessions changed, so that the driver announces it again).
    Update(PeerId, PeerConfig),
    /// This shard's share of `status` ([`status_part`]).
    Status,
    /// A peer in full, from its owner.
    Detail(PeerId),
    /// An operator's change to one of a peer's paths, at its owner
    /// (`pathctl.rs`; answer as `mpt path`'s).
    Path(PeerId, String, crate::pathctl::PathChange),
    /// This shard's end of a capture the leader started (`None`: stop).
    Capture(Option<crate::capture::Tap>),
}

/// A message to a shard's loop.
pub enum ToShard {
    Handoff(Handoff),
    Op(Op, mpsc::Sender<Value>),
    /// A peer became live or stopped (to the leader).
    Live(PeerId, bool),
    Stop,
    /// A follower's loop ended without being told to (to the leader):
    /// its peers are served by nobody, so the daemon stops with an error
    /// (a service manager restarts it) rather than run on without them.
    Gone(usize),
}

/// What [`ShardLink::drain`] found besides handoffs and operations.
#[derive(Debug, Default)]
pub struct Drained {
    /// Liveness reports (leader).
    pub live: Vec<(PeerId, bool)>,
    /// Told to stop (follower).
    pub stop: bool,
    /// Followers whose loops ended (leader).
    pub gone: Vec<usize>,
}

/// Tells the leader that a follower's loop ended, when dropped armed (on
/// an error or a panic; a stop disarms it).
struct GoneGuard {
    index: usize,
    to: (mpsc::Sender<ToShard>, Arc<Waker>),
    armed: bool,
}

impl Drop for GoneGuard {
    fn drop(&mut self) {
        if self.armed {
            let _ = self.to.0.send(ToShard::Gone(self.index));
            let _ = self.to.1.wake();
        }
    }
}

/// One shard's ends of the channels between shards.
pub struct ShardLink {
    index: usize,
    inbox: mpsc::Receiver<ToShard>,
    /// Every shard's inbox and waker, by index (this one's too).
    to: Vec<(mpsc::Sender<ToShard>, Arc<Waker>)>,
    /// Shards sent to since the last wake.
    unwoken: Vec<bool>,
    /// Messages to a shard whose loop is gone.
    pub send_failures: u64,
}

impl ShardLink {
    /// The links of `regs.len()` shards, a waker registered with each
    /// shard's poll registry.
    pub fn build(regs: &[&mio::Registry]) -> io::Result<Vec<ShardLink>> {
        let mut to = vec![];
        let mut inboxes = vec![];
        for r in regs {
            let (tx, rx) = mpsc::channel();
            to.push((tx, Arc::new(Waker::new(r, TOKEN_SHARD)?)));
            inboxes.push(rx);
        }
        Ok(inboxes
            .into_iter()
            .enumerate()
            .map(|(index, inbox)| ShardLink {
                index,
                inbox,
                to: to.clone(),
                unwoken: vec![false; regs.len()],
                send_failures: 0,
            })
            .collect())
    }

    pub fn index(&self) -> usize {
        self.index
    }

    pub fn count(&self) -> usize {
        self.to.len()
    }

    fn send(&mut self, shard: usize, msg: ToShard) {
        let sent = match self.to.get(shard) {
            Some((tx, _)) => tx.send(msg).is_ok(),
            None => false,
        };
        if sent {
            self.unwoken[shard] = true;
        } else {
            self.send_failures += 1;
        }
    }

    fn wake(&mut self) {
        for (i, w) in self.unwoken.iter_mut().enumerate() {
            if std::mem::take(w) {
                let _ = self.to[i].1.wake();
            }
        }
    }

    /// Hand the hub's handoffs to their shards, waking each once.
    pub fn forward<T: TunDevice, P: PathIo, C: Clock>(&mut self, hub: &mut Hub<T, P, C>) {
        while let Some(h) = hub.concentrator_mut().poll_handoff() {
            self.send(h.shard(), ToShard::Handoff(h));
        }
        self.wake();
    }

    /// Tell the leader that a peer became live or stopped.
    pub fn report_live(&mut self, changes: Vec<(PeerId, bool)>) {
        for (id, up) in changes {
            self.send(0, ToShard::Live(id, up));
        }
        self.wake();
    }

    /// Leader: ask shard `shard` (never this one) and wait for the answer.
    pub fn ask(&mut self, shard: usize, op: Op) -> Value {
        self.ask_shards(&[shard], &op).pop().unwrap_or(Value::Null)
    }

    /// Leader: ask every other shard, in shard order (all at once, then
    /// the answers in turn).
    pub fn ask_others(&mut self, op: &Op) -> Vec<Value> {
        let others = self.others();
        self.ask_shards(&others, op)
    }

    fn others(&self) -> Vec<usize> {
        (0..self.count()).filter(|&i| i != self.index).collect()
    }

    fn ask_shards(&mut self, shards: &[usize], op: &Op) -> Vec<Value> {
        let mut waits = vec![];
        for &i in shards {
            let (tx, rx) = mpsc::channel();
            self.send(i, ToShard::Op(op.clone(), tx));
            waits.push((i, rx));
        }
        self.wake();
        waits
            .into_iter()
            .map(|(i, rx)| {
                rx.recv_timeout(ASK_TIMEOUT).unwrap_or_else(|_| {
                    json!({ "error": format!("shard {i} did not answer within {ASK_TIMEOUT:?}") })
                })
            })
            .collect()
    }

    /// Stop every other shard's loop.
    pub fn stop_others(&mut self) {
        for i in self.others() {
            self.send(i, ToShard::Stop);
        }
        self.wake();
    }

    /// Take what arrived: handoffs go into the hub, operations are
    /// answered; the rest is returned.
    pub fn drain<T: TunDevice, P: PathIo, C: Clock>(&mut self, hub: &mut Hub<T, P, C>) -> Drained {
        let mut out = Drained::default();
        while let Ok(m) = self.inbox.try_recv() {
            match m {
                ToShard::Handoff(h) => hub.take_handoff(h),
                ToShard::Op(op, reply) => {
                    let mut v = answer(hub, &op);
                    if matches!(op, Op::Status) {
                        v["send_failures"] = json!(self.send_failures);
                    }
                    let _ = reply.send(v);
                }
                ToShard::Live(id, up) => out.live.push((id, up)),
                ToShard::Gone(i) => out.gone.push(i),
                ToShard::Stop => {
                    out.stop = true;
                    return out;
                }
            }
        }
        hub.settle();
        out
    }
}

/// Apply `op` to this shard's hub (the leader does it for its own share).
pub fn answer<T: TunDevice, P: PathIo, C: Clock>(hub: &mut Hub<T, P, C>, op: &Op) -> Value {
    let now = hub.clock.now();
    match op {
        Op::Add(cfg) => match hub.concentrator_mut().add_peer(cfg.clone()) {
            Ok(id) => json!({ "id": id }),
            Err(e) => json!({ "error": format!("peer {}: {e}", cfg.name) }),
        },
        Op::Remove(id) => {
            let had = hub.concentrator_mut().remove_peer(*id).is_some();
            json!({ "removed": had, "was_live": hub.forget(*id) })
        }
        Op::Update(id, cfg) => match hub.concentrator_mut().update_peer(*id, cfg.clone(), now) {
            Ok(ch) => {
                let was_live = (ch.allowed_ips || ch.psk) && hub.forget(*id);
                json!({ "ok": true, "was_live": was_live })
            }
            Err(e) => json!({ "ok": false, "error": e.to_string() }),
        },
        Op::Status => serde_json::to_value(status_part(hub)).unwrap_or(Value::Null),
        Op::Capture(tap) => {
            match (tap, hub.capture.as_mut()) {
                (Some(t), _) => hub.capture = Some(t.clone()),
                (None, Some(t)) => t.stop(),
                (None, None) => {}
            }
            json!({ "ok": true })
        }
        Op::Path(id, name, change) => match hub.concentrator_mut().tunnel_mut(*id) {
            Some(t) => {
                crate::pathctl::apply(t, name, change).unwrap_or_else(|e| json!({ "error": e }))
            }
            None => json!({ "error": "the peer has no tunnel here" }),
        },
        Op::Detail(id) => {
            let c = hub.concentrator();
            let doc = peer_doc(c, *id, now).map(|mut d| {
                d.tunnel = c.tunnel(*id).map(|t| t.status(now));
                d
            });
            serde_json::to_value(doc).unwrap_or(Value::Null)
        }
    }
}

/// One shard's share of `status`: its own peers, drops, I/O.
pub fn status_part<T: TunDevice, P: PathIo, C: Clock>(hub: &Hub<T, P, C>) -> ShardPart {
    let now = hub.clock.now();
    let c = hub.concentrator();
    let h = c.handoff_counts();
    ShardPart {
        shard: c.shard().0,
        peers: c
            .peer_ids()
            .filter(|&id| c.owns(id))
            .filter_map(|id| peer_doc(c, id, now))
            .collect(),
        drops: c
            .drops()
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(k, n)| (k.to_string(), n))
            .collect(),
        cookies_sent: c.cookies_sent(),
        session_unknown_sent: c.session_unknown_sent(),
        session_unknown_spaced: c.session_unknown_spaced(),
        tun_write_failures: hub.tun_write_failures(),
        io: IoDoc {
            io: hub.io_stats().clone(),
            writes: hub.write_stats().clone(),
        },
        handoffs: HandoffDoc {
            packets_out: h.packets_out,
            datagrams_out: h.datagrams_out,
            taken: h.taken,
        },
        send_failures: None,
        error: None,
    }
}

/// The classic BPF program that sends each datagram to its peer's shard
/// (the socket of index `slot % count` in each path's `SO_REUSEPORT`
/// group, bound in shard order): the peer slot is the top
/// [`INDEX_SLOT_BITS`] bits of the session id. A handshake initiation
/// (no session yet) is left to the kernel's hash, so the Diffie-Hellman of
/// finding its peer spreads over the shards; a datagram too short to hold
/// the fields goes to shard 0, which drops and counts it.
pub fn steering_program(count: usize) -> Vec<BpfInsn> {
    use mpt_core::wire::{PacketType, SESSION_OFFSET, TYPE_OFFSET};
    let op = |code: u32, jt: u8, jf: u8, k: u32| BpfInsn {
        code: code as u16,
        jt,
        jf,
        k,
    };
    vec![
        op(BPF_LD | BPF_B | BPF_ABS, 0, 0, TYPE_OFFSET as u32),
        // An initiation: skip to the last instruction.
        op(
            BPF_JMP | BPF_JEQ | BPF_K,
            4,
            0,
            PacketType::HandshakeInit as u32,
        ),
        op(BPF_LD | BPF_W | BPF_ABS, 0, 0, SESSION_OFFSET as u32),
        op(BPF_ALU | BPF_RSH | BPF_K, 0, 0, 32 - INDEX_SLOT_BITS),
        op(BPF_ALU | BPF_MOD | BPF_K, 0, 0, count as u32),
        op(BPF_RET | BPF_A, 0, 0, 0),
        op(BPF_RET | BPF_K, 0, 0, u32::MAX),
    ]
}

/// Attach [`steering_program`] to each path's group (`sets[shard][path]`).
pub fn steer(sets: &[Vec<PathSocket>]) -> io::Result<()> {
    let prog = steering_program(sets.len());
    for s in sets.first().into_iter().flatten() {
        attach_reuseport_cbpf(s.socket.as_raw_fd(), &prog).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("steering datagrams to shards on {}: {e}", s.local),
            )
        })?;
    }
    Ok(())
}

/// A shard other than the leader: its own loop on its own thread.
pub struct Follower {
    poll: Poll,
    hub: Hub<Tun, UdpPaths, SystemClock>,
    link: ShardLink,
    name: String,
}

impl Follower {
    /// Start shard `link.index()` on a thread of its own, with its TUN
    /// queue and path sockets registered in `poll` (the poll its link's
    /// waker was made in).
    #[allow(clippy::too_many_arguments)] // the shard's parts, as they are
    pub fn spawn(
        poll: Poll,
        tun: Tun,
        sockets: Vec<PathSocket>,
        conc: mpt_core::concentrator::Concentrator,
        name: &str,
        link: ShardLink,
        (workers, engage): (usize, Engage),
    ) -> io::Result<JoinHandle<()>> {
        let reg = poll.registry();
        crate::driver::register_io(reg, &tun, &sockets)?;
        let name = name.to_string();
        let index = link.index();
        std::thread::Builder::new()
            .name(format!("mpt-shard-{index}"))
            .spawn(move || {
                let mut guard = GoneGuard {
                    index,
                    to: link.to[0].clone(),
                    armed: true,
                };
                let paths = UdpPaths::new(sockets, 2 * BATCH_PACKETS);
                let mut hub = Hub::for_concentrator(tun, paths, SystemClock::new(), conc, &name);
                // Made here: a pool's first worker is the thread of its loop.
                match Workers::new(workers, &format!("{name}-{index}"), engage) {
                    Ok(w) => hub = hub.with_workers(w),
                    Err(e) => warn!(tunnel = %name, shard = index, "no worker pool ({e}): the shard seals and opens alone"),
                }
                let mut f = Follower {
                    poll,
                    hub,
                    link,
                    name,
                };
                match f.run() {
                    Ok(()) => guard.armed = false,
                    Err(e) => warn!(tunnel = %f.name, shard = index, "shard loop failed: {e}"),
                }
            })
    }

    fn run(&mut self) -> io::Result<()> {
        let mut events = Events::with_capacity(256);
        let mut ready = Ready::all(self.hub.paths.sockets.len());
        info!(tunnel = %self.name, shard = self.link.index(), "shard up");
        // Told to stop, a shard first sends what it queued (`crate::stop`).
        let mut stop = Drain::default();
        loop {
            if stop.active() && stop.done(self.hub.clock.now(), || self.hub.queued()) {
                return Ok(());
            }
            if stop.active() {
                ready.tun = false;
            }
            if !self
                .hub
                .wait(&mut self.poll, &mut events, ready.any(), &stop)?
            {
                continue;
            }
            for ev in events.iter() {
                match ev.token() {
                    TOKEN_TUN => ready.tun = !stop.active(),
                    TOKEN_SHARD => {
                        let told = self.link.drain(&mut self.hub).stop;
                        if told && stop.signal(self.hub.clock.now()) {
                            return Ok(());
                        }
                    }
                    Token(t) if t >= TOKEN_SOCKET_BASE => {
                        if let Some(r) = ready.sockets.get_mut(t - TOKEN_SOCKET_BASE) {
                            *r = true;
                        }
                    }
                    _ => {}
                }
            }
            self.hub.turn(&mut ready);
            self.link.forward(&mut self.hub);
            let changes = self.hub.take_changes();
            if !changes.is_empty() {
                self.link.report_live(changes);
            }
        }
    }
}

/// One peer's line of a concentrator's status: who, where, its counters.
pub(crate) fn peer_doc(
    c: &mpt_core::concentrator::Concentrator,
    id: PeerId,
    now: u64,
) -> Option<PeerDoc> {
    let p = c.peer(id)?;
    let t = c.tunnel(id);
    let st = t.map(|t| t.status(now));
    Some(PeerDoc {
        id,
        shard: c.shard_of(id),
        name: p.cfg.name.clone(),
        public_key: mpt_core::crypto::keys::encode(&p.cfg.public_key.0),
        allowed_ips: p.cfg.allowed_ips.iter().map(ToString::to_string).collect(),
        connected: t.is_some_and(|t| t.has_session()),
        paths_up: st
            .as_ref()
            .map_or(0, |s| s.paths.iter().filter(|p| p.state == "up").count()),
        paths: st.as_ref().map_or(0, |s| s.paths.len()),
        tx_packets: t.map_or(0, |t| t.counters().tx_packets),
        rx_packets: t.map_or(0, |t| t.counters().rx_packets),
        tx_bytes: t.map_or(0, |t| t.counters().tx_bytes),
        rx_bytes: t.map_or(0, |t| t.counters().rx_bytes),
        drops: t.map_or(0, |t| t.drops().total()),
        source_not_allowed: p.source_not_allowed,
        tunnel: None,
    })
}

#[cfg(test)]
#[path = "shards_tests.rs"]
mod tests;
