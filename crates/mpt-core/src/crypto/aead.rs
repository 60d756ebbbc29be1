//! Data-packet AEAD: ChaCha20-Poly1305 (RFC 8439) or AES-256-GCM (NIST SP
//! 800-38D), via `ring`.
//!
//! Nonce: 4 zero bytes followed by the 64-bit packet counter, big-endian (as
//! the header carries it). The 24-byte mpt header is the associated data, so
//! every field the receiver relies on is authenticated.
//!
//! Invariants: a [`DataKey`] never seals two packets with one counter (the
//! session hands out counters); `open` either returns the plaintext length
//! and leaves the plaintext in place, or fails without side effects on the
//! key. Key bytes are not exposed after construction.

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, CHACHA20_POLY1305};

use super::TAG_LEN;

/// Which AEAD protects data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cipher {
    ChaCha20Poly1305,
    Aes256Gcm,
}

impl Cipher {
    pub fn name(self) -> &'static str {
        match self {
            Self::ChaCha20Poly1305 => "chacha20-poly1305",
            Self::Aes256Gcm => "aes-256-gcm",
        }
    }
    /// Wire code used in the handshake payload.
    pub fn code(self) -> u8 {
        match self {
            Self::ChaCha20Poly1305 => 1,
            Self::Aes256Gcm => 2,
        }
    }
    pub fn from_code(c: u8) -> Option<Self> {
        match c {
            1 => Some(Self::ChaCha20Poly1305),
            2 => Some(Self::Aes256Gcm),
            _ => None,
        }
    }
}

/// Whether this CPU has AES and carry-less multiply instructions, which make
/// AES-256-GCM faster than ChaCha20-Poly1305.
pub fn cpu_has_aes() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("aes")
            && std::arch::is_x86_feature_detected!("pclmulqdq")
    }
    #[cfg(target_arch = "aarch64")]
    {
        std::arch::is_aarch64_feature_detected!("aes")
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        false
    }
}

/// One direction's key.
pub struct DataKey {
    key: LessSafeKey,
    cipher: Cipher,
}

impl std::fmt::Debug for DataKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DataKey({}, <secret>)", self.cipher.name())
    }
}

/// AEAD failed: wrong key, altered bytes, or too short.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenError;

pub fn nonce_for(counter: u64) -> [u8; 12] {
    let mut n = [0u8; 12];
    n[4..].copy_from_slice(&counter.to_be_bytes());
    n
}

impl DataKey {
    pub fn new(cipher: Cipher, key: &[u8; 32]) -> Self {
        let alg = match cipher {
            Cipher::ChaCha20Poly1305 => &CHACHA20_POLY1305,
            Cipher::Aes256Gcm => &AES_256_GCM,
        };
        // A 32-byte key is the right length for both algorithms.
        let unbound = UnboundKey::new(alg, key).unwrap_or_else(|_| unreachable!("32-byte key"));
        Self {
            key: LessSafeKey::new(unbound),
            cipher,
        }
    }

    pub fn cipher(&self) -> Cipher {
        self.cipher
    }

    /// Encrypt `data` in place with the raw 12-byte nonce; returns the tag.
    pub fn seal_raw(&self, nonce: [u8; 12], aad: &[u8], data: &mut [u8]) -> [u8; TAG_LEN] {
        let tag = self
            .key
            .seal_in_place_separate_tag(Nonce::assume_unique_for_key(nonce), Aad::from(aad), data)
            .unwrap_or_else(|_| unreachable!("ring only fails for oversized inputs"));
        let mut t = [0u8; TAG_LEN];
        t.copy_from_slice(tag.as_ref());
        t
    }

    /// Encrypt `buf[..len]` in place and write the tag at `buf[len..len+16]`.
    /// Returns the new length, or `None` if `buf` has no room for the tag.
    pub fn seal(&self, counter: u64, aad: &[u8], buf: &mut [u8], len: usize) -> Option<usize> {
        if buf.len() < len + TAG_LEN {
            return None;
        }
        let tag = self.seal_raw(nonce_for(counter), aad, &mut buf[..len]);
        buf[len..len + TAG_LEN].copy_from_slice(&tag);
        Some(len + TAG_LEN)
    }

    /// Decrypt `buf` (ciphertext followed by tag) in place. Returns the
    /// plaintext length.
    pub fn open(&self, counter: u64, aad: &[u8], buf: &mut [u8]) -> Result<usize, OpenError> {
        self.open_raw(nonce_for(counter), aad, buf)
    }

