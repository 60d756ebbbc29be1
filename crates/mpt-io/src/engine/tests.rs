//! The event loop without root: engines on in-memory TUN devices and
//! sockets, in virtual time. Two complete daemons' loops talk over an
//! in-memory network; batching, offload segmentation and coalescing, send
//! and write errors and timers are checked on what the fakes saw.

use std::cell::RefCell;
use std::rc::Rc;

use mpt_core::stats::DropReason;
use mpt_core::testing::{addr, TestConfig};
use mpt_core::{Nanos, NANOS_PER_MS};

use super::*;
use crate::mem::{advance, MemNet, MemPaths, MemTun, TunState, VirtualClock};
use crate::offload::tcp::tests::{hdr, super_packet};
use crate::offload::{VnetHdr, GSO_TCPV4, VNET_HDR_LEN};
use crate::workers::Engage;

const MS: Nanos = NANOS_PER_MS;

struct Side {
    engine: Engine<MemTun, MemPaths, VirtualClock>,
    tun: Rc<RefCell<TunState>>,
    paths_fail: Rc<std::cell::Cell<Option<i32>>>,
    calls: Rc<RefCell<Vec<crate::mem::SendCall>>>,
}

struct Net {
    net: MemNet,
    clock: VirtualClock,
    sides: Vec<Side>,
}

impl Net {
    /// Server (side 0) and client (side 1) with `paths` paths each.
    fn new(paths: usize, secure: bool, offload: bool) -> Self {
        Self::with_mtu(paths, secure, offload, 1500, None)
    }

    /// Like [`Net::new`], with a tunnel MTU and what one datagram carries
    /// (`None`: the MTU, nothing is cut).
    fn with_mtu(
        paths: usize,
        secure: bool,
        offload: bool,
        mtu: usize,
        datagram_body: Option<usize>,
    ) -> Self {
        let net = MemNet::default();
        let clock = VirtualClock::default();
        let sides = (0..2u8)
            .map(|s| {
                let mut cfg = TestConfig::new(s, paths).with(|c| {
                    c.mtu = mtu;
                    c.datagram_body = datagram_body;
                });
                if secure {
                    cfg = cfg.secure();
                }
                let locals = (0..paths).map(|p| addr(s, p)).collect();
                let paths = MemPaths::new(&net, &clock, locals, true);
                let tun = MemTun::new(offload, offload);
                let (state, fail, calls) = (
                    tun.state.clone(),
                    paths.fail_with.clone(),
                    paths.calls.clone(),
                );
                let workers = Workers::new(1, "test", Engage::Auto).unwrap();
                let engine = Engine::new(tun, paths, clock.clone(), cfg.tunnel(), "t", workers);
                Side {
                    engine,
                    tun: state,
                    paths_fail: fail,
                    calls,
                }
            })
            .collect();
        Self { net, clock, sides }
    }

    /// One turn of each loop with every source ready, until all ran dry.
    fn turn_all(&mut self) {
        for s in &mut self.sides {
            let mut ready = Ready::all(s.engine.paths.sockets());
            let mut turns = 0;
            while ready.any() && turns < 100 {
                s.engine.turn(&mut ready);
                turns += 1;
            }
        }
    }

    /// Run both loops in virtual time until `until`: jump to the next
    /// arrival or timer, turn, repeat.
    fn run_until(&mut self, until: Nanos) {
        for _ in 0..1_000_000 {
            self.turn_all();
            let timers: Vec<Nanos> = self
                .sides
                .iter_mut()
                .filter_map(|s| s.engine.poll_timeout())
                .collect();
            if !advance(&self.net, &self.clock, timers.into_iter(), until) {
                self.turn_all();
                return;
            }
        }
        panic!("virtual time did not advance");
    }

    fn established(&mut self) {
        self.run_until(self.clock.now() + 1_000 * MS);
        for s in &self.sides {
            assert!(s.engine.tunnel().has_session(), "handshake done");
        }
        for s in &self.sides {
            s.calls.borrow_mut().clear();
            s.tun.borrow_mut().written.clear();
        }
    }
}

/// An IPv4/UDP packet of `len` bytes carrying `idx`.
fn inner(idx: u32, len: usize) -> Vec<u8> {
    let mut p = vec![0u8; len];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&(len as u16).to_be_bytes());
    p[8] = 64;
    p[9] = 17;
    p[12..16].copy_from_slice(&[10, 99, 0, 1]);
    p[16..20].copy_from_slice(&[10, 99, 0, 2]);
    p[28..32].copy_from_slice(&idx.to_be_bytes());
    p
}

