//! Steering of a `SO_REUSEPORT` group: a classic BPF program, attached to
//! the group (`SO_ATTACH_REUSEPORT_CBPF`, Linux ≥ 4.5), chooses which of
//! the group's sockets receives each datagram. The program sees the UDP
//! payload from its first byte and returns the socket's index in the
//! group, in the order the sockets were bound; an index past the last
//! socket leaves the choice to the kernel's hash of the addresses.
//!
//! Invariant: the program is copied by the kernel (checked there: a bad
//! program is an error, never undefined behaviour), so nothing here
//! outlives the call.

use std::io;
use std::os::fd::RawFd;

/// `SO_ATTACH_REUSEPORT_CBPF` from `<asm-generic/socket.h>`.
const SO_ATTACH_REUSEPORT_CBPF: libc::c_int = 51;

/// One classic BPF instruction (`struct sock_filter`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BpfInsn {
    pub code: u16,
    pub jt: u8,
    pub jf: u8,
    pub k: u32,
}

/// `struct sock_fprog`.
#[repr(C)]
struct SockFprog {
    len: libc::c_ushort,
    filter: *const BpfInsn,
}

/// Attach `prog` to the `SO_REUSEPORT` group of socket `fd` (any member).
pub fn attach_reuseport_cbpf(fd: RawFd, prog: &[BpfInsn]) -> io::Result<()> {
    let len = libc::c_ushort::try_from(prog.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "program too long"))?;
    let fprog = SockFprog {
        len,
        filter: prog.as_ptr(),
    };
    // SAFETY: `fprog` is a properly laid out `struct sock_fprog` pointing
    // at `prog`, which lives for the call; the kernel copies the program
    // and keeps no pointer to either.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            SO_ATTACH_REUSEPORT_CBPF,
            (&fprog as *const SockFprog).cast(),
            std::mem::size_of::<SockFprog>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}
