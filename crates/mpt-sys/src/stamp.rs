//! Kernel receive timestamps for measuring instruments (`mpt-probe`).
//!
//! With `SO_TIMESTAMPNS` the kernel stamps each datagram with
//! CLOCK_REALTIME in nanoseconds when it enters the socket layer (for a
//! veth or loopback, in the sender's softirq), so the receiver's stamp does
//! not include the time the receiving process took to be scheduled and to
//! call `recvmsg`. [`clock_resolution_ns`] and [`clock_granularity_ns`]
//! state what the clock itself can resolve.
//!
//! Invariants: [`recv_stamped`] never blocks longer than the socket's own
//! timeout allows; a datagram without a timestamp control message is
//! returned with `None` rather than an error; nothing here retains a
//! pointer past the call that uses it.

use std::io;
use std::os::fd::{AsFd, AsRawFd};

use crate::packet::setsockopt_int;

/// Ask the kernel to stamp every datagram received on `sock` (nanoseconds,
/// CLOCK_REALTIME).
pub fn enable_rx_timestamps(sock: &impl AsFd) -> io::Result<()> {
    let fd = sock.as_fd().as_raw_fd();
    if setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1) < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Make `sock`'s receive buffer `bytes` large: `SO_RCVBUFFORCE` (beyond
/// `net.core.rmem_max`, needs CAP_NET_ADMIN), else `SO_RCVBUF` (capped).
/// Returns whether the forced size was granted.
pub fn set_recv_buffer(sock: &impl AsFd, bytes: usize) -> bool {
    let fd = sock.as_fd().as_raw_fd();
    let v = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    if setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, v) == 0 {
        return true;
    }
    setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, v);
    false
}

/// Receive one datagram into `buf`: its length and the kernel's receive
/// timestamp (ns since the UNIX epoch), if the socket had them enabled.
pub fn recv_stamped(sock: &impl AsFd, buf: &mut [u8]) -> io::Result<(usize, Option<u64>)> {
    recv_stamped_flags(sock, buf, 0)
}

/// As [`recv_stamped`], but `WouldBlock` at once when nothing is queued.
pub fn try_recv_stamped(sock: &impl AsFd, buf: &mut [u8]) -> io::Result<(usize, Option<u64>)> {
    recv_stamped_flags(sock, buf, libc::MSG_DONTWAIT)
}

fn recv_stamped_flags(
    sock: &impl AsFd,
    buf: &mut [u8],
    flags: libc::c_int,
) -> io::Result<(usize, Option<u64>)> {
    let mut stamp = None;
    let n = recv_with_cmsgs(sock, buf, flags, |level, ty, data| {
        if level == libc::SOL_SOCKET && ty == libc::SCM_TIMESTAMPNS {
            stamp = read_cmsg::<libc::timespec>(data).map(|ts| timespec_ns(&ts));
        }
    })?;
    Ok((n, stamp))
}

/// A timespec as ns (negative fields, which a stamp never has, read 0).
pub(crate) fn timespec_ns(ts: &libc::timespec) -> u64 {
    (ts.tv_sec.max(0) as u64) * 1_000_000_000 + ts.tv_nsec.max(0) as u64
}

