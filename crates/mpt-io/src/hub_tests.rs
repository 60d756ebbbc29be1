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
        Self::with_offload(false)
    }

    /// Every TUN with offloads (virtio-net headers, TSO reads, GRO writes)
    /// if `offload`.
    fn with_offload(offload: bool) -> Self {
        let net = MemNet::default();
        let clock = VirtualClock::default();
        let mut template = concentrator_template(PATHS);
        (template.mtu, template.datagram_body) = (MTU, Some(DATAGRAM_BODY));
        let mut conc = Concentrator::new(template).unwrap();
        for c in 0..CLIENTS {
            conc.add_peer(client_peer(c)).unwrap();
        }
        let tun = MemTun::new(offload, false);
        let hub_tun = tun.state.clone();
        let locals = (0..PATHS).map(|p| addr(0, p)).collect();
        let paths = MemPaths::new(&net, &clock, locals, true);
        let hub = Hub::for_concentrator(tun, paths, clock.clone(), conc, "hub");
        let clients = (0..CLIENTS)
            .map(|c| {
                let mut cfg = client_config(c, PATHS);
                (cfg.mtu, cfg.datagram_body) = (MTU, Some(DATAGRAM_BODY));
                let locals = cfg.paths.iter().map(|p| p.local).collect();
                let tun = MemTun::new(offload, false);
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

#[test]
fn with_offloads_a_hub_cuts_each_clients_super_packets_and_coalesces_theirs() {
    use crate::offload::tcp::tests::{hdr, super_packet_between};
    use crate::offload::{VnetHdr, GSO_TCPV4, VNET_HDR_LEN};
    let mut w = World::with_offload(true);
    w.run_until(1_000 * MS);
    let payload = 10 * 1368;
    let read = |sp: &[u8]| {
        let mut r = vec![0u8; VNET_HDR_LEN];
        hdr(false).write(&mut r);
        r.extend_from_slice(sp);
        r
    };
    // Down: one TSO super-packet to each client.
    let mut sent = vec![];
    for c in 0..CLIENTS {
        let sp = super_packet_between(
            false,
            payload,
            0x18,
            SERVER_INNER.octets(),
            client_inner_addr(c).octets(),
        );
        w.hub_tun.borrow_mut().inbound.push_back(read(&sp));
        sent.push(sp);
    }
    // Up: client 0 sends one to the server.
    let up = super_packet_between(
        false,
        payload,
        0x18,
        client_inner_addr(0).octets(),
        SERVER_INNER.octets(),
    );
    w.clients[0].1.borrow_mut().inbound.push_back(read(&up));
    w.run_until(w.clock.now() + 500 * MS);
    let io = w.hub.io_stats();
    assert_eq!((io.tso_super_packets, io.tso_segments), (2, 20), "{io:?}");
    for (c, (e, tun)) in w.clients.iter().enumerate() {
        let written = tun.borrow().written.clone();
        assert_eq!(written.len(), 1, "client {c} wrote one GRO super-packet");
        assert_eq!(VnetHdr::parse(&written[0]).unwrap().gso_type, GSO_TCPV4);
        let got = &written[0][VNET_HDR_LEN..];
        assert_eq!(got.len(), sent[c].len());
        assert_eq!(
            &got[52..],
            &sent[c][52..],
            "client {c}: payload whole, in order"
        );
        assert_eq!(e.write_stats().gro_segments, 10);
    }
    let written = w.hub_tun.borrow().written.clone();
    assert_eq!(written.len(), 1, "the server wrote one GRO super-packet");
    assert_eq!(&written[0][VNET_HDR_LEN + 52..], &up[52..]);
    assert_eq!(w.hub.write_stats().gro_segments, 10);
    for c in 0..CLIENTS {
        let t = w.hub.concentrator().tunnel(c).unwrap();
        assert_eq!(t.drops().total(), 0, "no drop at the server for client {c}");
    }
}
