//! Handshake tests: agreement, wrong keys, replays, and a byte vector that
//! pins the wire format (fixed keys and seeds make the messages
//! deterministic).

use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha20Rng;

use super::*;

fn ids() -> (Identity, Identity) {
    let a = PrivateKey::from_random([1u8; 32]);
    let b = PrivateKey::from_random([2u8; 32]);
    let psk = PresharedKey([3u8; 32]);
    (
        Identity {
            private: a.clone(),
            peer_public: b.public(),
            psk: psk.clone(),
        },
        Identity {
            private: b,
            peer_public: a.public(),
            psk,
        },
    )
}

fn ts(n: u64) -> [u8; TIMESTAMP_LEN] {
    let mut t = [0u8; TIMESTAMP_LEN];
    t[..8].copy_from_slice(&n.to_be_bytes());
    t
}

fn ann(n: u64) -> Announce {
    Announce {
        incarnation: 0x1000 + n,
        next_seq: 5_000 * n,
    }
}

fn run(
    init_id: &Identity,
    resp_id: &Identity,
) -> Result<(Established, Established), HandshakeError> {
    let mut m1 = [0u8; INIT_NOISE_LEN];
    let init = initiate(
        init_id,
        [5u8; 32],
        77,
        ts(1),
        Cipher::Aes256Gcm,
        ann(1),
        &mut m1,
    )?;
    let mut m2 = [0u8; RESPONSE_NOISE_LEN];
    let r = respond(
        resp_id,
        [6u8; 32],
        &m1,
        99,
        None,
        |offer| offer,
        ann(2),
        &mut m2,
    )?;
    let i = complete(init, &m2)?;
    Ok((i, r.established))
}

#[test]
fn both_sides_agree_on_keys_indices_and_cipher() {
    let (a, b) = ids();
    let (i, r) = run(&a, &b).unwrap();
    assert_eq!(i.send_key, r.recv_key);
    assert_eq!(i.recv_key, r.send_key);
    assert_ne!(i.send_key, i.recv_key);
    assert_eq!((i.remote_index, r.remote_index), (99, 77));
    assert_eq!((i.cipher, r.cipher), (Cipher::Aes256Gcm, Cipher::Aes256Gcm));
    // Each side learns what the other announced.
    assert_eq!((i.peer, r.peer), (ann(2), ann(1)));
}

#[test]
fn wrong_keys_never_get_a_session() {
    let (a, b) = ids();
    // Initiator believes in another server key.
    let mut wrong = a.clone();
    wrong.peer_public = PrivateKey::from_random([9u8; 32]).public();
    assert_eq!(run(&wrong, &b).unwrap_err(), HandshakeError::Decrypt);
    // An unknown client with the right server key.
    let stranger = Identity {
        private: PrivateKey::from_random([8u8; 32]),
        ..a.clone()
    };
    assert_eq!(
        run(&stranger, &b).unwrap_err(),
        HandshakeError::UnknownPeer(stranger.private.public().0)
    );
    // Wrong pre-shared key: the initiation decrypts (psk enters at message 2)
    // but the initiator cannot read the response.
    let mut other_psk = a.clone();
    other_psk.psk = PresharedKey([4u8; 32]);
    assert_eq!(run(&other_psk, &b).unwrap_err(), HandshakeError::Decrypt);
}

#[test]
fn replayed_initiation_and_garbage_are_refused() {
    let (a, b) = ids();
    let mut m1 = [0u8; INIT_NOISE_LEN];
    initiate(
        &a,
        [5u8; 32],
        1,
        ts(10),
        Cipher::ChaCha20Poly1305,
        ann(1),
        &mut m1,
    )
    .unwrap();
    let mut m2 = [0u8; RESPONSE_NOISE_LEN];
    let r = respond(&b, [6u8; 32], &m1, 2, None, |c| c, ann(2), &mut m2).unwrap();
    assert_eq!(
        respond(
            &b,
            [6u8; 32],
            &m1,
            2,
            Some(r.timestamp),
            |c| c,
            ann(2),
            &mut m2
        )
        .unwrap_err(),
        HandshakeError::Replayed
    );
    let mut flipped = m1;
    flipped[60] ^= 1;
    assert_eq!(
        respond(&b, [6u8; 32], &flipped, 2, None, |c| c, ann(2), &mut m2).unwrap_err(),
        HandshakeError::Decrypt
    );
    assert_eq!(
        respond(&b, [6u8; 32], &m1[..50], 2, None, |c| c, ann(2), &mut m2).unwrap_err(),
        HandshakeError::Malformed
    );
}

#[test]
fn wire_vector_is_stable() {
    // Fixed keys and seeds: the initiation's first bytes are pinned, so an
    // accidental change of the wire format or of the Noise parameters shows.
    let (a, _) = ids();
    let mut m1 = [0u8; INIT_NOISE_LEN];
    initiate(
        &a,
        [5u8; 32],
        0x0102_0304,
        ts(1),
        Cipher::ChaCha20Poly1305,
        ann(1),
        &mut m1,
    )
    .unwrap();
    let mut m1b = [0u8; INIT_NOISE_LEN];
    initiate(
        &a,
        [5u8; 32],
        0x0102_0304,
        ts(1),
        Cipher::ChaCha20Poly1305,
        ann(1),
        &mut m1b,
    )
    .unwrap();
    assert_eq!(m1, m1b, "deterministic for fixed seeds");
    assert_eq!(&m1[..4], &[1, 2, 3, 4]);
    assert_eq!(INIT_NOISE_LEN, 129);
    assert_eq!(RESPONSE_NOISE_LEN, 73);
    // The ephemeral key on the wire is the X25519 public key of the first
    // 32 bytes drawn from ChaCha20 seeded with [5; 32] (Noise: e first).
    let mut eph = [0u8; 32];
    ChaCha20Rng::from_seed([5u8; 32]).fill_bytes(&mut eph);
    assert_eq!(&m1[4..36], &PrivateKey(eph).public().0[..]);
    assert_eq!(hex_prefix(&m1[4..12]), EPHEMERAL_PREFIX);
}

fn hex_prefix(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// First 8 bytes of the initiator's ephemeral public key for seed [5; 32].
const EPHEMERAL_PREFIX: &str = "e2f7ef50c811d6e6";

#[test]
fn a_concentrator_reads_the_caller_s_static_key_whatever_its_psk() {
    let (a, b) = ids();
    let mut m1 = [0u8; INIT_NOISE_LEN];
    // The initiator's psk differs from anything the responder knows:
    // message 1 does not depend on it.
    let mut a2 = a.clone();
    a2.psk = PresharedKey([9u8; 32]);
    initiate(
        &a2,
        [5u8; 32],
        77,
        ts(1),
        Cipher::Aes256Gcm,
        ann(1),
        &mut m1,
    )
    .unwrap();
    let key = initiator_static(&b.private, &m1).unwrap();
    assert_eq!(key, a.private.public().0);
    // Sent to another server: not readable.
    let other = PrivateKey::from_random([4u8; 32]);
    assert_eq!(initiator_static(&other, &m1), Err(HandshakeError::Decrypt));
    assert_eq!(
        initiator_static(&b.private, &m1[..10]),
        Err(HandshakeError::Malformed)
    );
}
