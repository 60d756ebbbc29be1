//! The concentrator's virtual-time world, shared by `sim_concentrator.rs`:
//! one server (whole or in shards) against many clients, each with 2 to 4
//! paths of their own delays, and a datagram heap in virtual time.
//!
//! Invariants: everything is virtual time; a datagram reaches the shard
//! its client address hashes to (as a `SO_REUSEPORT` group spreads them),
//! a server packet the shard its flow hashes to; each shard hands what is
//! not its own to the owner, as the daemon does.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::net::{Ipv4Addr, SocketAddr};

use mpt_core::concentrator::{Concentrator, Handoff};
use mpt_core::stats::DropReason;
use mpt_core::testing::{
    addr, client_addr, client_config, client_inner_addr, client_peer, concentrator_template,
};
use mpt_core::tunnel::{Received, Transmit, Tunnel, TunnelConfig};
use mpt_core::wire::HEADER_LEN;
use mpt_core::{Nanos, NANOS_PER_MS};
pub const MS: Nanos = NANOS_PER_MS;
pub const CLIENTS: u32 = 1_000;
pub const SERVER_PATHS: usize = 4;
pub const SERVER_ADDR: [u8; 4] = [10, 99, 0, 1];
/// The client configured nowhere (its handshakes must fail).
pub const STRANGER: u32 = CLIENTS;

/// An IPv4 packet from `src` to `dst` carrying (client, index), `len`
/// bytes long (at least 40).
pub fn inner_sized(src: Ipv4Addr, dst: Ipv4Addr, client: u32, idx: u64, len: usize) -> Vec<u8> {
    let len = len.max(40);
    let mut p = vec![0u8; len];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&(len as u16).to_be_bytes());
    p[8] = 64;
    p[9] = 17;
    p[12..16].copy_from_slice(&src.octets());
    p[16..20].copy_from_slice(&dst.octets());
    p[20..24].copy_from_slice(&client.to_be_bytes());
    p[24..32].copy_from_slice(&idx.to_be_bytes());
    p
}

pub fn read(p: &[u8]) -> (u32, u64) {
    (
        u32::from_be_bytes(p[20..24].try_into().unwrap()),
        u64::from_be_bytes(p[24..32].try_into().unwrap()),
    )
}

/// Where a datagram goes: the server (`None`) or a client.
pub type To = Option<u32>;
/// A datagram in flight: (arrival, tiebreak, to, path, from, bytes).
pub type InFlight = Reverse<(Nanos, u64, To, usize, SocketAddr, Vec<u8>)>;

pub struct World {
    /// The server's shards (one: the server undivided).
    pub servers: Vec<Concentrator>,
    pub clients: Vec<Tunnel>,
    pub flight: BinaryHeap<InFlight>,
    pub tiebreak: u64,
    pub timers: BinaryHeap<Reverse<(Nanos, u32)>>,
    pub deadline: Vec<Option<Nanos>>,
    /// Client address of each (client, path) for the server's replies.
    pub owner: HashMap<SocketAddr, (u32, usize)>,
    /// What the server delivered, per peer: (client in the payload, index).
    pub at_server: Vec<Vec<(u32, u64)>>,
    /// What each client delivered: indices.
    pub at_client: Vec<Vec<u64>>,
    pub dirty: Vec<u32>,
}

pub fn delay(c: u32, path: usize) -> Nanos {
    (2 + 3 * path as u64 + u64::from(c % 7)) * MS
}

impl World {
    /// `clients` clients, all configured but the last (the stranger),
    /// and a server in `shards` shards.
    pub fn with_shards(clients_n: u32, shards: usize) -> Self {
        Self::with_configs(
            clients_n,
            shards,
            &concentrator_template(SERVER_PATHS),
            &client_config,
        )
    }

    /// The same with the server's template and each client's
    /// configuration (client, paths) given.
    pub fn with_configs(
        clients_n: u32,
        shards: usize,
        template: &TunnelConfig,
        client: &dyn Fn(u32, usize) -> TunnelConfig,
    ) -> Self {
        let mut servers: Vec<Concentrator> = (0..shards)
            .map(|i| {
                let mut s = Concentrator::new(template.clone()).unwrap();
                s.set_shard(i, shards);
                s
            })
            .collect();
        let mut clients = vec![];
        let mut owner = HashMap::new();
        for c in 0..=clients_n {
            let n = 2 + (c as usize % 3);
            clients.push(Tunnel::new(client(c, n), 0));
            for i in 0..n {
                owner.insert(client_addr(c, i), (c, i));
            }
            if c != clients_n {
                for server in &mut servers {
                    assert_eq!(server.add_peer(client_peer(c)), Ok(c));
                }
            }
        }
        let n = clients.len();
        Self {
            servers,
            clients,
            flight: BinaryHeap::new(),
            tiebreak: 0,
            timers: BinaryHeap::new(),
            deadline: vec![None; n],
            owner,
            at_server: vec![vec![]; clients_n as usize + 1],
            at_client: vec![vec![]; n],
            dirty: (0..n as u32).collect(),
        }
    }

