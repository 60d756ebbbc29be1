//! The concentrator's loop without root, through the same seam as the
//! single tunnel's engine (`engine/tests.rs`): a [`Hub`] and two client
//! [`Engine`]s on in-memory TUN devices and sockets, in virtual time.
//! Checked on what the fakes saw: each client's packets reach the
//! server's TUN whole and in order, the server's reach the right client,
//! and a packet cut into pieces (the default tunnel MTU of several
//! datagrams) travels both ways.

use std::cell::RefCell;
use std::net::Ipv4Addr;
use std::rc::Rc;

use mpt_core::concentrator::Concentrator;
use mpt_core::testing::{
    addr, client_config, client_inner_addr, client_peer, concentrator_template,
};
use mpt_core::tunnel::Tunnel;
use mpt_core::{Nanos, NANOS_PER_MS};

use super::*;
use crate::engine::{Engine, Ready};
use crate::mem::{advance, MemNet, MemPaths, MemTun, TunState, VirtualClock};
use crate::workers::{Engage, Workers};

const MS: Nanos = NANOS_PER_MS;
const PATHS: usize = 2;
const CLIENTS: u32 = 2;
/// The tunnel MTU and what one datagram carries: larger packets are cut.
const MTU: usize = 4000;
const DATAGRAM_BODY: usize = 1400;
const SERVER_INNER: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 1);

/// A client's loop on the in-memory seam.
type ClientEngine = Engine<MemTun, MemPaths, VirtualClock>;

struct World {
    net: MemNet,
    clock: VirtualClock,
    hub: Hub<MemTun, MemPaths, VirtualClock>,
    hub_tun: Rc<RefCell<TunState>>,
    clients: Vec<(ClientEngine, Rc<RefCell<TunState>>)>,
}

impl World {
    fn new() -> Self {
        let net = MemNet::default();
        let clock = VirtualClock::default();
        let mut template = concentrator_template(PATHS);
        (template.mtu, template.datagram_body) = (MTU, Some(DATAGRAM_BODY));
        let mtu = template.mtu;
        let mut conc = Concentrator::new(template).unwrap();
        for c in 0..CLIENTS {
            conc.add_peer(client_peer(c)).unwrap();
        }
        let tun = MemTun::new(false, false);
        let hub_tun = tun.state.clone();
        let locals = (0..PATHS).map(|p| addr(0, p)).collect();
        let paths = MemPaths::new(&net, &clock, locals, true);
        let hub = Hub::new(tun, paths, clock.clone(), conc, mtu, "hub");
        let clients = (0..CLIENTS)
            .map(|c| {
                let mut cfg = client_config(c, PATHS);
                (cfg.mtu, cfg.datagram_body) = (MTU, Some(DATAGRAM_BODY));
                let locals = cfg.paths.iter().map(|p| p.local).collect();
                let tun = MemTun::new(false, false);
                let state = tun.state.clone();
                let paths = MemPaths::new(&net, &clock, locals, true);
                let workers = Workers::new(1, "test", Engage::Auto).unwrap();
                let tunnel = Tunnel::new(cfg, 0);
                let e = Engine::new(tun, paths, clock.clone(), tunnel, "client", workers);
                (e, state)
            })
            .collect();
        Self {
            net,
            clock,
            hub,
            hub_tun,
            clients,
        }
    }

    fn turn_all(&mut self) {
        for _ in 0..100 {
            let mut ready = Ready::all(PATHS);
            self.hub.turn(&mut ready);
            let mut busy = ready.any();
            for (e, _) in &mut self.clients {
                let mut ready = Ready::all(PATHS);
                e.turn(&mut ready);
                busy |= ready.any();
            }
            if !busy {
                return;
            }
        }
    }

