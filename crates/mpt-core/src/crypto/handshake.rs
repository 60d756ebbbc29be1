//! The session handshake: Noise `IKpsk2_25519_ChaChaPoly_BLAKE2s` (the
//! pattern WireGuard uses), carried in mpt packets of type 4 (initiation,
//! client → server) and 5 (response).
//!
//! ```text
//! initiation:  sender index u32 | Noise message 1 (e, es, s, ss; payload:
//!              timestamp 12, cipher offer 1, announcement 16)       129 bytes
//! response:    sender index u32 | receiver index u32 | Noise message 2
//!              (e, ee, se, psk; payload: chosen cipher 1,
//!              announcement 16)                                      73 bytes
//! ```
//!
//! The announcement ([`Announce`]) tells the other side who is sending
//! (a random incarnation, new at every start of a tunnel) and the next
//! tunnel sequence number it will send, so that a receiver can tie its
//! reorder state to the peer's sequence space: a changed incarnation means
//! the peer restarted. On the wire both messages are followed by the two
//! MACs of `cookie.rs`.
//!
//! Both peers know each other's static public key in advance (IK). The
//! responder rejects an initiation whose static key is not the configured
//! peer's, and one whose timestamp is not newer than the last accepted one
//! (so a captured initiation cannot be replayed). The result is a pair of
//! forward-secret transport keys.
//!
//! Invariants: no randomness or time is read here: ephemeral keys come from
//! a generator seeded by the caller, timestamps are passed in; every
//! malformed or unauthentic message is an error, never a panic.

use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha20Rng;
use snow::params::{CipherChoice, DHChoice, HashChoice, NoiseParams};
use snow::resolvers::{CryptoResolver, DefaultResolver, FallbackResolver};
use snow::types::{Cipher as SnowCipher, Dh, Hash, Random};
use snow::{Builder, HandshakeState};

use super::aead::Cipher;
use super::keys::{PresharedKey, PrivateKey, PublicKey};

/// Noise protocol name (spec constant).
pub const NOISE_PARAMS: &str = "Noise_IKpsk2_25519_ChaChaPoly_BLAKE2s";
/// Prologue binding the handshake to this protocol and version.
pub const PROLOGUE: &[u8] = b"mpt v2 handshake";
/// Lengths of the Noise parts of the bodies (after the 24-byte header,
/// before the MACs).
pub const INIT_NOISE_LEN: usize = 4 + 32 + 48 + (TIMESTAMP_LEN + 1 + ANNOUNCE_LEN + 16);
pub const RESPONSE_NOISE_LEN: usize = 4 + 4 + 32 + (1 + ANNOUNCE_LEN + 16);
/// Length of an [`Announce`] in a handshake payload.
pub const ANNOUNCE_LEN: usize = 16;

/// What a side announces in its handshake message (encrypted and
/// authenticated by Noise).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Announce {
    /// Random per start of the tunnel: a new value means the peer restarted.
    pub incarnation: u64,
    /// The next tunnel sequence number this side will send.
    pub next_seq: u64,
}

impl Announce {
    fn write(&self, out: &mut [u8]) {
        out[..8].copy_from_slice(&self.incarnation.to_be_bytes());
        out[8..16].copy_from_slice(&self.next_seq.to_be_bytes());
    }
    fn read(b: &[u8]) -> Self {
        let mut i = [0u8; 8];
        let mut n = [0u8; 8];
        i.copy_from_slice(&b[..8]);
        n.copy_from_slice(&b[8..16]);
        Self {
            incarnation: u64::from_be_bytes(i),
            next_seq: u64::from_be_bytes(n),
        }
    }
}
/// Timestamp in the initiation payload: seconds u64 + nanoseconds u32.
pub const TIMESTAMP_LEN: usize = 12;

/// Why a handshake message was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandshakeError {
    /// Wrong length.
    Malformed,
    /// Authentication failed: the sender does not hold the keys we expect
    /// (wrong peer public key, wrong private key, or wrong pre-shared key).
    Decrypt,
    /// Authentic, but from a static key other than the configured peer's
    /// (which one, for the log: the operator compares it with the peer's
    /// `mpt pubkey`).
    UnknownPeer([u8; 32]),
    /// Timestamp not newer than the last accepted initiation (a replay).
    Replayed,
    /// The response names no initiation of ours.
    Unexpected,
}

impl HandshakeError {
    pub fn describe(self) -> &'static str {
        match self {
            Self::Malformed => "malformed handshake message",
            Self::Decrypt => {
                "authentication failed (wrong peer public key, private key or pre-shared key?)"
            }
            Self::UnknownPeer(_) => "initiation from an unknown static key",
            Self::Replayed => "replayed initiation (timestamp not newer)",
            Self::Unexpected => "response to no pending initiation",
        }
    }
}

/// Keys of both sides, as configured.
#[derive(Clone, Debug)]
pub struct Identity {
    pub private: PrivateKey,
    pub peer_public: PublicKey,
    pub psk: PresharedKey,
}

