//! The tunnel state machine's receive path, plaintext and secure, driven
//! through `mpt_core::testing` (hence behind the `testing` feature). Each
//! call builds its own tunnel; see the crate doc.

use mpt_core::testing::{addr, security, TestConfig};
use mpt_core::tunnel::{Received, ReleaseKind, Tunnel};

/// The first byte picks the side: even, a learning server (responder);
/// odd, a client (initiator, which takes cookie replies and handshake
/// responses). The peer's key is not the fixed test key of the other side,
/// so nothing the fuzzer makes can authenticate.
fn secure_tunnel(first: u8) -> Tunnel {
    let side = first & 1;
    let mut sec = security(side, true);
    sec.identity.peer_public = mpt_core::crypto::keys::PrivateKey::from_random([99; 32]).public();
    let c = TestConfig::new(side, 2)
        .one_socket(addr(side, 0))
        .reorder(64, 10_000_000)
        .recover(true)
        .security(sec)
        .seed([3; 32]);
    if side == 0 {
        c.learning().tunnel()
    } else {
        c.tunnel()
    }
}

/// Fuzz the whole receive path of the tunnel state machine with a sequence
/// of datagrams (split on a marker) and timer steps: no panic, no hang, and
/// delivered packets leave in strictly increasing order.
pub fn tunnel_recv(data: &[u8]) {
    // Three plaintext paths on one socket, all from the peer's address.
    let remote = addr(1, 0);
    let mut t = TestConfig::new(0, 3)
        .one_socket(addr(0, 0))
        .release(ReleaseKind::PathFrontier)
        .reorder(64, 10_000_000)
        .recover(true)
        .with(|c| c.paths.iter_mut().for_each(|p| p.remote = Some(remote)))
        .tunnel();
    let mut now = 0u64;
    let mut buf = [0u8; 512];
    for chunk in data.split(|b| *b == 0xa5) {
        now += 1_000_000;
        let mut d = chunk.to_vec();
        let _ = t.recv(now, 0, remote, &mut d);
        t.handle_timeout(now);
        t.deliver_ready(|_| Ok(()));
        while t.poll_transmit(now, &mut buf).is_some() {}
        let _ = Received::Consumed;
    }
    let _ = t.status(now);
}

/// Fuzz the secure receive path as a server (handshake responder and data
/// decryptor) or as a client (cookie replies, handshake responses): any
/// datagram sequence — initiations, responses, cookie replies, path
/// challenges, sealed data with arbitrary headers — must be refused or
/// accepted without a panic, and nothing unauthenticated may be delivered.
pub fn secure_recv(data: &[u8]) {
    let mut t = secure_tunnel(data.first().copied().unwrap_or(0));
    let client = data.first().is_some_and(|b| b & 1 == 1);
    let mut now = 0u64;
    let mut buf = [0u8; 512];
    for chunk in data.split(|b| *b == 0xa5) {
        now += 1_000_000;
        let mut d = chunk.to_vec();
        // The client takes packets from its server only; the server any.
        let src = if client {
            addr(0, 0)
        } else {
            std::net::SocketAddr::from(([10, 0, 0, chunk.len() as u8], 1000))
        };
        // Without the client's private key nothing can authenticate.
        assert!(!matches!(
            t.recv(now, 0, src, &mut d),
            Received::Deliver { .. }
        ));
        t.handle_timeout(now);
        assert_eq!(t.deliver_ready(|_| Ok(())), 0);
        while t.poll_transmit(now, &mut buf).is_some() {}
    }
    let _ = t.status(now);
}
