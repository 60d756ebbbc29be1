//! Reading local files that hold configuration and keys.
//!
//! Invariants:
//! * only regular files are read: a directory, FIFO, socket or device is a
//!   clear error, found without blocking (the file is opened non-blocking
//!   and its type taken from the open descriptor, so a FIFO cannot make
//!   `mpt check` or `mpt up` hang, and nothing can be swapped in between
//!   the check and the read);
//! * reads are bounded: a file larger than its limit is refused before it is
//!   read into memory;
//! * the mode used for secret checks comes from the same descriptor.

use std::fs::{File, Metadata, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Largest configuration file accepted (tuning knob: a configuration with
/// 32 paths and comments is a few KiB).
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;
/// Largest key file accepted (a key is 44 characters of base64).
pub const MAX_KEY_FILE_BYTES: u64 = 4096;

/// What kind of file `meta` describes, for messages.
fn kind(meta: &Metadata) -> &'static str {
    let t = meta.file_type();
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO (named pipe)"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_block_device() || t.is_char_device() {
        "a device"
    } else {
        "not a regular file"
    }
}

/// Open `path` for reading without blocking and check that it is a regular
/// file of at most `limit` bytes.
fn open_regular(path: &Path, limit: u64) -> Result<(File, Metadata), String> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let meta = file
        .metadata()
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if !meta.is_file() {
        return Err(format!(
            "{} is {}; expected a regular file",
            path.display(),
            kind(&meta)
        ));
    }
    if meta.len() > limit {
        return Err(format!(
            "{} is {} bytes, more than the {} bytes accepted",
            path.display(),
            meta.len(),
            limit
        ));
    }
    Ok((file, meta))
}

/// Read a regular file of at most `limit` bytes as UTF-8 text.
pub fn read_text(path: &Path, limit: u64) -> Result<(String, Metadata), String> {
    let (file, meta) = open_regular(path, limit)?;
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    // The file may grow after the check: read one byte past the limit.
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if bytes.len() as u64 > limit {
        return Err(format!(
            "{} is larger than the {limit} bytes accepted",
            path.display()
        ));
    }
    let text =
        String::from_utf8(bytes).map_err(|_| format!("{} is not UTF-8 text", path.display()))?;
    Ok((text, meta))
}

/// Refuse a secret-holding file that group or others can read.
pub fn check_private(path: &Path, meta: &Metadata, what: &str) -> Result<(), String> {
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(format!(
            "{} holds {what} but is readable by others (mode {mode:03o}); run: chmod 600 {}",
            path.display(),
            path.display()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A scratch directory, removed when the guard drops.
    fn dir(name: &str) -> tempfile::TempDir {
        tempfile::Builder::new()
            .prefix(&format!("mpt-files-{name}-"))
            .tempdir()
            .unwrap()
    }

    #[test]
    fn directory_fifo_and_size_are_clear_errors() {
        let d = dir("kinds");
        let d = d.path();
        let e = read_text(d, 100).unwrap_err();
        assert!(e.contains("is a directory"), "{e}");
        let fifo = d.join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.is_ok_and(|s| s.success()), "mkfifo failed");
        let started = std::time::Instant::now();
        let e = read_text(&fifo, 100).unwrap_err();
        assert!(e.contains("FIFO"), "{e}");
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
        let big = d.join("big");
        std::fs::write(&big, vec![b'#'; 200]).unwrap();
        let e = read_text(&big, 100).unwrap_err();
        assert!(e.contains("200 bytes, more than the 100"), "{e}");
        let ok = d.join("ok");
        std::fs::write(&ok, "x = 1\n").unwrap();
        std::fs::set_permissions(&ok, std::fs::Permissions::from_mode(0o644)).unwrap();
        let (t, meta) = read_text(&ok, 100).unwrap();
        assert_eq!(t, "x = 1\n");
        assert!(check_private(&ok, &meta, "a key")
            .unwrap_err()
            .contains("mode 644"));
    }
}
