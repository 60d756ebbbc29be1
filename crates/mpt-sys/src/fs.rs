//! File-system helpers that need the process's file creation mask.
//!
//! Invariant: the mask is changed only around one `bind` and always
//! restored; no other thread of mpt creates files meanwhile.

use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
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

/// Who is at the other end of a Unix stream socket (`SO_PEERCRED`): the
/// process id, user id and group id the kernel recorded at connect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerCred {
    pub pid: i32,
    pub uid: u32,
    pub gid: u32,
}

/// The credentials of `stream`'s peer.
pub fn peer_cred(stream: &UnixStream) -> io::Result<PeerCred> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` is a valid, writable ucred and `len` holds its size;
    // the kernel writes at most `len` bytes into it. The descriptor is
    // owned by `stream`, alive for the call.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            std::ptr::addr_of_mut!(cred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(PeerCred {
        pid: cred.pid,
        uid: cred.uid,
        gid: cred.gid,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_socket_pair_names_this_process() {
        let (a, _b) = UnixStream::pair().unwrap();
        let c = peer_cred(&a).unwrap();
        assert_eq!(c.pid as u32, std::process::id());
        // SAFETY: getuid has no preconditions and cannot fail.
        assert_eq!(c.uid, unsafe { libc::getuid() });
    }
}