/// Result of a completed handshake, for either role.
pub struct Established {
    pub send_key: [u8; 32],
    pub recv_key: [u8; 32],
    pub remote_index: u32,
    pub cipher: Cipher,
    /// What the peer announced.
    pub peer: Announce,
}

impl std::fmt::Debug for Established {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Established(remote_index {}, {})",
            self.remote_index,
            self.cipher.name()
        )
    }
}

struct SeededRng(ChaCha20Rng);

impl Random for SeededRng {
    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), snow::Error> {
        self.0.fill_bytes(dest);
        Ok(())
    }
}

/// Resolver that supplies our seeded generator and nothing else.
struct RngOnly(std::sync::Mutex<Option<[u8; 32]>>);

impl CryptoResolver for RngOnly {
    fn resolve_rng(&self) -> Option<Box<dyn Random>> {
        let seed = self.0.lock().ok()?.take()?;
        Some(Box::new(SeededRng(ChaCha20Rng::from_seed(seed))))
    }
    fn resolve_dh(&self, _: &DHChoice) -> Option<Box<dyn Dh>> {
        None
    }
    fn resolve_hash(&self, _: &HashChoice) -> Option<Box<dyn Hash>> {
        None
    }
    fn resolve_cipher(&self, _: &CipherChoice) -> Option<Box<dyn SnowCipher>> {
        None
    }
}

fn builder(seed: [u8; 32]) -> Builder<'static> {
    let params: NoiseParams = NOISE_PARAMS
        .parse()
        .unwrap_or_else(|_| unreachable!("valid pattern"));
    let resolver = FallbackResolver::new(
        Box::new(RngOnly(std::sync::Mutex::new(Some(seed)))),
        Box::new(DefaultResolver),
    );
    Builder::with_resolver(params, Box::new(resolver))
}

fn split(hs: &mut HandshakeState, initiator: bool) -> ([u8; 32], [u8; 32]) {
    let (i2r, r2i) = hs.dangerously_get_raw_split();
    if initiator {
        (i2r, r2i)
    } else {
        (r2i, i2r)
    }
}

/// An initiation in flight.
pub struct Initiation {
    state: HandshakeState,
    pub local_index: u32,
}

/// Build an initiation body into `out` (at least [`INIT_NOISE_LEN`]
/// bytes). `offer` is the cipher the initiator prefers.
pub fn initiate(
    id: &Identity,
    seed: [u8; 32],
    local_index: u32,
    timestamp: [u8; TIMESTAMP_LEN],
    offer: Cipher,
    announce: Announce,
    out: &mut [u8],
) -> Result<Initiation, HandshakeError> {
    if out.len() < INIT_NOISE_LEN {
        return Err(HandshakeError::Malformed);
    }
    let mut hs = builder(seed)
        .local_private_key(&id.private.0)
        .and_then(|b| b.remote_public_key(&id.peer_public.0))
        .and_then(|b| b.psk(2, &id.psk.0))
        .and_then(|b| b.prologue(PROLOGUE))
        .and_then(|b| b.build_initiator())
        .map_err(|_| HandshakeError::Malformed)?;
    let mut payload = [0u8; TIMESTAMP_LEN + 1 + ANNOUNCE_LEN];
    payload[..TIMESTAMP_LEN].copy_from_slice(&timestamp);
    payload[TIMESTAMP_LEN] = offer.code();
    announce.write(&mut payload[TIMESTAMP_LEN + 1..]);
    out[..4].copy_from_slice(&local_index.to_be_bytes());
    let n = hs
        .write_message(&payload, &mut out[4..INIT_NOISE_LEN])
        .map_err(|_| HandshakeError::Malformed)?;
    debug_assert_eq!(n + 4, INIT_NOISE_LEN);
    Ok(Initiation {
        state: hs,
        local_index,
    })
}

/// What the responder learned from a valid initiation.
#[derive(Debug)]
pub struct Responded {
    pub established: Established,
    pub timestamp: [u8; TIMESTAMP_LEN],
}

