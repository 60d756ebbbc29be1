//! Simulation tests of restarts, handshake floods, address changes and
//! one-way failures (issue: survive restarts, floods and address changes).
//! Harness in `common/mod.rs`.

mod common;

use std::net::SocketAddr;

use common::*;
use mpt_core::crypto::keys::PrivateKey;
use mpt_core::crypto::state::CryptoStats;
use mpt_core::tunnel::{Event, Received, ReleaseKind, Tunnel};
use mpt_core::wire::{
    write_header, Header, HeaderFields, PacketType, SessionUnknownBody, HEADER_LEN,
    SESSION_UNKNOWN_BODY_LEN,
};
use mpt_core::Nanos;

/// A restarted side: same configuration, new seed (new incarnation).
fn restarted(side: u8, n: usize, now: Nanos, generation: u8) -> Tunnel {
    let mut c = config(
        side,
        n,
        ReleaseKind::PathFrontier,
        Some(security(side, true)),
    );
    c.seed[31] = c.seed[31].wrapping_add(generation);
    Tunnel::new(c, now)
}

/// Send `count` packets from `from` every `gap`; returns the end time.
fn traffic(sim: &mut Sim, from: usize, start: Nanos, count: u64, gap: Nanos, first: u64) -> Nanos {
    let mut now = start;
    for i in 0..count {
        sim.deliver_until(now);
        sim.send_data(now, from, first + i);
        sim.pump_control(now);
        now += gap;
    }
    now
}

/// Send one packet from `from`; whether it left (a path and a session).
fn send_one(sim: &mut Sim, now: Nanos, from: usize, idx: u64) -> bool {
    let pkt = inner(idx);
    let mut buf = vec![0u8; HEADER_LEN + pkt.len() + 16];
    buf[HEADER_LEN..HEADER_LEN + pkt.len()].copy_from_slice(&pkt);
    let Some(tx) = sim.t[from].send(now, &mut buf, pkt.len()) else {
        return false;
    };
    buf.truncate(tx.len);
    sim.emit(now, from, tx.path as usize, buf, Some(idx));
    true
}

#[test]
fn restarted_client_delivers_from_its_first_packet() {
    let mut sim = Sim::secure(links(&[(5, 0, 0.0), (10, 0, 0.0)]), 41, security(1, true));
    sim.deliver_until(1_000 * MS);
    // The client sends 5,000 packets, then restarts and sends again.
    let t = traffic(&mut sim, 1, 1_000 * MS, 5_000, 200_000, 0);
    sim.deliver_until(t + 100 * MS);
    assert_eq!(sim.delivered[0].len(), 5_000);
    let restart = t + 100 * MS;
    sim.t[1] = restarted(1, 2, restart, 1);
    // Send every millisecond from the restart on; what leaves before the
    // new session exists is refused at the sender (no_session).
    let mut now = restart;
    let mut sent_in_session = vec![];
    for i in 0..2_000u64 {
        sim.deliver_until(now);
        let idx = 100_000 + i;
        if send_one(&mut sim, now, 1, idx) {
            sent_in_session.push(idx);
        }
        sim.pump_control(now);
        now += MS;
    }
    sim.deliver_until(now + 500 * MS);
    let got: Vec<u64> = sim.delivered[0]
        .iter()
        .copied()
        .filter(|i| *i >= 100_000)
        .collect();
    // Every packet that left in the new session arrives, in order; so do
    // those staged while its first path came up (they left later).
    assert!(got.windows(2).all(|w| w[0] < w[1]), "in order");
    let missing = sent_in_session.iter().filter(|i| !got.contains(i)).count();
    assert_eq!(missing, 0, "every packet of the new session");
    let first = *sent_in_session.first().unwrap();
    let outage = (first - 100_000) * MS;
    println!(
        "client restart: first packet of the new session sent {} ms after the restart",
        outage / MS
    );
    assert!(outage <= 1_000 * MS);
    assert_eq!(
        count(&sim, 0, DropReason::Duplicate) + count(&sim, 0, DropReason::Late),
        0
    );
    let sec = sim.t[0].status(now).security.unwrap();
    assert_eq!(sec.stats.peer_restarts, 1);
}

