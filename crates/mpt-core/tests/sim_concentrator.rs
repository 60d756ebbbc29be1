//! A concentrator in virtual time: 1,000 clients, each with 2 to 4 paths
//! of their own delays and their own traffic, against one server.
//!
//! Checked: every client's packets reach the server in order, exactly
//! once, attributed to that client; every packet the server sends reaches
//! the right client in order; a client that sends with another client's
//! address is dropped (`source_not_allowed`) and nothing it spoofed is
//! delivered; a key that is no peer's gets no session (`unknown_peer`).
//!
//! The server may be split into shards (as the daemon runs it, a thread
//! each): datagrams reach the shard their client address hashes to (as a
//! `SO_REUSEPORT` group spreads them), the server's own packets the shard
//! their flow hashes to (as a multi-queue TUN does), and each shard hands
//! what is not its own to the owner. The same checks hold.
//!
//! Memory: a hundred peers with the daemon's defaults (loss recovery on,
//! a tunnel MTU of eight datagrams, a reorder window of 4096) carrying
//! traffic both ways take at most 4 MiB each, counted by allocator.

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
use mpt_sys::alloc::CountingAlloc;

// Counts only on a thread that asks (the memory test's).
#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

const MS: Nanos = NANOS_PER_MS;
const CLIENTS: u32 = 1_000;
const SERVER_PATHS: usize = 4;
const SERVER_ADDR: [u8; 4] = [10, 99, 0, 1];
/// The client configured nowhere (its handshakes must fail).
const STRANGER: u32 = CLIENTS;

