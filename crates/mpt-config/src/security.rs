//! The `[security]` section: keys, cipher, rekeying, or the explicitly
//! insecure plaintext mode.
//!
//! ```toml
//! [security]
//! private_key_file = "/etc/mpt/client.key"   # or private_key = "base64"
//! peer_public_key = "base64"
//! preshared_key_file = "/etc/mpt/psk"        # optional; or preshared_key
//! cipher = "auto"                            # or "chacha20-poly1305", "aes-256-gcm"
//! rekey_after_s = 120
//! rekey_after_packets = 1099511627776
//! ```
//!
//! Invariants: a configuration without keys is refused unless it says
//! `insecure_no_encryption = true`; a file that holds a secret (the config
//! with an inline key, or a key file) must not be readable by group or
//! others, as ssh demands of private keys; key material never appears in an
//! error message or in `Debug` output.

use std::path::Path;

use mpt_core::crypto::aead::Cipher;
use mpt_core::crypto::keys::{self, PresharedKey, PrivateKey, PublicKey};
use mpt_core::crypto::state::CipherPref;
use toml_edit::Table;

use crate::files;
use crate::reader::{Ctx, TableReader};

pub const SECURITY_KEYS: &[&str] = &[
    "private_key",
    "private_key_file",
    "peer_public_key",
    "preshared_key",
    "preshared_key_file",
    "cipher",
    "rekey_after_s",
    "rekey_after_packets",
    "insecure_no_encryption",
];

/// Keys and settings of an encrypted tunnel.
#[derive(Debug, Clone, PartialEq)]
pub struct Keys {
    pub private: PrivateKey,
    /// The peer's key (all zero and unused in a concentrator, whose peers
    /// carry their own).
    pub peer_public: PublicKey,
    pub psk: Option<PresharedKey>,
    pub cipher: CipherPref,
    pub rekey_after_s: u64,
    pub rekey_after_packets: u64,
    /// The configuration file itself holds a secret (inline key).
    pub inline_secret: bool,
}

/// Security mode of a peer.
#[derive(Debug, Clone, PartialEq)]
pub enum Security {
    Encrypted(Box<Keys>),
    /// Plaintext, for lab comparisons only (`insecure_no_encryption = true`).
    InsecurePlaintext,
}