#[test]
fn restarted_server_is_found_again_without_waiting_for_rekey() {
    let mut sim = Sim::secure(links(&[(5, 0, 0.0), (10, 0, 0.0)]), 42, security(1, true));
    sim.deliver_until(1_000 * MS);
    let t = traffic(&mut sim, 0, 1_000 * MS, 5_000, 200_000, 0);
    sim.deliver_until(t + 100 * MS);
    assert_eq!(sim.delivered[1].len(), 5_000);
    let restart = t + 100 * MS;
    sim.t[0] = restarted(0, 2, restart, 1);
    // Both sides keep sending; the client must handshake again on its own.
    let mut now = restart;
    let mut from_server = vec![];
    let mut from_client = vec![];
    let mut session_at = None;
    for i in 0..3_000u64 {
        sim.deliver_until(now);
        if sim.t[0].has_session() {
            session_at.get_or_insert(now);
        }
        // Sent now, or held for the new session (the latest packets are).
        if send_one(&mut sim, now, 0, 200_000 + i) {
            from_server.push(200_000 + i);
        }
        // What the client sends under its old session before it noticed is
        // lost with the old server; count from the new session on.
        let new_session = session_at.is_some_and(|t| now > t + 100 * MS);
        if send_one(&mut sim, now, 1, 300_000 + i) && new_session {
            from_client.push(300_000 + i);
        }
        sim.pump_control(now);
        now += MS;
    }
    sim.deliver_until(now + 500 * MS);
    let session_at = session_at.expect("the client found the restarted server");
    let outage = session_at - restart;
    println!(
        "server restart: new session {} ms after the restart",
        outage / MS
    );
    // The restarted server answers the client's first datagrams with a
    // session-unknown hint: a handshake within a few one-way delays (5 and
    // 10 ms here), not after the paths' 500 ms of silence.
    assert!(outage <= 100 * MS, "{} ms", outage / MS);
    let got: Vec<u64> = sim.delivered[1]
        .iter()
        .copied()
        .filter(|i| *i >= 200_000)
        .collect();
    // From the first packet of the new session on, nothing is missing: the
    // packets held for the session are the latest before it, and those
    // sent directly follow them.
    let first_direct = from_server[0];
    let last = *from_server.last().unwrap();
    assert!(got[0] < first_direct, "held packets went out first");
    assert_eq!(
        got,
        (got[0]..=last).collect::<Vec<u64>>(),
        "the server's new session, from its first packet"
    );
    let got: Vec<u64> = sim.delivered[0]
        .iter()
        .copied()
        .filter(|i| *i >= 300_000)
        .collect();
    assert!(from_client.iter().all(|i| got.contains(i)));
    assert_eq!(
        count(&sim, 1, DropReason::Duplicate) + count(&sim, 1, DropReason::Late),
        0
    );
    let sec = sim.t[1].status(now).security.unwrap();
    assert_eq!(sec.stats.session_unknown_handshakes, 1);
    assert_eq!(sec.stats.silence_handshakes, 0);
    assert_eq!(sec.stats.peer_restarts, 1);
    let server = sim.t[0].status(now).security.unwrap().stats;
    assert!(server.session_unknown_sent >= 1);
    // Rate limited: 20 a second, while the client sent 1,000.
    assert!(
        server.session_unknown_sent <= 25,
        "{}",
        server.session_unknown_sent
    );
}

/// A session-unknown hint (type 14) naming `index` and `counter`.
fn hint(index: u32, counter: u64) -> Vec<u8> {
    let mut b = vec![0u8; HEADER_LEN + SESSION_UNKNOWN_BODY_LEN];
    let f = HeaderFields {
        session: index,
        ..Default::default()
    };
    write_header(&mut b, PacketType::SessionUnknown, &f);
    SessionUnknownBody { counter }.write(&mut b[HEADER_LEN..]);
    b
}

/// The session and counter of the client's latest datagram to the server.
fn latest_to_server(sim: &Sim) -> (u32, u64) {
    sim.captured
        .iter()
        .rev()
        .find(|(to, _, _)| *to == 0)
        .map(|(_, _, d)| {
            let h = Header::new_checked(d).unwrap();
            (h.session(), h.counter())
        })
        .unwrap()
}

