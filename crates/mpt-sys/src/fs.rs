//! File-system helpers that need the process's file creation mask.
//!
//! Invariant: the mask is changed only around one `bind` and always
//! restored; no other thread of mpt creates files meanwhile.

use std::io;
use std::os::unix::net::UnixListener;
use std::path::Path;

/// Bind a Unix listener at `path` whose socket file is created with mode
/// 0600 (no window in which others could connect).
pub fn bind_private(path: &Path) -> io::Result<UnixListener> {
    // SAFETY: umask only changes this process's file creation mask; it is
    // restored right after bind. No other thread creates files here.
    let old = unsafe { libc::umask(0o177) };
    let res = UnixListener::bind(path);
    // SAFETY: as above, restoring the previous mask.
    unsafe { libc::umask(old) };
    res
}
