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

mod concentrator_world;

use concentrator_world::*;
use mpt_core::concentrator::Concentrator;
use mpt_core::stats::DropReason;
use mpt_core::testing::{
    client_addr, client_config, client_inner_addr, client_peer, concentrator_template,
};
use mpt_core::tunnel::TunnelConfig;
use mpt_core::wire::{write_header, HeaderFields, PacketType};
use mpt_core::Nanos;
use mpt_sys::alloc::CountingAlloc;

// Counts only on a thread that asks (the memory test's).
#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

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
    restart_case(0);
}

#[test]
fn a_flood_of_unknown_sessions_does_not_hold_the_others_hints() {
    // One source sends 50 sealed datagrams of no session every 10 ms,
    // 5,000 a second against a hint budget of 40 a second, from before
    // the restart on (the budget is spent when the clients need it).
    restart_case(50);
}

/// A concentrator in two shards restarts under its 20 clients' traffic;
/// `flood` datagrams of no session come from one other source every 10
/// ms throughout, spread over the 10 ms.
fn restart_case(flood: usize) {
    const N: u32 = 20;
    const SHARDS: usize = 2;
    let mut w = World::with_shards(N, SHARDS);
    w.pump(0);
    w.run_until(1_000 * MS);
    let mut now = 1_000 * MS;
    let mut sent = 0u64;
    let mut junk_counter = 0u64;
    let mut round = |w: &mut World, now: &mut Nanos, sent: &mut u64, flooding: usize| {
        for c in 0..N {
            w.client_send(*now, c, client_inner_addr(c), *sent);
        }
        for k in 0..flooding {
            junk_counter += 1;
            let at = *now + k as Nanos * 10 * MS / flooding as Nanos;
            w.emit(at, None, 0, client_addr(N, 0), junk(junk_counter));
        }
        *sent += 1;
        w.pump(*now);
        *now += 10 * MS;
        w.run_until(*now);
    };
    while now < 2_500 * MS {
        round(&mut w, &mut now, &mut sent, flood);
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
        round(&mut w, &mut now, &mut sent, flood);
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
    let spaced: u64 = w.servers.iter().map(|s| s.session_unknown_spaced()).sum();
    println!(
        "concentrator restart, flood {flood}: {hints} hints ({spaced} spaced), every client back within {} ms",
        worst / MS
    );
    if flood > 0 {
        assert!(spaced > 0);
    }
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

/// A sealed-looking datagram of a session nobody holds.
fn junk(counter: u64) -> Vec<u8> {
    let mut d = vec![0u8; 300];
    let f = HeaderFields {
        session: 0x5eed,
        counter,
        ..Default::default()
    };
    write_header(&mut d, PacketType::Data, &f);
    d
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