/// An IPv4 packet from `src` to `dst` carrying (client, index), `len`
/// bytes long (at least 40).
fn inner_sized(src: Ipv4Addr, dst: Ipv4Addr, client: u32, idx: u64, len: usize) -> Vec<u8> {
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

fn read(p: &[u8]) -> (u32, u64) {
    (
        u32::from_be_bytes(p[20..24].try_into().unwrap()),
        u64::from_be_bytes(p[24..32].try_into().unwrap()),
    )
}

/// Where a datagram goes: the server (`None`) or a client.
type To = Option<u32>;
/// A datagram in flight: (arrival, tiebreak, to, path, from, bytes).
type InFlight = Reverse<(Nanos, u64, To, usize, SocketAddr, Vec<u8>)>;

struct World {
    /// The server's shards (one: the server undivided).
    servers: Vec<Concentrator>,
    clients: Vec<Tunnel>,
    flight: BinaryHeap<InFlight>,
    tiebreak: u64,
    timers: BinaryHeap<Reverse<(Nanos, u32)>>,
    deadline: Vec<Option<Nanos>>,
    /// Client address of each (client, path) for the server's replies.
    owner: HashMap<SocketAddr, (u32, usize)>,
    /// What the server delivered, per peer: (client in the payload, index).
    at_server: Vec<Vec<(u32, u64)>>,
    /// What each client delivered: indices.
    at_client: Vec<Vec<u64>>,
    dirty: Vec<u32>,
}

fn delay(c: u32, path: usize) -> Nanos {
    (2 + 3 * path as u64 + u64::from(c % 7)) * MS
}

impl World {
    /// `clients` clients, all configured but the last (the stranger),
    /// and a server in `shards` shards.
    fn with_shards(clients_n: u32, shards: usize) -> Self {
        Self::with_configs(
            clients_n,
            shards,
            &concentrator_template(SERVER_PATHS),
            &client_config,
        )
    }

    /// The same with the server's template and each client's
    /// configuration (client, paths) given.
    fn with_configs(
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

    fn emit(&mut self, now: Nanos, to: To, path: usize, from: SocketAddr, d: Vec<u8>) {
        let c = match to {
            Some(c) => c,
            None => self.owner[&from].0,
        };
        self.tiebreak += 1;
        let at = now + delay(c, path);
        self.flight
            .push(Reverse((at, self.tiebreak, to, path, from, d)));
    }

    fn client_out(&mut self, now: Nanos, c: u32, tx: Transmit, d: Vec<u8>) {
        let from = client_addr(c, tx.path as usize);
        self.emit(now, None, tx.local_key, from, d);
    }

    fn server_out(&mut self, now: Nanos, tx: Transmit, d: Vec<u8>) {
        let (c, path) = self.owner[&tx.dst];
        self.emit(now, Some(c), path, addr(0, tx.local_key), d);
    }

    /// Poll the clients that were driven and every busy peer of the server.
    fn pump(&mut self, now: Nanos) {
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

    fn pump_shard(&mut self, now: Nanos, s: usize, buf: &mut [u8]) {
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

    fn record(&mut self, peer: Option<u32>, r: Received, d: &[u8]) {
        if let Received::Deliver { offset, len } = r {
            let p = peer.expect("a delivery names its peer");
            self.at_server[p as usize].push(read(&d[offset..offset + len]));
        }
    }

    /// Which shard reads a datagram from `from` (a hash of the address).
    fn shard_for_datagram(&self, from: SocketAddr) -> usize {
        let h = from.port() as usize + from.ip().to_string().len();
        h % self.servers.len()
    }

    /// Which shard reads the server's packet to client `c` (by flow).
    fn shard_for_packet(&self, c: u32) -> usize {
        (c as usize / 3) % self.servers.len()
    }

    fn server_timeout(&mut self) -> Option<Nanos> {
        self.servers
            .iter_mut()
            .filter_map(|s| s.poll_timeout())
            .min()
    }

    fn drops(&self, r: DropReason) -> u64 {
        self.servers.iter().map(|s| s.drops().get(r)).sum()
    }

    fn client_deadline(&mut self) -> Option<Nanos> {
        while let Some(&Reverse((t, c))) = self.timers.peek() {
            if self.deadline[c as usize] == Some(t) {
                return Some(t);
            }
            self.timers.pop();
        }
        None
    }

    fn run_until(&mut self, until: Nanos) {
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

    fn client_send(&mut self, now: Nanos, c: u32, src: Ipv4Addr, idx: u64) {
        self.client_send_sized(now, c, src, idx, 40);
    }

    fn client_send_sized(&mut self, now: Nanos, c: u32, src: Ipv4Addr, idx: u64, len: usize) {
        let p = inner_sized(src, Ipv4Addr::from(SERVER_ADDR), c, idx, len);
        let mut buf = vec![0u8; HEADER_LEN + p.len() + 16];
        buf[HEADER_LEN..HEADER_LEN + p.len()].copy_from_slice(&p);
        if let Some(tx) = self.clients[c as usize].send(now, &mut buf, p.len()) {
            buf.truncate(tx.len);
            self.client_out(now, c, tx, buf);
        }
        self.dirty.push(c);
    }

    fn server_send(&mut self, now: Nanos, c: u32, idx: u64) {
        self.server_send_sized(now, c, idx, 40);
    }

    fn server_send_sized(&mut self, now: Nanos, c: u32, idx: u64, len: usize) {
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

#[test]
fn a_thousand_clients_each_get_their_own_traffic_in_order() {
    thousand_clients(1);
}

#[test]
fn a_server_in_three_shards_keeps_each_clients_traffic_in_order() {
    let w = thousand_clients(3);
    let handed: u64 = w
        .servers
        .iter()
        .map(|s| {
            let h = s.handoff_counts();
            assert!(h.packets_out + h.datagrams_out > 0, "each shard hands off");
            h.taken
        })
        .sum();
    assert!(handed > 0);
    for (i, s) in w.servers.iter().enumerate() {
        for id in s.peer_ids() {
            assert_eq!(s.tunnel(id).is_some(), s.owns(id), "shard {i}, peer {id}");
        }
    }
}

fn thousand_clients(shards: usize) -> World {
    let mut w = World::with_shards(CLIENTS, shards);
    w.pump(0);
    // Handshakes and path probes.
    w.run_until(1_000 * MS);
    let connected = (0..CLIENTS)
        .filter(|c| w.clients[*c as usize].has_session())
        .count();
    assert_eq!(connected, CLIENTS as usize, "every client has a session");
    assert!(!w.clients[STRANGER as usize].has_session());
    assert!(w.drops(DropReason::UnknownPeer) > 0);
    for s in &w.servers {
        assert_eq!(s.peer_count(), CLIENTS as usize);
    }
    // A thousand at once is a load: most came in with a cookie.
    assert!(w.servers.iter().map(|s| s.cookies_sent()).sum::<u64>() > 0);

    const PACKETS: u64 = 30;
    let mut now = 1_000 * MS;
    for k in 0..PACKETS {
        for c in 0..CLIENTS {
            w.client_send(now, c, client_inner_addr(c), k);
            w.server_send(now, c, k);
        }
        // Client 0 also tries to speak as client 1.
        w.client_send(now, 0, client_inner_addr(1), 1_000 + k);
        w.pump(now);
        now += 10 * MS;
        w.run_until(now);
    }
    w.run_until(now + 1_000 * MS);

    let want: Vec<u64> = (0..PACKETS).collect();
    for c in 0..CLIENTS {
        let got = &w.at_server[c as usize];
        assert!(
            got.iter().all(|(from, _)| *from == c),
            "peer {c} delivered another client's packet"
        );
        let idx: Vec<u64> = got.iter().map(|(_, i)| *i).collect();
        assert_eq!(
            idx, want,
            "client {c} to the server: in order, exactly once"
        );
        assert_eq!(
            w.at_client[c as usize], want,
            "the server to client {c}: in order, exactly once"
        );
    }
    let owner = &w.servers[w.servers[0].shard_of(0)];
    let spoofed = owner.peer(0).unwrap().source_not_allowed;
    assert_eq!(spoofed, PACKETS, "every spoofed packet was dropped");
    assert!(w.at_client[STRANGER as usize].is_empty());
    w
}

#[test]
fn peers_come_and_go_at_runtime_without_disturbing_the_others() {
    const N: u32 = 12;
    let mut w = World::with_shards(N, 2);
    w.pump(0);
    w.run_until(1_000 * MS);
    let mut now = 1_000 * MS;
    let mut sent = vec![0u64; N as usize + 1];
    for round in 0..40u64 {
        if round == 10 {
            // Client 3 leaves: its prefixes and sessions go.
            for s in &mut w.servers {
                assert!(s.remove_peer(3).is_some());
                assert_eq!(s.route(client_inner_addr(3).into()), None);
            }
        }
        if round == 15 {
            // The stranger (client N) is added, into the freed slot.
            for s in &mut w.servers {
                assert_eq!(s.add_peer(mpt_core::testing::client_peer(N)), Ok(3));
            }
        }
        for c in 0..=N {
            if c == 3 && round >= 10 {
                continue;
            }
            w.client_send(now, c, client_inner_addr(c), sent[c as usize]);
            sent[c as usize] += 1;
        }
        w.pump(now);
        now += 20 * MS;
        w.run_until(now);
    }
    w.run_until(now + 2_000 * MS);
    for c in (0..N).filter(|c| *c != 3) {
        let idx: Vec<u64> = w.at_server[c as usize].iter().map(|(_, i)| *i).collect();
        assert_eq!(idx, (0..40).collect::<Vec<_>>(), "client {c} undisturbed");
    }
    // The newcomer in slot 3 got through after it was added (what it sent
    // before, while it was no peer, was dropped or staged).
    let newcomer: Vec<(u32, u64)> = w.at_server[3]
        .iter()
        .copied()
        .filter(|(from, _)| *from == N)
        .collect();
    assert!(!newcomer.is_empty(), "the added peer connects");
    assert!(newcomer.windows(2).all(|x| x[0].1 < x[1].1), "in order");
    assert!(w.clients[N as usize].has_session());
}

#[test]
fn a_restarted_concentrator_is_found_again_within_round_trips() {
    const N: u32 = 20;
    const SHARDS: usize = 2;
    let mut w = World::with_shards(N, SHARDS);
    w.pump(0);
    w.run_until(1_000 * MS);
    let mut now = 1_000 * MS;
    let mut sent = 0u64;
    let round = |w: &mut World, now: &mut Nanos, sent: &mut u64| {
        for c in 0..N {
            w.client_send(*now, c, client_inner_addr(c), *sent);
        }
        *sent += 1;
        w.pump(*now);
        *now += 10 * MS;
        w.run_until(*now);
    };
    while now < 2_500 * MS {
        round(&mut w, &mut now, &mut sent);
    }
    // The server restarts: new keys for its sessions, none of the old.
    let mut template = concentrator_template(SERVER_PATHS);
    template.seed[31] ^= 1;
    w.servers = (0..SHARDS)
        .map(|i| {
            let mut s = Concentrator::new(template.clone()).unwrap();
            s.set_shard(i, SHARDS);
            for c in 0..N {
                assert_eq!(s.add_peer(client_peer(c)), Ok(c));
            }
            s
        })
        .collect();
    let restart = now;
    let before = sent;
    let mut back: Vec<Option<Nanos>> = vec![None; N as usize];
    while now < restart + 1_000 * MS {
        round(&mut w, &mut now, &mut sent);
        for c in 0..N {
            let st = w.clients[c as usize].status(now).security.unwrap().stats;
            if st.handshakes_completed >= 2 {
                back[c as usize].get_or_insert(now);
            }
        }
    }
    let hints: u64 = w.servers.iter().map(|s| s.session_unknown_sent()).sum();
    let worst = back
        .iter()
        .map(|b| b.expect("every client found the restarted server") - restart)
        .max()
        .unwrap();
    println!(
        "concentrator restart: {hints} hints, every client back within {} ms",
        worst / MS
    );
    // Each client's next datagram calls out a hint: a handshake a round
    // trip later (delays up to 17 ms one way), not after 500 ms of silence.
    assert!(worst <= 150 * MS, "{} ms", worst / MS);
    for c in 0..N {
        let st = w.clients[c as usize].status(now).security.unwrap().stats;
        assert_eq!(
            (st.session_unknown_handshakes, st.silence_handshakes),
            (1, 0)
        );
        // Everything sent a round after the client was back arrives.
        let from = before + (back[c as usize].unwrap() - restart) / (10 * MS) + 2;
        let got: Vec<u64> = w.at_server[c as usize]
            .iter()
            .map(|(_, i)| *i)
            .filter(|i| *i >= from)
            .collect();
        assert_eq!(got, (from..sent).collect::<Vec<u64>>(), "client {c}");
    }
}

/// The daemon's defaults where the test configurations differ.
fn as_deployed(mut c: TunnelConfig) -> TunnelConfig {
    c.recover = true;
    c.mtu = 11_440;
    c.datagram_body = Some(1_430);
    c.reorder_window = 4096;
    c.reorder_max_delay = 100 * MS;
    c
}

#[test]
fn a_hundred_active_peers_take_at_most_4_mib_each() {
    const N: u32 = 100;
    const MIB: f64 = (1 << 20) as f64;
    CountingAlloc::count_here(true);
    let mut w = World::with_configs(
        N,
        1,
        &as_deployed(concentrator_template(SERVER_PATHS)),
        &|c, n| as_deployed(client_config(c, n)),
    );
    w.pump(0);
    w.run_until(1_000 * MS);
    let idle = CountingAlloc::net_bytes() as f64 / f64::from(N) / MIB;
    // Three seconds of traffic both ways: every 5 ms each client and the
    // server send a packet, one in four of the tunnel MTU (eight
    // datagrams), the others of one datagram: 6.3 Mbit/s each way.
    let mut now = 1_000 * MS;
    let mut k = 0u64;
    while now < 4_000 * MS {
        let len = if k.is_multiple_of(4) { 11_440 } else { 1_400 };
        for c in 0..N {
            w.client_send_sized(now, c, client_inner_addr(c), k, len);
            w.server_send_sized(now, c, k, len);
        }
        w.pump(now);
        now += 5 * MS;
        k += 1;
        w.run_until(now);
    }
    let active = CountingAlloc::net_bytes() as f64 / f64::from(N) / MIB;
    CountingAlloc::count_here(false);
    let mut ring = 0u64;
    for c in 0..N {
        if let Some(t) = w.servers[0].tunnel_mut(c) {
            ring += t.recovery_stats().map_or(0, |r| r.ring_bytes);
        }
    }
    println!(
        "per peer, server and client together: {idle:.2} MiB connected, {active:.2} MiB \
         carrying traffic (the server's recovery rings {:.2} MiB each)",
        ring as f64 / f64::from(N) / MIB
    );
    w.run_until(now + 1_000 * MS);
    let want: Vec<u64> = (0..k).collect();
    for c in 0..N {
        let idx: Vec<u64> = w.at_server[c as usize].iter().map(|(_, i)| *i).collect();
        assert_eq!(
            idx, want,
            "client {c} to the server: in order, exactly once"
        );
        assert_eq!(w.at_client[c as usize], want, "the server to client {c}");
    }
    assert!(active <= 4.0, "{active:.2} MiB per active peer");
}