#[test]
fn session_unknown_hints_are_taken_only_for_our_session_and_a_counter_we_sent() {
    let mut sim = Sim::secure(links(&[(5, 0, 0.0)]), 44, security(1, true));
    sim.deliver_until(1_000 * MS);
    let t = traffic(&mut sim, 1, 1_000 * MS, 1_500, MS, 0);
    sim.deliver_until(t);
    // The client's latest datagram to the server: its session and counter.
    let (index, counter) = latest_to_server(&sim);
    let server = addr(0, 0);
    let got = |sim: &mut Sim, side: usize, mut d: Vec<u8>| {
        sim.t[side].recv(
            t,
            0,
            if side == 1 { server } else { sim.client_src[0] },
            &mut d,
        )
    };
    let ignored = Received::Dropped(DropReason::SessionUnknownIgnored);
    assert_eq!(
        got(&mut sim, 1, hint(index ^ 1, counter)),
        ignored,
        "another session"
    );
    assert_eq!(
        got(&mut sim, 1, hint(index, counter + 1_000)),
        ignored,
        "a counter not sent"
    );
    assert_eq!(
        got(&mut sim, 0, hint(index, counter)),
        Received::Dropped(DropReason::HandshakeUnexpected),
        "the server takes no hint"
    );
    let st = sim.t[1].status(t).security.unwrap().stats;
    assert_eq!((st.session_unknown_handshakes, st.initiations_sent), (0, 1));
    // The right session and a counter it sent: a handshake beside the
    // session, which goes on carrying data.
    assert_eq!(got(&mut sim, 1, hint(index, counter)), Received::Consumed);
    assert_eq!(got(&mut sim, 1, hint(index, counter)), Received::Consumed);
    let end = traffic(&mut sim, 1, t, 500, MS, 10_000);
    sim.deliver_until(end + 100 * MS);
    let st = sim.t[1].status(end).security.unwrap().stats;
    assert_eq!(
        st.session_unknown_handshakes, 1,
        "one handshake for both hints"
    );
    assert_eq!(st.handshakes_completed, 2);
    let after: Vec<u64> = sim.delivered[0]
        .iter()
        .copied()
        .filter(|i| *i >= 10_000)
        .collect();
    assert_eq!(after, (10_000..10_500).collect::<Vec<u64>>());
    // The new session is younger than a second: a hint for it is not taken.
    let (index, counter) = latest_to_server(&sim);
    let mut d = hint(index, counter);
    assert_eq!(sim.t[1].recv(end, 0, server, &mut d), ignored);
}

#[test]
fn silent_paths_trigger_a_handshake_with_backoff() {
    let mut sim = Sim::secure(links(&[(5, 0, 0.0)]), 43, security(1, true));
    sim.deliver_until(1_000 * MS);
    let before = sim.t[1]
        .status(1_000 * MS)
        .security
        .unwrap()
        .stats
        .initiations_sent;
    sim.links[0] = [Link {
        up: false,
        ..sim.links[0][0]
    }; 2];
    sim.deliver_until(11_000 * MS);
    let st = sim.t[1].status(11_000 * MS).security.unwrap().stats;
    let sent = st.initiations_sent - before;
    println!("10 s of silence: {sent} initiations");
    assert_eq!(st.silence_handshakes, 1);
    // 0.5 s of silence, then retries after 0.25, 0.5, 1, 1, 1 ... s.
    assert!((10..=13).contains(&sent), "{sent}");
    // The links return: a new session follows within the backoff cap.
    sim.links[0] = [Link {
        up: true,
        ..sim.links[0][0]
    }; 2];
    sim.deliver_until(16_000 * MS);
    let st = sim.t[1].status(16_000 * MS).security.unwrap().stats;
    assert_eq!(st.handshakes_completed, 2);
    let end = traffic(&mut sim, 0, 16_000 * MS, 100, MS, 0);
    sim.deliver_until(end + 200 * MS);
    assert_eq!(sim.delivered[1], (0..100).collect::<Vec<_>>());
}