#[test]
fn two_daemons_handshake_and_carry_packets_both_ways_in_virtual_time() {
    let mut n = Net::new(2, true, false);
    n.established();
    let up: Vec<_> = (0..100).map(|i| inner(i, 200 + i as usize)).collect();
    let down: Vec<_> = (0..50).map(|i| inner(1000 + i, 1400)).collect();
    n.sides[1]
        .tun
        .borrow_mut()
        .inbound
        .extend(up.iter().cloned());
    n.sides[0]
        .tun
        .borrow_mut()
        .inbound
        .extend(down.iter().cloned());
    n.run_until(n.clock.now() + 100 * MS);
    assert_eq!(
        n.sides[0].tun.borrow().written,
        up,
        "client to server, in order"
    );
    assert_eq!(n.sides[1].tun.borrow().written, down, "server to client");
    // Sealed on the wire: no inner packet appears in clear.
    let net = n.net.0.borrow();
    let marker = &up[57][20..40];
    assert!(net
        .log
        .iter()
        .all(|w| !w.bytes.windows(20).any(|x| x == marker)));
    for s in &n.sides {
        assert_eq!(s.engine.tunnel().drops().total(), 0);
    }
}

#[test]
fn packets_larger_than_a_datagram_leave_as_fragments_and_come_back_whole() {
    let mut n = Net::with_mtu(2, true, false, 6000, Some(1400));
    n.established();
    // 200 packets of 60 to 6000 bytes: whole ones and 2 to 5 pieces, more
    // than the transmit slots hold in one batch.
    let pkts: Vec<_> = (0..200)
        .map(|i| inner(i, [60, 1400, 1401, 2800, 6000][i as usize % 5]))
        .collect();
    n.sides[1]
        .tun
        .borrow_mut()
        .inbound
        .extend(pkts.iter().cloned());
    n.run_until(n.clock.now() + 200 * MS);
    let got = n.sides[0].tun.borrow().written.clone();
    let idx = |p: &Vec<u8>| (u32::from_be_bytes(p[28..32].try_into().unwrap()), p.len());
    let got_idx: Vec<_> = got.iter().map(idx).collect();
    let want_idx: Vec<_> = pkts.iter().map(idx).collect();
    assert_eq!(got_idx, want_idx, "every packet, in order");
    assert!(got == pkts, "byte for byte");
    let st = n.sides[0].engine.tunnel().status(n.clock.now());
    assert_eq!(st.fragments.reassembled, 120);
    assert_eq!(st.fragments.rx_pieces, 40 * (2 + 3 + 5));
    let net = n.net.0.borrow();
    assert!(
        net.log.iter().all(|w| w.bytes.len() <= 24 + 1400 + 16),
        "no datagram over its room"
    );
    for s in &n.sides {
        assert_eq!(s.engine.tunnel().drops().total(), 0);
    }
}

#[test]
fn tun_reads_are_batched_into_one_send_per_socket_and_turn() {
    let mut n = Net::new(1, true, false);
    n.established();
    let pkts: Vec<_> = (0..100).map(|i| inner(i, 1000)).collect();
    n.sides[1]
        .tun
        .borrow_mut()
        .inbound
        .extend(pkts.iter().cloned());
    let mut ready = Ready::all(1);
    ready.sockets[0] = false;
    // Control packets of the handshake and the first probes went out
    // through the same batch sends (counted there too).
    let calls_before = n.sides[1].engine.io_stats().udp_send_calls;
    n.sides[1].engine.turn(&mut ready);
    assert!(ready.tun, "a full batch leaves the TUN marked ready");
    let io = n.sides[1].engine.io_stats().clone();
    assert_eq!(io.tun_reads, BATCH_PACKETS as u64);
    assert_eq!(
        io.udp_send_calls - calls_before,
        1,
        "one batch send for the batch"
    );
    assert_eq!(io.max_send_batch, BATCH_PACKETS as u64);
    {
        let calls = n.sides[1].calls.borrow();
        let data = calls.iter().find(|c| c.datagrams == BATCH_PACKETS).unwrap();
        // Equal sizes to one peer: GSO messages of up to 64 KB (two here).
        assert_eq!(data.messages, 2);
    }
    n.sides[1].engine.turn(&mut ready);
    assert!(!ready.tun, "the rest of the queue fits one batch");
    assert_eq!(n.sides[1].engine.io_stats().tun_reads, 100);
    n.run_until(n.clock.now() + 50 * MS);
    assert_eq!(n.sides[0].tun.borrow().written, pkts);
}

#[test]
fn a_tso_super_packet_is_cut_into_datagrams_and_coalesced_back() {
    let mut n = Net::new(2, true, true);
    n.established();
    let payload = 10 * 1368;
    let sp = super_packet(false, payload, 0x18);
    let h = hdr(false);
    let mut read = vec![0u8; VNET_HDR_LEN];
    h.write(&mut read);
    read.extend_from_slice(&sp);
    n.sides[1].tun.borrow_mut().inbound.push_back(read);
    n.run_until(n.clock.now() + 50 * MS);
    let io = n.sides[1].engine.io_stats();
    assert_eq!((io.tso_super_packets, io.tso_segments), (1, 10));
    let written = n.sides[0].tun.borrow().written.clone();
    assert_eq!(written.len(), 1, "the receiver wrote one GRO super-packet");
    let wh = VnetHdr::parse(&written[0]).unwrap();
    assert_eq!(wh.gso_type, GSO_TCPV4);
    let got = &written[0][VNET_HDR_LEN..];
    assert_eq!(got.len(), sp.len());
    assert_eq!(
        &got[52..],
        &sp[52..],
        "the payload came back whole, in order"
    );
    assert_eq!(n.sides[0].engine.write_stats().gro_segments, 10);
}