    pub fn open_raw(
        &self,
        nonce: [u8; 12],
        aad: &[u8],
        buf: &mut [u8],
    ) -> Result<usize, OpenError> {
        if buf.len() < TAG_LEN {
            return Err(OpenError);
        }
        self.key
            .open_in_place(Nonce::assume_unique_for_key(nonce), Aad::from(aad), buf)
            .map(|p| p.len())
            .map_err(|_| OpenError)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// RFC 8439 §2.8.2.
    #[test]
    fn chacha20_poly1305_rfc8439_vector() {
        let key: [u8; 32] = hex("808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f")
            .try_into()
            .unwrap();
        let nonce: [u8; 12] = hex("070000004041424344454647").try_into().unwrap();
        let aad = hex("50515253c0c1c2c3c4c5c6c7");
        let mut msg = b"Ladies and Gentlemen of the class of '99: If I could offer you only one tip for the future, sunscreen would be it.".to_vec();
        let k = DataKey::new(Cipher::ChaCha20Poly1305, &key);
        let tag = k.seal_raw(nonce, &aad, &mut msg);
        assert_eq!(msg, hex("d31a8d34648e60db7b86afbc53ef7ec2a4aded51296e08fea9e2b5a736ee62d63dbea45e8ca9671282fafb69da92728b1a71de0a9e060b2905d6a5b67ecd3b3692ddbd7f2d778b8c9803aee328091b58fab324e4fad675945585808b4831d7bc3ff4def08e4b7a9de576d26586cec64b6116"));
        assert_eq!(tag.to_vec(), hex("1ae10b594f09e26a7e902ecbd0600691"));
        msg.extend_from_slice(&tag);
        let n = k.open_raw(nonce, &aad, &mut msg).unwrap();
        assert!(msg[..n].starts_with(b"Ladies and Gentlemen"));
    }

    /// NIST GCM test cases 13 and 14 (256-bit zero key, zero IV).
    #[test]
    fn aes_256_gcm_nist_vectors() {
        let k = DataKey::new(Cipher::Aes256Gcm, &[0u8; 32]);
        let tag = k.seal_raw([0u8; 12], &[], &mut []);
        assert_eq!(tag.to_vec(), hex("530f8afbc74536b9a963b4f1c4cb738b"));
        let mut p = [0u8; 16];
        let tag = k.seal_raw([0u8; 12], &[], &mut p);
        assert_eq!(p.to_vec(), hex("cea7403d4d606b6e074ec5d3baf39d18"));
        assert_eq!(tag.to_vec(), hex("d0d1c8a799996bf0265b98b5d48ab919"));
    }

    #[test]
    fn packet_seal_open_and_tamper() {
        for c in [Cipher::ChaCha20Poly1305, Cipher::Aes256Gcm] {
            let k = DataKey::new(c, &[7u8; 32]);
            let aad = [1u8; 36];
            let mut buf = vec![0u8; 100 + TAG_LEN];
            buf[..100]
                .iter_mut()
                .enumerate()
                .for_each(|(i, b)| *b = i as u8);
            let n = k.seal(42, &aad, &mut buf, 100).unwrap();
            assert_eq!(n, 116);
            let mut good = buf.clone();
            assert_eq!(k.open(42, &aad, &mut good), Ok(100));
            assert_eq!(good[99], 99);
            // Wrong counter, altered AAD, flipped bit, truncation: all fail.
            assert!(k.open(43, &aad, &mut buf.clone()).is_err());
            let mut bad_aad = aad;
            bad_aad[2] ^= 1;
            assert!(k.open(42, &bad_aad, &mut buf.clone()).is_err());
            let mut flipped = buf.clone();
            flipped[50] ^= 0x10;
            assert!(k.open(42, &aad, &mut flipped).is_err());
            assert!(k.open(42, &aad, &mut buf[..15].to_vec()).is_err());
            assert!(k.seal(1, &aad, &mut [0u8; 20], 10).is_none());
        }
    }

    /// Packet-level vector: counter 1, header of zeros, "mpt" body.
    #[test]
    fn packet_vector_chacha() {
        let k = DataKey::new(Cipher::ChaCha20Poly1305, &[0x42; 32]);
        let mut buf = [0u8; 3 + TAG_LEN];
        buf[..3].copy_from_slice(b"mpt");
        k.seal(1, &[0u8; 36], &mut buf, 3).unwrap();
        let mut again = buf;
        assert_eq!(k.open(1, &[0u8; 36], &mut again), Ok(3));
        assert_eq!(&again[..3], b"mpt");
        // Deterministic: the same inputs give the same bytes.
        let mut b2 = [0u8; 3 + TAG_LEN];
        b2[..3].copy_from_slice(b"mpt");
        k.seal(1, &[0u8; 36], &mut b2, 3).unwrap();
        assert_eq!(buf, b2);
    }
}
