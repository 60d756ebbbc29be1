//! Fuzz the secure receive path as a server (handshake responder and data
//! decryptor): any datagram sequence — initiations, responses, sealed data
//! with arbitrary headers — must be refused or accepted without a panic,
//! and nothing unauthenticated may be delivered.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mpt_core::crypto::handshake::Identity;
use mpt_core::crypto::keys::{PresharedKey, PrivateKey};
use mpt_core::crypto::state::{CipherPref, HandshakeRole, SecurityConfig};
use mpt_core::path::PathConfig;
use mpt_core::sched::Share;
use mpt_core::tunnel::{ReleaseKind, Received, Tunnel, TunnelConfig};

fuzz_target!(|data: &[u8]| {
    let local: std::net::SocketAddr = "10.0.0.1:1".parse().unwrap();
    let paths = (0..2)
        .map(|i| PathConfig {
            name: format!("p{i}"),
            local_key: 0,
            local,
            remote: None,
            weight: 1,
            keepalive: 100_000_000,
            dead: 500_000_000,
        })
        .collect();
    let security = SecurityConfig {
        identity: Identity {
            private: PrivateKey::from_random([1; 32]),
            peer_public: PrivateKey::from_random([2; 32]).public(),
            psk: PresharedKey([0; 32]),
        },
        role: HandshakeRole::Responder,
        cipher: CipherPref::Auto,
        rekey_after: 120_000_000_000,
        rekey_after_packets: 1 << 40,
    };
    let mut t = Tunnel::new(
        TunnelConfig {
            paths,
            mtu: 1400,
            reorder_window: 64,
            reorder_max_delay: 10_000_000,
            release: ReleaseKind::PathFrontier,
            share: Share::Bytes,
            security: Some(security),
            seed: [3; 32],
            adapt_to_loss: true,
            recover: true,
        },
        0,
    );
    let mut now = 0u64;
    let mut buf = [0u8; 512];
    for chunk in data.split(|b| *b == 0xa5) {
        now += 1_000_000;
        let mut d = chunk.to_vec();
        let src = std::net::SocketAddr::from(([10, 0, 0, chunk.len() as u8], 1000));
        // Without the client's private key nothing can authenticate.
        assert!(!matches!(t.recv(now, 0, src, &mut d), Received::Deliver { .. }));
        t.handle_timeout(now);
        assert!(t.poll_deliver().is_none());
        while t.poll_transmit(now, &mut buf).is_some() {}
    }
    let _ = t.status(now);
});
