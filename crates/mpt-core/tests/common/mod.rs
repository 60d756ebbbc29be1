#![allow(dead_code)] // each test file uses a part
//! The virtual-time simulation shared by the simulation tests: two
//! [`Tunnel`]s joined by N simulated paths.
//!
//! Deterministic simulated network in virtual time.
//!
//! Two [`Tunnel`]s are joined by N simulated paths, each with its own delay,
//! jitter and loss, and FIFO per direction (as a real link is). Time is
//! virtual: the simulation jumps from one event to the next, so the tests are
//! exact and fast. A seeded xorshift generator makes every run identical.
//!
//! What is checked: every inner packet that the links did not lose is
//! delivered exactly once and in order; paths die and return as their links
//! do; traffic moves to the surviving paths.

pub mod capacity;
pub mod tcp;
pub mod trace;

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::SocketAddr;

use mpt_core::crypto::state::SecurityConfig;
pub use mpt_core::stats::DropReason;
use mpt_core::tunnel::{Carries, Event, Received, ReleaseKind, Tunnel, TunnelConfig};
use mpt_core::wire::HEADER_LEN;
use mpt_core::{Nanos, NANOS_PER_MS};

pub const MS: Nanos = NANOS_PER_MS;
/// Most events handled at one virtual instant (packets arriving together
/// and the timers they arm) before the simulation calls it a spin.
const SAME_INSTANT_MAX: u64 = 100_000;

pub struct Rng(u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn chance(&mut self, p: f64) -> bool {
        (self.next() % 1_000_000) as f64 / 1_000_000.0 < p
    }
}

#[derive(Clone, Copy)]
pub struct Link {
    pub delay: Nanos,
    pub jitter: Nanos,
    pub loss: f64,
    pub up: bool,
    /// A bottleneck before the delay: its rate (0: none) and how long its
    /// drop-tail queue may be, as time at that rate.
    pub rate_mbit: f64,
    pub queue_ns: Nanos,
}

pub use mpt_core::testing::{addr, security, TestConfig};

pub fn tunnel(side: u8, n: usize, release: ReleaseKind) -> Tunnel {
    tunnel_with(side, n, release, None)
}

pub fn tunnel_with(
    side: u8,
    n: usize,
    release: ReleaseKind,
    sec: Option<SecurityConfig>,
) -> Tunnel {
    Tunnel::new(config(side, n, release, sec), 0)
}

pub fn config(
    side: u8,
    n: usize,
    release: ReleaseKind,
    sec: Option<SecurityConfig>,
) -> TunnelConfig {
    let c = TestConfig::new(side, n).release(release);
    match sec {
        Some(s) => c.security(s).config(),
        None => c.config(),
    }
}

/// A fake IPv4 packet carrying its index.
pub fn inner(idx: u64) -> Vec<u8> {
    let mut p = vec![0u8; 60];
    p[0] = 0x45;
    p[20..28].copy_from_slice(&idx.to_be_bytes());
    p
}

/// A fake IPv4 packet of `len` bytes (at least 60) carrying its index,
/// every byte after it a function of index and position.
pub fn big_inner(idx: u64, len: usize) -> Vec<u8> {
    let mut p = inner(idx);
    p.resize(len.max(60), 0);
    for (i, b) in p.iter_mut().enumerate().skip(28) {
        *b = (idx as usize).wrapping_mul(31).wrapping_add(i) as u8;
    }
    p
}

/// Whether a delivered packet is the one [`big_inner`] made for its index
/// (60-byte packets from [`inner`] are taken as they are).
pub fn intact(p: &[u8]) -> bool {
    p.len() <= 60 || p == big_inner(index_of(p), p.len()).as_slice()
}

pub fn index_of(p: &[u8]) -> u64 {
    u64::from_be_bytes(p[20..28].try_into().unwrap())
}