/// Refuse a secret-holding file that group or others can read.
pub fn check_private_mode(path: &Path, what: &str) -> Result<(), String> {
    let meta =
        std::fs::metadata(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    files::check_private(path, &meta, what)
}

pub(crate) fn read_key_file(base: &Path, file: &str, what: &str) -> Result<[u8; 32], String> {
    let p = base.parent().unwrap_or(Path::new(".")).join(file);
    let (text, meta) = files::read_text(&p, files::MAX_KEY_FILE_BYTES)?;
    files::check_private(&p, &meta, what)?;
    keys::decode(&text).map_err(|e| format!("{}: the key {e}", p.display()))
}

/// A table's required `public_key` (a peer's or a server's), decoded.
pub(crate) fn read_public_key(ctx: &mut Ctx<'_>, r: &TableReader<'_>) -> Option<PublicKey> {
    let text = r.string(ctx, "public_key");
    let text = r.required(ctx, "public_key", text)?;
    match keys::decode(&text) {
        Ok(k) => Some(PublicKey(k)),
        Err(e) => {
            ctx.error(
                r.span("public_key"),
                &r.key("public_key"),
                format!("the key {e}"),
            );
            None
        }
    }
}

/// A table's optional `preshared_key` or `preshared_key_file` (relative
/// to the configuration `file`, mode 0600), decoded.
pub(crate) fn read_psk(
    ctx: &mut Ctx<'_>,
    r: &TableReader<'_>,
    file: &Path,
) -> Option<PresharedKey> {
    match (
        r.string(ctx, "preshared_key"),
        r.string(ctx, "preshared_key_file"),
    ) {
        (Some(_), Some(_)) => {
            ctx.error(
                r.span("preshared_key"),
                &r.key("preshared_key"),
                "give either preshared_key or preshared_key_file, not both",
            );
            None
        }
        (Some(text), None) => match keys::decode(&text) {
            Ok(k) => Some(PresharedKey(k)),
            Err(e) => {
                ctx.error(
                    r.span("preshared_key"),
                    &r.key("preshared_key"),
                    format!("the key {e}"),
                );
                None
            }
        },
        (None, Some(f)) => match read_key_file(file, &f, "a pre-shared key") {
            Ok(k) => Some(PresharedKey(k)),
            Err(e) => {
                ctx.error(
                    r.span("preshared_key_file"),
                    &r.key("preshared_key_file"),
                    e,
                );
                None
            }
        },
        (None, None) => None,
    }
}

/// Read `[security]`; `file` is the configuration file (key files are
/// relative to its directory).
/// `concentrator`: the peers' keys are in `[[peer]]` blocks, so
/// `peer_public_key` must not be given (and [`Keys::peer_public`] is
/// unused).
pub fn read(
    ctx: &mut Ctx<'_>,
    t: Option<&Table>,
    file: &Path,
    concentrator: bool,
) -> Option<Security> {
    let Some(t) = t else {
        ctx.error(
            None,
            "security",
            "missing section [security]: give private_key_file and peer_public_key (create a key with `mpt genkey -o FILE`, mode 0600, and print its public key for the peer with `mpt pubkey -i FILE`), or, for an unencrypted lab tunnel only, insecure_no_encryption = true",
        );
        return None;
    };
    let r = TableReader::new(t, "security", SECURITY_KEYS);
    let insecure = match t.get("insecure_no_encryption") {
        None => false,
        Some(i) => match i.as_bool() {
            Some(b) => b,
            None => {
                ctx.error(
                    r.span("insecure_no_encryption"),
                    "security.insecure_no_encryption",
                    "expected true or false",
                );
                false
            }
        },
    };
    let has_keys = ["private_key", "private_key_file", "peer_public_key"]
        .iter()
        .any(|k| t.contains_key(k));
    if insecure {
        if has_keys {
            ctx.error(
                r.span("insecure_no_encryption"),
                "security.insecure_no_encryption",
                "cannot be combined with keys: remove it to encrypt, or remove the keys",
            );
        }
        r.finish(ctx);
        return Some(Security::InsecurePlaintext);
    }
    let secret = |ctx: &mut Ctx<'_>,
                  inline: &str,
                  in_file: &str,
                  what: &str,
                  required: bool|
     -> (Option<[u8; 32]>, bool) {
        match (r.string(ctx, inline), r.string(ctx, in_file)) {
            (Some(_), Some(_)) => {
                ctx.error(
                    r.span(inline),
                    &r.key(inline),
                    format!("give either {inline} or {in_file}, not both"),
                );
                (None, false)
            }
            (Some(text), None) => match keys::decode(&text) {
                Ok(k) => (Some(k), true),
                Err(e) => {
                    ctx.error(r.span(inline), &r.key(inline), format!("the key {e}"));
                    (None, true)
                }
            },
            (None, Some(f)) => match read_key_file(file, &f, what) {
                Ok(k) => (Some(k), false),
                Err(e) => {
                    ctx.error(r.span(in_file), &r.key(in_file), e);
                    (None, false)
                }
            },
            (None, None) => {
                if required {
                    ctx.error(
                        r.table_span(),
                        &r.key(in_file),
                        format!("missing: give {in_file} (or {inline})"),
                    );
                }
                (None, false)
            }
        }
    };
    let (private, inline_priv) = secret(
        ctx,
        "private_key",
        "private_key_file",
        "a private key",
        true,
    );
    let (psk, inline_psk) = secret(
        ctx,
        "preshared_key",
        "preshared_key_file",
        "a pre-shared key",
        false,
    );
    let peer = r.string(ctx, "peer_public_key");
    if concentrator {
        if peer.is_some() {
            ctx.error(
                r.span("peer_public_key"),
                "security.peer_public_key",
                "a concentrator has no single peer: give each client's key as public_key in its [[peer]] block (or file in tunnel.peers_dir)",
            );
        }
        if psk.is_some() {
            ctx.error(
                r.span("preshared_key_file").or(r.span("preshared_key")),
                "security.preshared_key_file",
                "a concentrator's pre-shared keys are per peer: give preshared_key_file in each [[peer]] block",
            );
        }
    }
    let peer = if concentrator {
        Some(PublicKey([0; 32]))
    } else {
        r.required(ctx, "peer_public_key", peer)
            .and_then(|text| match keys::decode(&text) {
                Ok(k) => Some(PublicKey(k)),
                Err(e) => {
                    ctx.error(
                        r.span("peer_public_key"),
                        "security.peer_public_key",
                        format!("the key {e}"),
                    );
                    None
                }
            })
    };
    let cipher = match r.choice(ctx, "cipher", &["auto", "chacha20-poly1305", "aes-256-gcm"]) {
        Some("chacha20-poly1305") => CipherPref::Only(Cipher::ChaCha20Poly1305),
        Some("aes-256-gcm") => CipherPref::Only(Cipher::Aes256Gcm),
        _ => CipherPref::Auto,
    };
    let rekey_after_s = r
        .int(ctx, "rekey_after_s", (10, 3600))
        .map_or(120, |v| v as u64);
    let rekey_after_packets = r
        .int(ctx, "rekey_after_packets", (1000, i64::MAX))
        .map_or(1 << 40, |v| v as u64);
    r.finish(ctx);
    let private = PrivateKey(private?);
    if let Some(p) = peer.filter(|_| !concentrator) {
        if p == private.public() {
            ctx.error(r.span("peer_public_key"), "security.peer_public_key", "is this peer's own public key; use the other peer's (`mpt pubkey` on its private key)");
        }
    }
    Some(Security::Encrypted(Box::new(Keys {
        private,
        peer_public: peer?,
        psk: psk.map(PresharedKey),
        cipher,
        rekey_after_s,
        rekey_after_packets,
        inline_secret: inline_priv || inline_psk,
    })))
}