/// One `recvmsg` into `buf` with `flags`; then `f(level, type, data)` for
/// each control message it brought, `data` the message's payload. Returns
/// the datagram's length.
pub(crate) fn recv_with_cmsgs(
    sock: &impl AsFd,
    buf: &mut [u8],
    flags: libc::c_int,
    mut f: impl FnMut(libc::c_int, libc::c_int, &[u8]),
) -> io::Result<usize> {
    let fd = sock.as_fd().as_raw_fd();
    // Room for SCM_TIMESTAMPING (three timespecs) and an extended error
    // with their headers, 8-aligned.
    let mut control = [0u64; 32];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: an all-zero msghdr is a valid value (null pointers, zero
    // lengths); the fields that matter are set below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control);
    // SAFETY: `msg` points to `iov` (describing `buf`, writable for its
    // length) and to `control` (writable for msg_controllen bytes); all
    // outlive the call, and the kernel writes only within those lengths.
    let n = unsafe { libc::recvmsg(fd, &mut msg, flags) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `msg` was filled by a successful recvmsg; CMSG_FIRSTHDR and
    // CMSG_NXTHDR stay within msg_control/msg_controllen, and a header is
    // read only when they return non-null.
    let mut cmsg = unsafe { libc::CMSG_FIRSTHDR(&msg) };
    while !cmsg.is_null() {
        // SAFETY: `cmsg` is non-null and points into `control` (see above).
        let hdr = unsafe { &*cmsg };
        // SAFETY: CMSG_LEN(0) is arithmetic on a constant.
        let head = unsafe { libc::CMSG_LEN(0) } as usize;
        let len = (hdr.cmsg_len as usize).saturating_sub(head);
        // SAFETY: the kernel wrote `cmsg_len` bytes for this message
        // within `control`; its payload starts at CMSG_DATA and is `len`
        // bytes long, clamped to what `control` holds.
        let data = unsafe {
            let start = libc::CMSG_DATA(cmsg);
            let end = control
                .as_ptr()
                .cast::<u8>()
                .add(std::mem::size_of_val(&control));
            let len = len.min(end.offset_from(start).max(0) as usize);
            std::slice::from_raw_parts(start, len)
        };
        f(hdr.cmsg_level, hdr.cmsg_type, data);
        // SAFETY: as for CMSG_FIRSTHDR; `cmsg` is a header within `msg`.
        cmsg = unsafe { libc::CMSG_NXTHDR(&msg, cmsg) };
    }
    Ok(n as usize)
}

/// A `T` read from the start of a control message's payload, if it holds
/// one.
pub(crate) fn read_cmsg<T: Copy>(data: &[u8]) -> Option<T> {
    (data.len() >= std::mem::size_of::<T>()).then(|| {
        // SAFETY: `data` holds at least size_of::<T>() bytes; the read is
        // unaligned-safe, and `T` is one of the plain C structs the
        // kernel writes there (timespec, sock_extended_err).
        unsafe { std::ptr::read_unaligned(data.as_ptr().cast::<T>()) }
    })
}

/// CLOCK_REALTIME now, ns since the UNIX epoch.
pub fn realtime_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The resolution the kernel states for CLOCK_REALTIME (`clock_getres`), ns.
pub fn clock_resolution_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_getres(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The smallest step CLOCK_REALTIME was seen to take between two
/// consecutive readings, over `samples` readings (ns): the granularity in
/// practice, which includes the cost of reading the clock.
pub fn clock_granularity_ns(samples: usize) -> u64 {
    let mut best = u64::MAX;
    let mut prev = realtime_ns();
    for _ in 0..samples {
        let now = realtime_ns();
        if now > prev {
            best = best.min(now - prev);
        }
        prev = now;
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;

    #[test]
    fn a_datagram_carries_a_kernel_stamp_between_send_and_receive() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        enable_rx_timestamps(&rx).unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let before = realtime_ns();
        tx.send_to(b"hello", rx.local_addr().unwrap()).unwrap();
        let mut buf = [0u8; 64];
        let (n, stamp) = recv_stamped(&rx, &mut buf).unwrap();
        let after = realtime_ns();
        assert_eq!(&buf[..n], b"hello");
        let stamp = stamp.expect("kernel timestamp");
        assert!(
            before <= stamp && stamp <= after,
            "{before} {stamp} {after}"
        );
    }

    #[test]
    fn try_recv_does_not_wait() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut buf = [0u8; 8];
        let e = try_recv_stamped(&rx, &mut buf).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
    }

    #[test]
    fn without_timestamps_enabled_there_is_none() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.send_to(b"x", rx.local_addr().unwrap()).unwrap();
        let mut buf = [0u8; 8];
        assert_eq!(recv_stamped(&rx, &mut buf).unwrap(), (1, None));
    }

    #[test]
    fn the_clock_resolves_at_least_microseconds() {
        assert!(clock_resolution_ns() <= 1_000);
        assert!(clock_granularity_ns(10_000) < 1_000_000);
    }
}
