//! `mpt genkey` and `mpt pubkey`: static X25519 keys as base64 text.
//!
//! Invariants: a key file written by `genkey -o FILE` is created with mode
//! 0600 (never briefly readable by others); private keys are only ever
//! printed by `genkey` itself.

use std::fs::OpenOptions;
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use mpt_core::crypto::keys::{self, PrivateKey};

/// 32 bytes from the kernel's random source.
pub fn random32() -> io::Result<[u8; 32]> {
    let mut b = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut b)?;
    Ok(b)
}

pub fn genkey(out: Option<&Path>) -> io::Result<()> {
    let k = PrivateKey::from_random(random32()?);
    let text = format!("{}\n", keys::encode(&k.0));
    match out {
        None => io::stdout().write_all(text.as_bytes()),
        Some(p) => {
            let mut f = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(p)
                .map_err(|e| {
                    io::Error::new(
                        e.kind(),
                        format!("cannot create {}: {e} (it must not exist yet)", p.display()),
                    )
                })?;
            f.write_all(text.as_bytes())
        }
    }
}

pub fn pubkey(input: Option<&Path>) -> io::Result<()> {
    let limit = mpt_config::files::MAX_KEY_FILE_BYTES;
    let text = match input {
        None => {
            let mut bytes = Vec::new();
            io::stdin().take(limit + 1).read_to_end(&mut bytes)?;
            if bytes.len() as u64 > limit {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("standard input holds more than the {limit} bytes of a key file"),
                ));
            }
            String::from_utf8(bytes).map_err(|_| {
                io::Error::new(io::ErrorKind::InvalidData, "the private key is not text")
            })?
        }
        Some(p) => {
            mpt_config::files::read_text(p, limit)
                .map_err(|m| io::Error::new(io::ErrorKind::InvalidInput, m))?
                .0
        }
    };
    let k = keys::decode(&text)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("the private key {e}")))?;
    println!("{}", keys::encode(&PrivateKey(k).public().0));
    Ok(())
}
