//! Memory of a concentrator's peers, measured with a counting allocator:
//! an idle peer (configured, never connected) holds its configuration and
//! its prefixes; a connected peer without traffic holds its tunnel but no
//! reorder window or packet pool. The figures are printed (`--nocapture`)
//! for the closing note; the bounds are generous, the point is the order
//! of magnitude.

use mpt_core::concentrator::Concentrator;
use mpt_core::testing::{client_addr, client_config, client_peer, concentrator_template};
use mpt_core::tunnel::Tunnel;
use mpt_sys::alloc::CountingAlloc;

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

const PEERS: u32 = 1_000;

#[test]
fn idle_and_connected_peers_are_small() {
    let mut conc = Concentrator::new(concentrator_template(4)).unwrap();
    // Initiations from every client, made before counting.
    let mut inits = vec![];
    for c in 0..PEERS {
        let mut t = Tunnel::new(client_config(c, 2), 0);
        let mut buf = [0u8; 512];
        let tx = t.poll_transmit(0, &mut buf).expect("an initiation");
        inits.push((
            tx.local_key,
            client_addr(c, tx.path as usize),
            buf[..tx.len].to_vec(),
        ));
    }
    // Warm the allocator's size classes and the maps' growth.
    CountingAlloc::count_here(true);
    for c in 0..PEERS {
        conc.add_peer(client_peer(c)).unwrap();
    }
    let idle = CountingAlloc::net_bytes() as f64 / f64::from(PEERS);
    CountingAlloc::count_here(true);
    // One every 40 ms: within the guard's load threshold (no cookies).
    for (k, (key, from, mut d)) in inits.into_iter().enumerate() {
        conc.recv(k as u64 * 40 * mpt_core::NANOS_PER_MS, key, from, &mut d);
    }
    let connected = CountingAlloc::net_bytes() as f64 / f64::from(PEERS);
    CountingAlloc::count_here(false);
    println!(
        "memory per peer: idle {idle:.0} bytes; after its handshake, no traffic, \
         {connected:.0} bytes more (4 server paths)"
    );
    assert_eq!(conc.peer_count(), PEERS as usize);
    for c in 0..PEERS {
        let t = conc.tunnel(c).expect("each peer has its tunnel");
        assert!(!t.reorder_allocated(), "no reorder window before data");
    }
    assert!(idle < 2_048.0, "idle peer: {idle} bytes");
    assert!(connected < 65_536.0, "connected peer: {connected} bytes");
}