/// Flood the server with initiations that pass mac1 from 20,000 spoofed
/// addresses (10 per millisecond) for 3 s while the real client starts;
/// links have `delay_ms` one way. Returns (when the client's session came
/// up, server stats, client stats, initiations sent by the attacker).
fn spoofed_flood(delay_ms: u64, seed: u64) -> (Option<Nanos>, CryptoStats, CryptoStats, u32) {
    let mut attacker_cfg = security(1, true);
    attacker_cfg.identity.private = PrivateKey::from_random([77; 32]);
    let mut attacker = Tunnel::new(
        config(1, 1, ReleaseKind::PathFrontier, Some(attacker_cfg)),
        0,
    );
    let mut buf = [0u8; 512];
    let tx = attacker.poll_transmit(0, &mut buf).unwrap();
    let init = buf[..tx.len].to_vec();
    let mut sim = Sim::secure_learning(links(&[(delay_ms, 0, 0.0)]), seed);
    let mut now = 0;
    let mut n = 0u32;
    let mut session_at = None;
    while now < 3_000 * MS {
        for _ in 0..10 {
            n += 1;
            let src = SocketAddr::from((
                [198, 18, (n >> 8) as u8, n as u8],
                1024 + (n % 20_000) as u16,
            ));
            let mut d = init.clone();
            let _ = sim.t[0].recv(now, 0, src, &mut d);
        }
        // Cookie replies to spoofed sources go nowhere; the rest travels.
        let mut out = [0u8; 512];
        while let Some(t) = sim.t[0].poll_transmit(now, &mut out) {
            if t.dst == addr(1, 0) {
                sim.emit(now, 0, t.path as usize, out[..t.len].to_vec(), None);
            }
        }
        sim.deliver_until(now);
        if sim.t[1].has_session() && session_at.is_none() {
            session_at = Some(now);
        }
        now += MS;
    }
    let server = sim.t[0].status(now).security.unwrap().stats;
    let client = sim.t[1].status(now).security.unwrap().stats;
    assert!(sim.t[0].drops().get(DropReason::HandshakeCookieSent) > 0);
    (session_at, server, client, n)
}

#[test]
fn client_completes_its_handshake_during_a_flood_of_spoofed_initiations() {
    // An attacker who knows the server's public key (so its initiations
    // pass mac1) floods from 20,000 spoofed addresses while the real
    // client starts. Under load the server answers with cookies and does
    // no Diffie-Hellman work for addresses that cannot prove themselves.
    let (session_at, st, client, n) = spoofed_flood(5, 44);
    println!(
        "flood of {n} initiations: client session after {:?} ms; server: {} cookies, {} handshake failures (Diffie-Hellman work), client cookies {}",
        session_at.map(|t| t / MS), st.cookies_sent, st.handshake_failures, client.cookies_received
    );
    let at = session_at.expect("the real client got its session during the flood");
    assert!(at <= 100 * MS, "{} ms", at / MS);
    assert!(client.cookies_received >= 1);
    assert!(st.cookies_sent as u32 >= n * 9 / 10);
    // Diffie-Hellman work stays within the load threshold: a burst of 10,
    // then 10 per second (3 s here).
    assert!(st.handshake_failures <= 40, "{}", st.handshake_failures);
}

#[test]
fn slow_cookie_replies_pace_the_retries_instead_of_being_outrun() {
    // 400 ms each way (a long queue at a flooded server, or a satellite
    // hop): every answer arrives after the 250 ms base retry. A cookie
    // reply to an initiation that was already replaced is still used, and
    // the retries then wait for twice the cookie's round trip, so the
    // initiation with mac2 is answered before it is replaced.
    let (session_at, _, client, _) = spoofed_flood(400, 46);
    println!(
        "400 ms one way: client session after {:?} ms, {} initiations, {} cookies",
        session_at.map(|t| t / MS),
        client.initiations_sent,
        client.cookies_received
    );
    let at = session_at.expect("a session despite the slow answers");
    // Two round trips (cookie, then handshake): no answer was outrun.
    assert!(at <= 1_700 * MS, "{} ms", at / MS);
    assert!(client.cookies_received >= 1);
}