/// A datagram in flight: (arrival, tiebreak, to side, path, bytes).
pub type InFlight = Reverse<(Nanos, u64, usize, usize, Vec<u8>)>;

pub struct Sim {
    pub t: [Tunnel; 2],
    pub links: Vec<[Link; 2]>,
    pub queue: BinaryHeap<InFlight>,
    pub last_arrival: Vec<[Nanos; 2]>,
    /// Per link direction: when its bottleneck is free again.
    pub busy_until: Vec<[Nanos; 2]>,
    /// Data bytes that arrived, per link direction.
    pub arrived_bytes: Vec<[u64; 2]>,
    pub tiebreak: u64,
    pub rng: Rng,
    pub delivered: Vec<Vec<u64>>,
    pub lost_data: Vec<u64>,
    pub events: Vec<(Nanos, usize, Event)>,
    pub sent_on_path: Vec<u64>,
    /// Source address the server sees for the client's packets on a path.
    pub client_src: Vec<SocketAddr>,
    /// Unexpected drops at the receivers (side, reason).
    pub drops_seen: Vec<(usize, mpt_core::stats::DropReason)>,
    /// Every datagram that crossed a link, for replay experiments.
    pub captured: Vec<(usize, usize, Vec<u8>)>,
    /// Every datagram a side handed to a link, lost or not: (time, from
    /// side, link, bytes, data index), to model a bottleneck after the
    /// fact.
    pub departures: Vec<(Nanos, usize, usize, usize, Option<u64>)>,
    /// Per side: the link each of its path ids sends on (the identity
    /// unless a side lists its paths in another order).
    pub link_of: [Vec<usize>; 2],
    /// Side 0's data packets that left its send queue: (index, outer TOS).
    pub queued_tos: Vec<(u64, u8)>,
    /// Delivered packets whose bytes are not [`big_inner`]'s for their
    /// index and length (checked only for packets longer than 60 bytes).
    pub corrupt: u64,
    /// Per link direction: a capacity trace replacing its rate
    /// ([`Sim::set_trace`]).
    pub traces: Vec<[Option<trace::TraceLink>; 2]>,
}

impl Sim {
    pub fn new(links: Vec<Link>, release: ReleaseKind, seed: u64) -> Self {
        let n = links.len();
        Self::with_tunnels(links, [tunnel(0, n, release), tunnel(1, n, release)], seed)
    }

    pub fn secure(links: Vec<Link>, seed: u64, client: SecurityConfig) -> Self {
        let n = links.len();
        let t = [
            tunnel_with(0, n, ReleaseKind::PathFrontier, Some(security(0, true))),
            tunnel_with(1, n, ReleaseKind::PathFrontier, Some(client)),
        ];
        Self::with_tunnels(links, t, seed)
    }

    /// A secure pair whose server has no `remote` on its paths: it learns
    /// (and validates) the client's addresses.
    pub fn secure_learning(links: Vec<Link>, seed: u64) -> Self {
        let n = links.len();
        let t = [
            TestConfig::new(0, n).secure().learning().tunnel(),
            TestConfig::new(1, n).secure().tunnel(),
        ];
        Self::with_tunnels(links, t, seed)
    }

    pub fn with_tunnels(links: Vec<Link>, t: [Tunnel; 2], seed: u64) -> Self {
        let n = links.len();
        Sim {
            client_src: (0..n).map(|i| addr(1, i)).collect(),
            drops_seen: vec![],
            captured: vec![],
            departures: vec![],
            t,
            links: links.into_iter().map(|l| [l, l]).collect(),
            queue: BinaryHeap::new(),
            last_arrival: vec![[0, 0]; n],
            busy_until: vec![[0, 0]; n],
            arrived_bytes: vec![[0, 0]; n],
            tiebreak: 0,
            rng: Rng(seed),
            delivered: vec![vec![], vec![]],
            lost_data: vec![],
            events: vec![],
            sent_on_path: vec![0; n],
            link_of: [(0..n).collect(), (0..n).collect()],
            queued_tos: vec![],
            corrupt: 0,
            traces: (0..n).map(|_| [None, None]).collect(),
        }
    }