#[test]
fn send_errors_are_counted_and_a_hard_one_takes_the_path_out_at_once() {
    let mut n = Net::new(2, true, false);
    n.established();
    n.sides[1].paths_fail.set(Some(libc::ENETUNREACH));
    n.sides[1]
        .tun
        .borrow_mut()
        .inbound
        .extend((0..8).map(|i| inner(i, 500)));
    let mut ready = Ready::all(2);
    n.sides[1].engine.turn(&mut ready);
    let t = n.sides[1].engine.tunnel();
    assert!(t.drops().get(DropReason::SendFailed) >= 1);
    assert!(
        (0..2).any(|p| !t.path(p).unwrap().up),
        "a path the network cannot reach leaves the schedule"
    );
    // A full buffer is not hard: counted, the path stays.
    let mut m = Net::new(1, true, false);
    m.established();
    m.sides[1].paths_fail.set(Some(libc::ENOBUFS));
    m.sides[1]
        .tun
        .borrow_mut()
        .inbound
        .extend((0..8).map(|i| inner(i, 500)));
    m.sides[1].engine.turn(&mut Ready::all(1));
    let t = m.sides[1].engine.tunnel();
    assert_eq!(t.drops().get(DropReason::SendFailed), 8);
    assert!(t.path(0).unwrap().up);
}

#[test]
fn a_socket_that_refuses_for_now_holds_its_datagrams_and_sends_them_in_order_later() {
    let mut n = Net::new(1, true, false);
    n.established();
    // The socket's send buffer is full (the local interface's queue).
    n.sides[1].paths_fail.set(Some(libc::EAGAIN));
    let sent: Vec<Vec<u8>> = (0..8).map(|i| inner(i, 500)).collect();
    n.sides[1]
        .tun
        .borrow_mut()
        .inbound
        .extend(sent.iter().cloned());
    n.sides[1].engine.turn(&mut Ready::all(1));
    {
        let e = &n.sides[1].engine;
        let t = e.tunnel();
        assert_eq!(t.drops().get(DropReason::SendFailed), 0, "held, not lost");
        assert!(e.io_stats().udp_held >= 8, "{:?}", e.io_stats());
        assert!(e.io_stats().udp_hold_bytes >= 8 * 500);
        assert!(t.counters().send_held >= 8);
        assert!(t.path(0).unwrap().up, "a full buffer is not a dead path");
    }
    let mut changes = Vec::new();
    n.sides[1].engine.take_hold_changes(&mut changes);
    assert_eq!(
        changes,
        vec![(0, true)],
        "the loop asks to hear it writable"
    );
    // Writable again: the next turns send what was held, first.
    n.sides[1].paths_fail.set(None);
    n.run_until(n.clock.now() + 100 * MS);
    assert_eq!(n.sides[1].engine.io_stats().udp_hold_bytes, 0);
    n.sides[1].engine.take_hold_changes(&mut changes);
    assert_eq!(changes, vec![(0, false)]);
    let written = n.sides[0].tun.borrow().written.clone();
    assert_eq!(written, sent, "every packet, in order");
}

#[test]
fn tun_write_failures_and_oversized_reads_are_counted_drops() {
    let mut n = Net::new(1, true, false);
    n.established();
    n.sides[0].tun.borrow_mut().fail_writes = true;
    n.sides[1]
        .tun
        .borrow_mut()
        .inbound
        .extend((0..5).map(|i| inner(i, 300)));
    // One byte over the MTU: read whole, refused by the core.
    n.sides[1]
        .tun
        .borrow_mut()
        .inbound
        .push_back(inner(9, 1501));
    n.run_until(n.clock.now() + 50 * MS);
    let server = n.sides[0].engine.tunnel();
    assert_eq!(server.drops().get(DropReason::TunWriteFailed), 5);
    let client = n.sides[1].engine.tunnel();
    assert_eq!(client.drops().get(DropReason::TooBig), 1);
}

#[test]
fn timers_run_in_virtual_time_and_idle_paths_are_probed() {
    let mut n = Net::new(2, true, false);
    n.established();
    let start = n.clock.now();
    n.run_until(start + 2_000 * MS);
    let net = n.net.0.borrow();
    for p in 0..2 {
        let from_client = net
            .log
            .iter()
            .filter(|w| w.from == addr(1, p) && w.sent_at > start)
            .count();
        // Keepalive 100 ms: about 20 probes in 2 s, never a flood.
        assert!((10..=40).contains(&from_client), "path {p}: {from_client}");
    }
    drop(net);
    for s in &mut n.sides {
        let next = s.engine.poll_timeout().expect("a timer is always armed");
        assert!(next > start + 2_000 * MS - 1);
        assert!((0..2).all(|p| s.engine.tunnel().path(p).unwrap().up));
    }
}