#[test]
fn spoofed_or_relayed_packets_do_not_move_a_learning_path() {
    // Attack 1: packets the server never received (lost after the
    // attacker's vantage point), replayed from the attacker's address.
    let attacker: SocketAddr = "203.0.113.66:6666".parse().unwrap();
    let mut sim = Sim::secure_learning(links(&[(5, 0, 0.0)]), 45);
    sim.deliver_until(1_000 * MS);
    let real = sim.t[0].path(0).unwrap().remote.unwrap();
    let mut now = 1_000 * MS;
    let mut withheld = vec![];
    for i in 0..20 {
        let pkt = inner(i);
        let mut b = vec![0u8; HEADER_LEN + pkt.len() + 16];
        b[HEADER_LEN..HEADER_LEN + pkt.len()].copy_from_slice(&pkt);
        let tx = sim.t[1].send(now, &mut b, pkt.len()).unwrap();
        b.truncate(tx.len);
        withheld.push(b); // lost after the attacker saw it
        now += MS;
    }
    for mut d in withheld {
        assert!(matches!(
            sim.t[0].recv(now, 0, attacker, &mut d),
            Received::Deliver { .. } | Received::Consumed
        ));
    }
    sim.pump_control(now);
    sim.deliver_until(now + 2_000 * MS);
    assert_eq!(
        sim.t[0].path(0).unwrap().remote,
        Some(real),
        "attack 1 moved the path"
    );
    // Attack 2: a relay with a faster route copies every datagram of the
    // client and sends it first, from its own address; the challenge it
    // is sent can reach the client, whose answer comes from the real
    // address, not the relay's.
    let mut now = now + 2_000 * MS;
    for i in 0..500u64 {
        sim.deliver_until(now);
        let pkt = inner(1_000 + i);
        let mut b = vec![0u8; HEADER_LEN + pkt.len() + 16];
        b[HEADER_LEN..HEADER_LEN + pkt.len()].copy_from_slice(&pkt);
        if let Some(tx) = sim.t[1].send(now, &mut b, pkt.len()) {
            b.truncate(tx.len);
            let mut copy = b.clone();
            let _ = sim.t[0].recv(now, 0, attacker, &mut copy);
            sim.emit(now, 1, 0, b, None);
        }
        sim.pump_control(now);
        assert_eq!(
            sim.t[0].path(0).unwrap().remote,
            Some(real),
            "attack 2 moved the path"
        );
        now += MS;
    }
    sim.deliver_until(now + 1_000 * MS);
    assert_eq!(sim.t[0].path(0).unwrap().remote, Some(real));
    assert!(!sim
        .events
        .iter()
        .any(|e| matches!(e.2, Event::RemoteChanged { to, .. } if to == attacker)));
    assert!(sim.t[0].drops().get(DropReason::PathValidationFailed) > 0);
    // The real peer moving (NAT rebinding) still works: validated, moved.
    let moved: SocketAddr = "192.0.2.77:40001".parse().unwrap();
    sim.client_src[0] = moved;
    let end = traffic(&mut sim, 1, now + 1_000 * MS, 50, MS, 5_000);
    sim.deliver_until(end + 500 * MS);
    assert_eq!(sim.t[0].path(0).unwrap().remote, Some(moved));
}

#[test]
fn configured_remote_never_changes() {
    let mut sim = Sim::secure(links(&[(5, 0, 0.0)]), 46, security(1, true));
    sim.deliver_until(1_000 * MS);
    let configured = sim.t[0].path(0).unwrap().remote;
    sim.client_src[0] = "192.0.2.88:1".parse().unwrap();
    let end = traffic(&mut sim, 1, 1_000 * MS, 50, MS, 0);
    sim.deliver_until(end + 500 * MS);
    assert_eq!(sim.t[0].path(0).unwrap().remote, configured);
    assert!(count(&sim, 0, DropReason::UnknownSource) >= 50);
}

#[test]
fn one_way_failure_is_found_fast_and_the_working_direction_kept() {
    let mut sim = Sim::secure(links(&[(5, 0, 0.0), (5, 0, 0.0)]), 47, security(1, true));
    sim.deliver_until(1_000 * MS);
    let t = traffic(&mut sim, 0, 1_000 * MS, 500, MS, 0);
    // Path 1 fails from the client to the server only.
    sim.links[1][1].up = false;
    let cut = t;
    let before = sim.sent_on_path.clone();
    let t = traffic(&mut sim, 0, t, 2_000, MS, 500);
    sim.deliver_until(t + 500 * MS);
    let down = sim
        .events
        .iter()
        .find(|(at, side, e)| {
            *at >= cut && *side == 1 && matches!(e, Event::PathDown { path: 1, .. })
        })
        .expect("the client stops sending into the broken direction")
        .0;
    println!(
        "one-way failure found by the sender after {} ms",
        (down - cut) / MS
    );
    assert!(down - cut <= 300 * MS, "{} ms", (down - cut) / MS);
    // The server still sends on path 1, whose server→client direction works.
    assert!(!sim.events.iter().any(|(at, side, e)| *at >= cut
        && *side == 0
        && matches!(e, Event::PathDown { path: 1, .. })));
    assert!(
        sim.sent_on_path[1] - before[1] > 500,
        "{:?} {:?}",
        before,
        sim.sent_on_path
    );
    assert_in_order_exactly_once(&sim.delivered[1], 2_500, &sim.lost_data);
}