    /// Link `link`'s direction from side `from` follows a capacity trace.
    pub fn set_trace(&mut self, link: usize, from: usize, t: trace::TraceLink) {
        if self.traces.len() <= link {
            self.traces.resize_with(link + 1, || [None, None]);
        }
        self.traces[link][from] = Some(t);
    }

    /// The link a packet of `side` on its path `path` travels on.
    pub fn link(&self, side: usize, path: usize) -> usize {
        self.link_of[side].get(path).copied().unwrap_or(path)
    }

    pub fn emit(
        &mut self,
        now: Nanos,
        from: usize,
        path: usize,
        dgram: Vec<u8>,
        data_idx: Option<u64>,
    ) {
        self.departures
            .push((now, from, path, dgram.len(), data_idx));
        let link = self.links[path][from];
        if !link.up || self.rng.chance(link.loss) {
            if let Some(i) = data_idx {
                self.lost_data.push(i);
            }
            return;
        }
        let jitter = if link.jitter > 0 {
            self.rng.next() % link.jitter
        } else {
            0
        };
        // Links added at runtime (a test grows `links`) get their state.
        if self.busy_until.len() < self.links.len() {
            self.busy_until.resize(self.links.len(), [0, 0]);
            self.arrived_bytes.resize(self.links.len(), [0, 0]);
        }
        // The bottleneck: a drop-tail FIFO served at the link's rate, or
        // at its trace's delivery opportunities.
        let mut leaves = now;
        if let Some(t) = self.traces.get_mut(path).and_then(|t| t[from].as_mut()) {
            let Some(at) = t.enqueue(now, dgram.len()) else {
                if let Some(i) = data_idx {
                    self.lost_data.push(i);
                }
                return;
            };
            leaves = at;
        } else if link.rate_mbit > 0.0 {
            let start = now.max(self.busy_until[path][from]);
            if start - now > link.queue_ns {
                if let Some(i) = data_idx {
                    self.lost_data.push(i);
                }
                return;
            }
            let wire_ns = (dgram.len() as f64 * 8_000.0 / link.rate_mbit) as Nanos;
            self.busy_until[path][from] = start + wire_ns;
            leaves = start + wire_ns;
        }
        if data_idx.is_some() {
            self.arrived_bytes[path][from] += dgram.len() as u64;
        }
        // FIFO per link direction.
        let at = (leaves + link.delay + jitter).max(self.last_arrival[path][from]);
        self.last_arrival[path][from] = at;
        self.tiebreak += 1;
        self.queue
            .push(Reverse((at, self.tiebreak, 1 - from, path, dgram)));
    }

    pub fn send_data(&mut self, now: Nanos, from: usize, idx: u64) {
        let pkt = inner(idx);
        let mut buf = vec![0u8; HEADER_LEN + pkt.len() + 16];
        buf[HEADER_LEN..HEADER_LEN + pkt.len()].copy_from_slice(&pkt);
        if let Some(tx) = self.t[from].send(now, &mut buf, pkt.len()) {
            let link = self.link(from, tx.path as usize);
            self.sent_on_path[link] += 1;
            buf.truncate(tx.len);
            self.emit(now, from, link, buf, Some(idx));
        }
    }

    pub fn pump_control(&mut self, now: Nanos) {
        for side in 0..2 {
            // Control packets, and packets that waited in the send queue
            // (paced paths, or held for the first session).
            let mut qbuf = vec![0u8; 8192];
            while let Some(tx) = self.t[side].poll_transmit(now, &mut qbuf) {
                let link = self.link(side, tx.path as usize);
                if tx.carries == Carries::Control {
                    self.emit(now, side, link, qbuf[..tx.len].to_vec(), None);
                    continue;
                }
                let idx = index_of(&qbuf[HEADER_LEN..]);
                let mut d = qbuf[..tx.len].to_vec();
                if !self.t[side].sealer().seal(tx.seal, &mut d) {
                    continue;
                }
                if side == 0 {
                    self.sent_on_path[link] += 1;
                    self.queued_tos.push((idx, tx.tos));
                }
                self.emit(now, side, link, d, Some(idx));
            }
            while let Some(e) = self.t[side].poll_event() {
                self.events.push((now, side, e));
            }
        }
    }