    pub fn emit(&mut self, now: Nanos, to: To, path: usize, from: SocketAddr, d: Vec<u8>) {
        let c = match to {
            Some(c) => c,
            None => self.owner[&from].0,
        };
        self.tiebreak += 1;
        let at = now + delay(c, path);
        self.flight
            .push(Reverse((at, self.tiebreak, to, path, from, d)));
    }

    pub fn client_out(&mut self, now: Nanos, c: u32, tx: Transmit, d: Vec<u8>) {
        let from = client_addr(c, tx.path as usize);
        self.emit(now, None, tx.local_key, from, d);
    }

    pub fn server_out(&mut self, now: Nanos, tx: Transmit, d: Vec<u8>) {
        let (c, path) = self.owner[&tx.dst];
        self.emit(now, Some(c), path, addr(0, tx.local_key), d);
    }

    /// Poll the clients that were driven and every busy peer of the server.
    pub fn pump(&mut self, now: Nanos) {
        let mut buf = vec![0u8; 2048];
        for c in std::mem::take(&mut self.dirty) {
            let t = &mut self.clients[c as usize];
            let mut out = vec![];
            while let Some(tx) = t.poll_transmit(now, &mut buf) {
                let mut d = buf[..tx.len].to_vec();
                if t.sealer().seal(tx.seal, &mut d) {
                    out.push((tx, d));
                }
            }
            let got = &mut self.at_client[c as usize];
            t.deliver_ready(|p| {
                got.push(read(p).1);
                Ok(())
            });
            while t.poll_event().is_some() {}
            let d = t.poll_timeout();
            if let Some(x) = d.filter(|_| d != self.deadline[c as usize]) {
                self.timers.push(Reverse((x, c)));
            }
            self.deadline[c as usize] = d;
            for (tx, d) in out {
                self.client_out(now, c, tx, d);
            }
        }
        for s in 0..self.servers.len() {
            self.pump_shard(now, s, &mut buf);
        }
    }

    pub fn pump_shard(&mut self, now: Nanos, s: usize, buf: &mut [u8]) {
        while let Some(id) = self.servers[s].next_busy() {
            assert!(self.servers[s].owns(id), "a shard drives only its own");
            let mut out = vec![];
            if let Some(t) = self.servers[s].tunnel_mut(id) {
                while let Some(tx) = t.poll_transmit(now, buf) {
                    let mut d = buf[..tx.len].to_vec();
                    if t.sealer().seal(tx.seal, &mut d) {
                        out.push((tx, d));
                    }
                }
                while t.poll_event().is_some() {}
            }
            let got = &mut self.at_server[id as usize];
            self.servers[s].deliver_ready(id, |p| {
                got.push(read(p));
                Ok(())
            });
            self.servers[s].rearm(id);
            for (tx, d) in out {
                self.server_out(now, tx, d);
            }
        }
        // Cookie replies of the concentrator's guard (under load).
        while let Some((socket, dst, d)) = self.servers[s].poll_transmit() {
            let (c, path) = self.owner[&dst];
            self.emit(now, Some(c), path, addr(0, socket), d);
        }
        while self.servers[s].poll_event().is_some() {}
        // What this shard read for another: the owner takes it at once.
        let mut handed = false;
        while let Some(h) = self.servers[s].poll_handoff() {
            handed = true;
            let to = h.shard();
            assert_ne!(to, s, "a shard never hands off to itself");
            match h {
                Handoff::Packet { bytes, .. } => {
                    let mut b = vec![0u8; HEADER_LEN + bytes.len() + 16];
                    b[HEADER_LEN..HEADER_LEN + bytes.len()].copy_from_slice(&bytes);
                    if let Some((_, tx)) = self.servers[to].send_handed(now, &mut b, bytes.len()) {
                        b.truncate(tx.len);
                        self.server_out(now, tx, b);
                    }
                }
                Handoff::Datagram {
                    local_key,
                    from,
                    peer,
                    mut bytes,
                    ..
                } => {
                    let (p, r) =
                        self.servers[to].recv_handed(now, local_key, from, peer, &mut bytes);
                    self.record(p, r, &bytes);
                }
            }
        }
        if handed {
            for o in 0..self.servers.len() {
                if o != s {
                    self.pump_shard(now, o, buf);
                }
            }
        }
    }

