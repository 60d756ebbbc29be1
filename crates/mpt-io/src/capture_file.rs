//! Opening a capture's file safely: the daemon runs as root and the file
//! holds the inner traffic in clear, while the directory it lands in
//! (`/tmp`, a home) may be writable by others.
//!
//! Invariants:
//! * a link at the path is never followed, and nothing that is not a
//!   regular file (a FIFO, a socket, a device, a directory) is opened:
//!   each is refused with a message that says what is there;
//! * the file written is always a fresh one this call created, mode 0600,
//!   owned by the daemon's user: created exclusively (`O_EXCL`, which
//!   fails on any name that exists, a link too) under a temporary name in
//!   the same directory, then renamed over the path. An existing regular
//!   file is so replaced atomically, never taken over with the mode and
//!   owner another user gave it; a link planted at the last moment is
//!   replaced, not followed;
//! * a failure leaves no temporary file behind.
//!
//! Called on the capture's writer thread, never the event loop's: a slow
//! or blocking file system cannot stall forwarding.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Temporary names made so far (unique within the process).
static MADE: AtomicU64 = AtomicU64::new(0);

/// What is at a path, in words, if it may not be written.
fn refused_kind(m: &std::fs::Metadata) -> Option<&'static str> {
    let t = m.file_type();
    if t.is_symlink() {
        Some("a symbolic link (a capture never follows links)")
    } else if t.is_fifo() {
        Some("a FIFO (a capture writes regular files only)")
    } else if t.is_socket() {
        Some("a socket")
    } else if t.is_block_device() || t.is_char_device() {
        Some("a device")
    } else if t.is_dir() {
        Some("a directory")
    } else {
        None
    }
}

/// Why `path` cannot be a capture's file, checked without opening it
/// (`None`: it may be); for a clear message before any work.
pub fn check(path: &Path) -> Option<String> {
    match std::fs::symlink_metadata(path) {
        Ok(m) => refused_kind(&m).map(|k| {
            format!(
                "refusing to capture to {}: it is {k}; remove it or choose another name",
                path.display()
            )
        }),
        Err(_) => None,
    }
}

/// Create the capture's file at `path` (module documentation).
pub fn create(path: &Path) -> io::Result<File> {
    if let Some(why) = check(path) {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, why));
    }
    let name = path.file_name().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{}: not a file name", path.display()),
        )
    })?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp: PathBuf = dir.join(format!(
        ".{}.mpt-{}-{}",
        name.to_string_lossy(),
        std::process::id(),
        MADE.fetch_add(1, Ordering::Relaxed)
    ));
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot write {}: {e}", path.display())))?;
    if let Err(e) = std::fs::rename(&tmp, path) {
        let _ = std::fs::remove_file(&tmp);
        let hint = if e.kind() == io::ErrorKind::PermissionDenied {
            " (a file of another user in a sticky directory such as /tmp cannot be replaced)"
        } else {
            ""
        };
        return Err(io::Error::new(
            e.kind(),
            format!("cannot write {}: {e}{hint}", path.display()),
        ));
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    /// A scratch directory, removed when the guard drops.
    fn scratch(name: &str) -> tempfile::TempDir {
        tempfile::Builder::new()
            .prefix(&format!("mpt-capfile-{name}-"))
            .tempdir()
            .unwrap()
    }

    fn leftovers(d: &Path) -> Vec<String> {
        std::fs::read_dir(d)
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(".mpt-"))
            .collect()
    }

    #[test]
    fn a_new_file_is_mode_0600() {
        let d = scratch("new");
        let d = d.path();
        let p = d.join("t.pcapng");
        create(&p).unwrap().write_all(b"x").unwrap();
        let m = std::fs::metadata(&p).unwrap();
        assert_eq!(m.permissions().mode() & 0o777, 0o600);
        assert!(leftovers(d).is_empty());
    }

    #[test]
    fn an_existing_file_is_replaced_not_taken_over() {
        let d = scratch("existing");
        let d = d.path();
        let p = d.join("t.pcapng");
        std::fs::write(&p, b"planted").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o666)).unwrap();
        let planted = std::fs::metadata(&p).unwrap().ino();
        // Whoever planted it keeps a handle: it must see none of the capture.
        let mut theirs = std::fs::File::open(&p).unwrap();
        create(&p).unwrap().write_all(b"secret").unwrap();
        let m = std::fs::metadata(&p).unwrap();
        assert_ne!(m.ino(), planted, "a fresh file, not the planted one");
        assert_eq!(m.permissions().mode() & 0o777, 0o600);
        let mut seen = String::new();
        std::io::Read::read_to_string(&mut theirs, &mut seen).unwrap();
        assert_eq!(seen, "planted");
    }

    #[test]
    fn a_symlink_is_refused_and_its_target_untouched() {
        let d = scratch("link");
        let d = d.path();
        let target = d.join("victim");
        std::fs::write(&target, b"keep").unwrap();
        let p = d.join("t.pcapng");
        std::os::unix::fs::symlink(&target, &p).unwrap();
        let e = create(&p).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert_eq!(std::fs::read(&target).unwrap(), b"keep");
        assert!(leftovers(d).is_empty());
    }

    #[test]
    fn a_directory_or_a_socket_is_refused() {
        let d = scratch("kinds");
        let d = d.path();
        let e = create(d).unwrap_err();
        assert!(e.to_string().contains("a directory"), "{e}");
        let s = d.join("sock");
        let _l = std::os::unix::net::UnixListener::bind(&s).unwrap();
        let e = create(&s).unwrap_err();
        assert!(e.to_string().contains("a socket"), "{e}");
        assert!(check(&d.join("absent")).is_none());
    }
}
