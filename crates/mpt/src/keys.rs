//! `mpt genkey` and `mpt pubkey`: static X25519 keys as base64 text.
//!
//! Invariants: a key file written by `genkey -o FILE` is created with mode
//! 0600 (never briefly readable by others); private keys are only ever
//! printed by `genkey` itself.

use std::fs::OpenOptions;
use std::io::{self, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
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
        None => {
            warn_if_stdout_is_shared_file();
            io::stdout().write_all(text.as_bytes())
        }
        Some(p) => {
            let mut f = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(p)
                .map_err(|e| create_error(p, e))?;
            f.write_all(text.as_bytes())
        }
    }
}

/// Why `genkey -o FILE` could not create FILE, in the user's terms.
fn create_error(p: &Path, e: io::Error) -> io::Error {
    let parent = p.parent().filter(|d| !d.as_os_str().is_empty());
    let why = match e.kind() {
        io::ErrorKind::AlreadyExists => {
            "it already exists (genkey never overwrites a key; remove it first)".to_string()
        }
        io::ErrorKind::NotFound => match parent {
            Some(d) => format!("the directory {} does not exist", d.display()),
            None => e.to_string(),
        },
        _ => e.to_string(),
    };
    io::Error::new(e.kind(), format!("cannot create {}: {why}", p.display()))
}

/// `mpt genkey > FILE` makes a file with the umask's mode (usually 0644),
/// which `mpt up` then refuses: say so while the key is being written.
fn warn_if_stdout_is_shared_file() {
    // The descriptor's target, as the shell opened it.
    let Ok(meta) = std::fs::metadata("/proc/self/fd/1") else {
        return;
    };
    let mode = meta.permissions().mode() & 0o777;
    if meta.is_file() && mode & 0o077 != 0 {
        eprintln!(
            "warning: standard output is a file readable by others (mode {mode:03o}); mpt refuses such a key file: run `chmod 600` on it, or use `mpt genkey -o FILE`"
        );
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