    pub fn record(&mut self, peer: Option<u32>, r: Received, d: &[u8]) {
        if let Received::Deliver { offset, len } = r {
            let p = peer.expect("a delivery names its peer");
            self.at_server[p as usize].push(read(&d[offset..offset + len]));
        }
    }

    /// Which shard reads a datagram from `from` (a hash of the address).
    pub fn shard_for_datagram(&self, from: SocketAddr) -> usize {
        let h = from.port() as usize + from.ip().to_string().len();
        h % self.servers.len()
    }

    /// Which shard reads the server's packet to client `c` (by flow).
    pub fn shard_for_packet(&self, c: u32) -> usize {
        (c as usize / 3) % self.servers.len()
    }

    pub fn server_timeout(&mut self) -> Option<Nanos> {
        self.servers
            .iter_mut()
            .filter_map(|s| s.poll_timeout())
            .min()
    }

    pub fn drops(&self, r: DropReason) -> u64 {
        self.servers.iter().map(|s| s.drops().get(r)).sum()
    }

    pub fn client_deadline(&mut self) -> Option<Nanos> {
        while let Some(&Reverse((t, c))) = self.timers.peek() {
            if self.deadline[c as usize] == Some(t) {
                return Some(t);
            }
            self.timers.pop();
        }
        None
    }

    pub fn run_until(&mut self, until: Nanos) {
        let mut same = (0, 0u64);
        loop {
            let pkt = self.flight.peek().map(|Reverse(e)| e.0);
            let ct = self.client_deadline();
            let st = self.server_timeout();
            let Some(now) = [pkt, ct, st].into_iter().flatten().min() else {
                break;
            };
            if now > until {
                break;
            }
            // A timer that handle_timeout does not move is an event loop
            // that never sleeps (as in the two-tunnel harness).
            same = if same.0 == now {
                (now, same.1 + 1)
            } else {
                (now, 0)
            };
            assert!(same.1 < 100_000, "the timers stay due at {now}");
            if pkt == Some(now) {
                let Reverse((_, _, to, path, from, mut d)) = self.flight.pop().unwrap();
                match to {
                    None => {
                        let s = self.shard_for_datagram(from);
                        let (peer, r) = self.servers[s].recv(now, path, from, &mut d);
                        self.record(peer, r, &d);
                    }
                    Some(c) => {
                        let r = self.clients[c as usize].recv(now, path, from, &mut d);
                        if let Received::Deliver { offset, len } = r {
                            self.at_client[c as usize].push(read(&d[offset..offset + len]).1);
                        }
                        self.dirty.push(c);
                    }
                }
            } else if ct == Some(now) {
                let Reverse((_, c)) = self.timers.pop().unwrap();
                self.deadline[c as usize] = None;
                self.clients[c as usize].handle_timeout(now);
                self.dirty.push(c);
            } else {
                for s in &mut self.servers {
                    if s.poll_timeout().is_some_and(|t| t <= now) {
                        s.handle_timeout(now);
                    }
                }
            }
            self.pump(now);
        }
    }

    pub fn client_send(&mut self, now: Nanos, c: u32, src: Ipv4Addr, idx: u64) {
        self.client_send_sized(now, c, src, idx, 40);
    }

    pub fn client_send_sized(&mut self, now: Nanos, c: u32, src: Ipv4Addr, idx: u64, len: usize) {
        let p = inner_sized(src, Ipv4Addr::from(SERVER_ADDR), c, idx, len);
        let mut buf = vec![0u8; HEADER_LEN + p.len() + 16];
        buf[HEADER_LEN..HEADER_LEN + p.len()].copy_from_slice(&p);
        if let Some(tx) = self.clients[c as usize].send(now, &mut buf, p.len()) {
            buf.truncate(tx.len);
            self.client_out(now, c, tx, buf);
        }
        self.dirty.push(c);
    }

    pub fn server_send(&mut self, now: Nanos, c: u32, idx: u64) {
        self.server_send_sized(now, c, idx, 40);
    }

    pub fn server_send_sized(&mut self, now: Nanos, c: u32, idx: u64, len: usize) {
        let p = inner_sized(
            Ipv4Addr::from(SERVER_ADDR),
            client_inner_addr(c),
            u32::MAX,
            idx,
            len,
        );
        let mut buf = vec![0u8; HEADER_LEN + p.len() + 16];
        buf[HEADER_LEN..HEADER_LEN + p.len()].copy_from_slice(&p);
        let s = self.shard_for_packet(c);
        if let Some((peer, tx)) = self.servers[s].send(now, &mut buf, p.len()) {
            assert_eq!(peer, c, "the longest prefix names the client");
            buf.truncate(tx.len);
            self.server_out(now, tx, buf);
        }
    }
}
