//! Static X25519 keys (RFC 7748) and their text form (standard base64 of 32
//! bytes, as WireGuard writes them).
//!
//! Invariants: a [`PrivateKey`] is clamped on use by X25519 itself; its
//! `Debug` shows nothing secret; parsing rejects anything that is not
//! exactly 32 bytes of base64.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use snow::params::DHChoice;
use snow::resolvers::{CryptoResolver, DefaultResolver};

use super::KEY_LEN;

/// A static private key.
#[derive(Clone, PartialEq, Eq)]
pub struct PrivateKey(pub [u8; KEY_LEN]);

/// A static public key.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct PublicKey(pub [u8; KEY_LEN]);

/// A pre-shared symmetric key (Noise psk).
#[derive(Clone, PartialEq, Eq)]
pub struct PresharedKey(pub [u8; KEY_LEN]);

impl std::fmt::Debug for PrivateKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PrivateKey(<secret>)")
    }
}
impl std::fmt::Debug for PresharedKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PresharedKey(<secret>)")
    }
}
impl std::fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PublicKey({})", encode(&self.0))
    }
}

/// Base64 text of 32 key bytes.
pub fn encode(k: &[u8; KEY_LEN]) -> String {
    STANDARD.encode(k)
}

/// Parse base64 text (surrounding whitespace ignored) into 32 key bytes.
pub fn decode(text: &str) -> Result<[u8; KEY_LEN], String> {
    let bytes = STANDARD.decode(text.trim()).map_err(|_| {
        "is not base64 (expected 44 characters such as those `mpt genkey` writes)".to_string()
    })?;
    bytes
        .try_into()
        .map_err(|b: Vec<u8>| format!("decodes to {} bytes; a key is 32", b.len()))
}

impl PrivateKey {
    /// A new key from 32 random bytes supplied by the caller.
    pub fn from_random(bytes: [u8; KEY_LEN]) -> Self {
        let mut k = bytes;
        // Clamp as X25519 does (RFC 7748 §5), so the stored key is canonical.
        k[0] &= 248;
        k[31] &= 127;
        k[31] |= 64;
        Self(k)
    }

    pub fn public(&self) -> PublicKey {
        let mut dh = DefaultResolver
            .resolve_dh(&DHChoice::Curve25519)
            .unwrap_or_else(|| unreachable!("snow's default resolver has X25519"));
        dh.set(&self.0);
        let mut p = [0u8; KEY_LEN];
        p.copy_from_slice(dh.pubkey());
        PublicKey(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7748 §6.1: Alice's private and public keys.
    #[test]
    fn x25519_rfc7748_vector() {
        let hex = |s: &str| -> [u8; 32] {
            (0..64)
                .step_by(2)
                .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
                .collect::<Vec<_>>()
                .try_into()
                .unwrap()
        };
        let a = PrivateKey(hex(
            "77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a",
        ));
        assert_eq!(
            a.public().0,
            hex("8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a")
        );
    }

    #[test]
    fn text_roundtrip_and_errors() {
        let k = PrivateKey::from_random([9u8; 32]);
        let t = encode(&k.0);
        assert_eq!(t.len(), 44);
        assert_eq!(decode(&format!("  {t}\n")).unwrap(), k.0);
        assert!(decode("not base64!").unwrap_err().contains("not base64"));
        assert!(decode("AAAA").unwrap_err().contains("3 bytes"));
        assert_eq!(format!("{k:?}"), "PrivateKey(<secret>)");
    }
}