    pub fn deliver_until(&mut self, until: Nanos) {
        // Timer runs at one virtual instant: a timer that handle_timeout
        // does not move is a daemon whose event loop never sleeps.
        let mut same = (0, 0u64);
        loop {
            let next_pkt = self.queue.peek().map(|Reverse(e)| e.0);
            let timers = [self.t[0].poll_timeout(), self.t[1].poll_timeout()];
            let next_timer = timers.iter().flatten().min().copied();
            let now = match (next_pkt, next_timer) {
                (Some(a), Some(b)) => a.min(b),
                (Some(a), None) => a,
                (None, Some(b)) => b,
                (None, None) => break,
            };
            if now > until {
                break;
            }
            same = if same.0 == now {
                (now, same.1 + 1)
            } else {
                (now, 0)
            };
            assert!(
                same.1 < SAME_INSTANT_MAX,
                "the timers stay due at {now}: {:?} {:?}",
                self.t[0].timer_deadlines(),
                self.t[1].timer_deadlines()
            );
            if next_pkt == Some(now) {
                let Reverse((_, _, to, path, mut dgram)) = self.queue.pop().unwrap();
                self.captured.push((to, path, dgram.clone()));
                let from = if to == 0 {
                    self.client_src[path]
                } else {
                    addr(0, path)
                };
                match self.t[to].recv(now, path, from, &mut dgram) {
                    Received::Deliver { offset, len } => {
                        let p = &dgram[offset..offset + len];
                        self.corrupt += u64::from(!intact(p));
                        self.delivered[to].push(index_of(p))
                    }
                    Received::Consumed => {}
                    Received::Dropped(r) => self.drops_seen.push((to, r)),
                }
            } else {
                for side in 0..2 {
                    self.t[side].handle_timeout(now);
                }
            }
            for side in 0..2 {
                let delivered = &mut self.delivered[side];
                let corrupt = &mut self.corrupt;
                self.t[side].deliver_ready(|p| {
                    *corrupt += u64::from(!intact(p));
                    delivered.push(index_of(p));
                    Ok(())
                });
            }
            self.pump_control(now);
        }
    }

    /// Send `count` packets from side 0 every `gap`, starting at `start`.
    pub fn run_traffic(&mut self, start: Nanos, count: u64, gap: Nanos, first_idx: u64) -> Nanos {
        let mut now = start;
        for i in 0..count {
            self.deliver_until(now);
            self.send_data(now, 0, first_idx + i);
            self.pump_control(now);
            now += gap;
        }
        now
    }
}

pub fn assert_in_order_exactly_once(delivered: &[u64], sent: u64, lost: &[u64]) {
    assert!(
        delivered.windows(2).all(|w| w[0] < w[1]),
        "out of order or duplicated"
    );
    let expected: Vec<u64> = (0..sent).filter(|i| !lost.contains(i)).collect();
    assert_eq!(delivered, expected.as_slice());
}

pub fn links(spec: &[(u64, u64, f64)]) -> Vec<Link> {
    spec.iter()
        .map(|&(d, j, l)| Link {
            delay: d * MS,
            jitter: j * MS,
            loss: l,
            up: true,
            rate_mbit: 0.0,
            queue_ns: 0,
        })
        .collect()
}

pub fn count(sim: &Sim, side: usize, r: DropReason) -> usize {
    sim.drops_seen
        .iter()
        .filter(|(s, d)| *s == side && *d == r)
        .count()
}