    /// Run every loop until `until`: jump to the next arrival or timer.
    fn run_until(&mut self, until: Nanos) {
        for _ in 0..1_000_000 {
            self.turn_all();
            let timers: Vec<Nanos> = self
                .clients
                .iter_mut()
                .filter_map(|(e, _)| e.poll_timeout())
                .chain(self.hub.poll_timeout())
                .collect();
            if !advance(&self.net, &self.clock, timers.into_iter(), until) {
                self.turn_all();
                return;
            }
        }
        panic!("virtual time did not advance");
    }
}

/// An IPv4/UDP packet from `src` to `dst`, `len` bytes, carrying `idx`.
fn packet(src: Ipv4Addr, dst: Ipv4Addr, idx: u32, len: usize) -> Vec<u8> {
    let mut p = vec![0u8; len];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&(len as u16).to_be_bytes());
    p[8] = 64;
    p[9] = 17;
    p[12..16].copy_from_slice(&src.octets());
    p[16..20].copy_from_slice(&dst.octets());
    p[28..32].copy_from_slice(&idx.to_be_bytes());
    p
}

fn idx(p: &[u8]) -> (Ipv4Addr, u32) {
    let src = Ipv4Addr::new(p[12], p[13], p[14], p[15]);
    (src, u32::from_be_bytes(p[28..32].try_into().unwrap()))
}

#[test]
fn a_hub_carries_each_clients_packets_both_ways_in_virtual_time() {
    let mut w = World::new();
    w.run_until(1_000 * MS);
    let st = w.hub.concentrator();
    assert_eq!(st.peer_count(), CLIENTS as usize);
    for (e, _) in &w.clients {
        assert!(e.tunnel().has_session(), "each client has its session");
    }
    // Up: each client sends packets of every size, some cut in pieces.
    let mut want_up = vec![];
    for (c, (_, tun)) in w.clients.iter().enumerate() {
        let src = client_inner_addr(c as u32);
        for i in 0..60u32 {
            let p = packet(src, SERVER_INNER, i, 100 + (i as usize * 61) % (MTU - 100));
            want_up.push(idx(&p));
            tun.borrow_mut().inbound.push_back(p);
        }
    }
    // Down: the server sends each client its own.
    let mut want_down: Vec<Vec<(Ipv4Addr, u32)>> = vec![vec![]; CLIENTS as usize];
    for c in 0..CLIENTS {
        for i in 0..40u32 {
            let p = packet(
                SERVER_INNER,
                client_inner_addr(c),
                1000 + i,
                200 + (i as usize * 97) % (MTU - 200),
            );
            want_down[c as usize].push(idx(&p));
            w.hub_tun.borrow_mut().inbound.push_back(p);
        }
    }
    w.run_until(w.clock.now() + 2_000 * MS);
    let got_up: Vec<_> = w.hub_tun.borrow().written.iter().map(|p| idx(p)).collect();
    for c in 0..CLIENTS {
        let src = client_inner_addr(c);
        let mine: Vec<_> = got_up.iter().filter(|(s, _)| *s == src).copied().collect();
        let want: Vec<_> = want_up.iter().filter(|(s, _)| *s == src).copied().collect();
        assert_eq!(mine, want, "client {c}'s packets at the server, in order");
    }
    for (c, (_, tun)) in w.clients.iter().enumerate() {
        let got: Vec<_> = tun.borrow().written.iter().map(|p| idx(p)).collect();
        assert_eq!(
            got, want_down[c],
            "the server's packets at client {c}, in order"
        );
    }
    let io = w.hub.io_stats();
    assert!(io.udp_datagrams_sent > 80, "{io:?}");
    // The server's datagrams leave in batch sends, several per call.
    assert!(
        io.udp_send_calls * 2 < io.udp_datagrams_sent,
        "batched sends: {io:?}"
    );
    assert!(io.max_send_batch > 4, "{io:?}");
    for c in 0..CLIENTS {
        let t = w.hub.concentrator().tunnel(c).unwrap();
        assert!(
            t.status(w.clock.now()).fragments.tx_pieces > 0,
            "pieces went down to {c}"
        );
        assert_eq!(t.drops().total(), 0, "no drop at the server for client {c}");
    }
}