/// Process an initiation body and write the response body into `out`.
/// `last_timestamp` is the newest accepted so far; `choose` picks the data
/// cipher given the initiator's offer.
#[allow(clippy::too_many_arguments)] // the handshake's inputs, as they are
pub fn respond(
    id: &Identity,
    seed: [u8; 32],
    body: &[u8],
    local_index: u32,
    last_timestamp: Option<[u8; TIMESTAMP_LEN]>,
    choose: impl Fn(Cipher) -> Cipher,
    announce: Announce,
    out: &mut [u8],
) -> Result<Responded, HandshakeError> {
    if body.len() != INIT_NOISE_LEN || out.len() < RESPONSE_NOISE_LEN {
        return Err(HandshakeError::Malformed);
    }
    let mut hs = builder(seed)
        .local_private_key(&id.private.0)
        .and_then(|b| b.psk(2, &id.psk.0))
        .and_then(|b| b.prologue(PROLOGUE))
        .and_then(|b| b.build_responder())
        .map_err(|_| HandshakeError::Malformed)?;
    let remote_index = u32::from_be_bytes([body[0], body[1], body[2], body[3]]);
    let mut payload = [0u8; 64];
    let n = hs
        .read_message(&body[4..], &mut payload)
        .map_err(|_| HandshakeError::Decrypt)?;
    match hs.get_remote_static() {
        Some(k) if k == &id.peer_public.0[..] => {}
        Some(k) => {
            let mut key = [0u8; 32];
            key.copy_from_slice(&k[..32.min(k.len())]);
            return Err(HandshakeError::UnknownPeer(key));
        }
        None => return Err(HandshakeError::Malformed),
    }
    if n != TIMESTAMP_LEN + 1 + ANNOUNCE_LEN {
        return Err(HandshakeError::Malformed);
    }
    let mut timestamp = [0u8; TIMESTAMP_LEN];
    timestamp.copy_from_slice(&payload[..TIMESTAMP_LEN]);
    if last_timestamp.is_some_and(|last| timestamp <= last) {
        return Err(HandshakeError::Replayed);
    }
    let offer = Cipher::from_code(payload[TIMESTAMP_LEN]).unwrap_or(Cipher::ChaCha20Poly1305);
    let peer = Announce::read(&payload[TIMESTAMP_LEN + 1..n]);
    let cipher = choose(offer);
    out[..4].copy_from_slice(&local_index.to_be_bytes());
    out[4..8].copy_from_slice(&remote_index.to_be_bytes());
    let mut reply = [0u8; 1 + ANNOUNCE_LEN];
    reply[0] = cipher.code();
    announce.write(&mut reply[1..]);
    let m = hs
        .write_message(&reply, &mut out[8..RESPONSE_NOISE_LEN])
        .map_err(|_| HandshakeError::Malformed)?;
    debug_assert_eq!(m + 8, RESPONSE_NOISE_LEN);
    let (send_key, recv_key) = split(&mut hs, false);
    Ok(Responded {
        established: Established {
            send_key,
            recv_key,
            remote_index,
            cipher,
            peer,
        },
        timestamp,
    })
}

/// The initiator's static public key in an initiation body, read with our
/// private key alone (message 1 of IKpsk2 mixes no pre-shared key): how a
/// concentrator finds which of its peers is calling before that peer's own
/// state answers with [`respond`]. Authentic only in that the sender knows
/// our public key and holds the private key of the static it claims (the
/// `ss` step); the timestamp and everything else is checked by `respond`.
pub fn initiator_static(private: &PrivateKey, body: &[u8]) -> Result<[u8; 32], HandshakeError> {
    if body.len() != INIT_NOISE_LEN {
        return Err(HandshakeError::Malformed);
    }
    let mut hs = builder([0; 32])
        .local_private_key(&private.0)
        .and_then(|b| b.psk(2, &[0; 32]))
        .and_then(|b| b.prologue(PROLOGUE))
        .and_then(|b| b.build_responder())
        .map_err(|_| HandshakeError::Malformed)?;
    let mut payload = [0u8; 64];
    hs.read_message(&body[4..], &mut payload)
        .map_err(|_| HandshakeError::Decrypt)?;
    let k = hs.get_remote_static().ok_or(HandshakeError::Malformed)?;
    let mut key = [0u8; 32];
    key.copy_from_slice(k.get(..32).ok_or(HandshakeError::Malformed)?);
    Ok(key)
}

/// The receiver index a response body names (to find the initiation).
pub fn response_receiver_index(body: &[u8]) -> Option<u32> {
    (body.len() == RESPONSE_NOISE_LEN)
        .then(|| u32::from_be_bytes([body[4], body[5], body[6], body[7]]))
}

/// Complete an initiation with the response body.
pub fn complete(mut init: Initiation, body: &[u8]) -> Result<Established, HandshakeError> {
    if body.len() != RESPONSE_NOISE_LEN {
        return Err(HandshakeError::Malformed);
    }
    if response_receiver_index(body) != Some(init.local_index) {
        return Err(HandshakeError::Unexpected);
    }
    let remote_index = u32::from_be_bytes([body[0], body[1], body[2], body[3]]);
    let mut payload = [0u8; 64];
    let n = init
        .state
        .read_message(&body[8..], &mut payload)
        .map_err(|_| HandshakeError::Decrypt)?;
    let cipher = (n == 1 + ANNOUNCE_LEN)
        .then(|| Cipher::from_code(payload[0]))
        .flatten()
        .ok_or(HandshakeError::Malformed)?;
    let peer = Announce::read(&payload[1..n]);
    let (send_key, recv_key) = split(&mut init.state, true);
    Ok(Established {
        send_key,
        recv_key,
        remote_index,
        cipher,
        peer,
    })
}

#[cfg(test)]
#[path = "handshake_tests.rs"]
mod tests;
