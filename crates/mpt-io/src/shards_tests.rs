//! Tests of the shards' steering, messages and stop (`shards.rs`).

use super::*;
use crate::udp::{bind_path_socket_sets, PathBind};
use mpt_core::wire::{PacketType, HEADER_LEN, SESSION_OFFSET, TYPE_OFFSET};

fn datagram(ty: PacketType, slot: u32) -> Vec<u8> {
    let mut d = vec![0u8; HEADER_LEN + 8];
    d[TYPE_OFFSET] = ty as u8;
    let index = (slot << (32 - INDEX_SLOT_BITS)) | 0x123;
    d[SESSION_OFFSET..SESSION_OFFSET + 4].copy_from_slice(&index.to_be_bytes());
    d
}

/// Which shard's socket received a datagram (waits up to a second).
fn receiver(sets: &[Vec<PathSocket>]) -> Option<usize> {
    let mut buf = [0u8; 256];
    for _ in 0..100 {
        for (i, set) in sets.iter().enumerate() {
            if set[0].socket.recv_from(&mut buf).is_ok() {
                return Some(i);
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    None
}

#[test]
fn a_follower_that_ends_unasked_is_reported_and_a_stopped_one_is_not() {
    use crate::mem::{MemNet, MemPaths, MemTun, VirtualClock};
    use mpt_core::concentrator::Concentrator;
    use mpt_core::testing::{addr, client_peer, concentrator_template};
    let polls: Vec<Poll> = (0..3).map(|_| Poll::new().unwrap()).collect();
    let regs: Vec<&mio::Registry> = polls.iter().map(Poll::registry).collect();
    let mut links = ShardLink::build(&regs).unwrap();
    let (net, clock) = (MemNet::default(), VirtualClock::default());
    let mut conc = Concentrator::new(concentrator_template(1)).unwrap();
    conc.add_peer(client_peer(0)).unwrap();
    let paths = MemPaths::new(&net, &clock, vec![addr(0, 0)], false);
    let mut hub = Hub::for_concentrator(MemTun::new(false, false), paths, clock, conc, "t");
    let guard = |index: usize, armed: bool| GoneGuard {
        index,
        to: links[index].to[0].clone(),
        armed,
    };
    drop(guard(1, true)); // shard 1's loop failed (or panicked)
    drop(guard(2, false)); // shard 2 was told to stop
    let d = links[0].drain(&mut hub);
    assert_eq!(d.gone, vec![1]);
    assert!(!d.stop && d.live.is_empty());
    // Stop reaches every other shard.
    links[0].stop_others();
    assert!(links[1].drain(&mut hub).stop && links[2].drain(&mut hub).stop);
}

#[test]
fn datagrams_reach_the_socket_of_their_peers_shard() {
    let bind = PathBind {
        name: "a",
        local: "127.0.0.1:0".parse().unwrap(),
        interface: None,
    };
    let (sets, _) = bind_path_socket_sets(&[bind], 3).unwrap();
    let port = sets[0][0].socket.local_addr().unwrap();
    assert!(sets
        .iter()
        .all(|s| s[0].socket.local_addr().unwrap() == port));
    steer(&sets).unwrap();
    let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    for slot in [0u32, 1, 2, 3, 4, 5, 1000, 1001] {
        tx.send_to(&datagram(PacketType::Data, slot), port).unwrap();
        assert_eq!(receiver(&sets), Some(slot as usize % 3), "slot {slot}");
    }
    // An initiation names no peer yet: some shard gets it.
    tx.send_to(&datagram(PacketType::HandshakeInit, 1), port)
        .unwrap();
    assert!(receiver(&sets).is_some());
    // Too short to hold a session: shard 0, which drops and counts it.
    tx.send_to(&[7u8, 0], port).unwrap();
    assert_eq!(receiver(&sets), Some(0));
}
