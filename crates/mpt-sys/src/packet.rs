//! Raw link-layer sockets (AF_PACKET) and precise waiting, for the lab's
//! link emulator (`mpt-netem`), which forwards Ethernet frames between two
//! interfaces like a transparent bridge.
//!
//! Invariants:
//! * a [`PacketSocket`] sees every frame that arrives on its interface and
//!   none that it (or the host) sends there (`PACKET_IGNORE_OUTGOING`), so
//!   forwarding between two interfaces never loops;
//! * sockets are non-blocking; [`wait_readable`] sleeps with nanosecond
//!   resolution (ppoll) so that emulated delays are not rounded to
//!   milliseconds.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// `PACKET_IGNORE_OUTGOING` from `<linux/if_packet.h>` (Linux ≥ 4.20).
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
/// Socket buffer for bursts at line rate (tuning knob).
const PACKET_BUFFER_BYTES: libc::c_int = 8 << 20;

/// A raw socket bound to one interface.
pub struct PacketSocket {
    fd: OwnedFd,
    pub ifname: String,
}

fn last_err(what: &str, ifname: &str) -> io::Error {
    let e = io::Error::last_os_error();
    io::Error::new(e.kind(), format!("{what} on {ifname}: {e}"))
}

pub fn setsockopt_int(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    v: libc::c_int,
) -> libc::c_int {
    // SAFETY: `v` is a valid c_int for the duration of the call and its size
    // is passed; setsockopt does not retain the pointer.
    unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    }
}

impl PacketSocket {
    /// Open a raw socket on `ifname` receiving every protocol.
    pub fn open(ifname: &str) -> io::Result<PacketSocket> {
        let cname = CString::new(ifname).map_err(|_| io::Error::other("bad interface name"))?;
        // SAFETY: `cname` is a valid C string for the call.
        let ifindex = unsafe { libc::if_nametoindex(cname.as_ptr()) };
        if ifindex == 0 {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("no interface named {ifname}"),
            ));
        }
        let proto = (libc::ETH_P_ALL as u16).to_be();
        // SAFETY: plain socket(2) call with constant arguments.
        let raw = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                proto.into(),
            )
        };
        if raw < 0 {
            return Err(last_err("socket(AF_PACKET)", ifname));
        }
        // SAFETY: `raw` is a new descriptor owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: zeroed sockaddr_ll is a valid value; fields are set below.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = proto;
        sll.sll_ifindex = ifindex as i32;
        // SAFETY: `sll` is a valid sockaddr_ll and its exact size is passed.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&sll as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(last_err("bind", ifname));
        }
        if setsockopt_int(fd.as_raw_fd(), libc::SOL_PACKET, PACKET_IGNORE_OUTGOING, 1) < 0 {
            return Err(last_err("PACKET_IGNORE_OUTGOING", ifname));
        }
        for opt in [libc::SO_RCVBUFFORCE, libc::SO_SNDBUFFORCE] {
            let _ = setsockopt_int(fd.as_raw_fd(), libc::SOL_SOCKET, opt, PACKET_BUFFER_BYTES);
        }
        Ok(PacketSocket {
            fd,
            ifname: ifname.to_string(),
        })
    }

    /// Receive one frame; `WouldBlock` when none is queued.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: `buf` is valid for writes of its length; fd is open.
        let n = unsafe {
            libc::recv(
                self.fd.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT,
            )
        };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }

    /// Send one frame out of the interface.
    pub fn send(&self, frame: &[u8]) -> io::Result<usize> {
        // SAFETY: `frame` is valid for reads of its length; fd is open.
        let n = unsafe {
            libc::send(
                self.fd.as_raw_fd(),
                frame.as_ptr().cast(),
                frame.len(),
                libc::MSG_DONTWAIT,
            )
        };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }
}

impl std::os::fd::AsFd for PacketSocket {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsRawFd for PacketSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// Wait until one of `fds` is readable or `timeout_ns` passes (`None`:
/// forever). Returns the readable flags. EINTR returns all-false.
pub fn wait_readable(fds: &[RawFd], timeout_ns: Option<u64>) -> io::Result<Vec<bool>> {
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ts = timeout_ns.map(|ns| libc::timespec {
        tv_sec: (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    });
    let tsp = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `pfds` is a valid array of `pfds.len()` pollfd structs and
    // `tsp` is null or points to a timespec that outlives the call.
    let rc = unsafe {
        libc::ppoll(
            pfds.as_mut_ptr(),
            pfds.len() as libc::nfds_t,
            tsp,
            std::ptr::null(),
        )
    };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(vec![false; fds.len()]);
        }
        return Err(e);
    }
    Ok(pfds
        .iter()
        .map(|p| p.revents & (libc::POLLIN | libc::POLLERR) != 0)
        .collect())
}

/// Ask for precise timer wake-ups (default slack is 50 µs).
pub fn set_timer_slack_ns(ns: u64) {
    // SAFETY: PR_SET_TIMERSLACK takes an unsigned long value and no pointers.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, ns as libc::c_ulong, 0, 0, 0);
    }
}

/// CLOCK_MONOTONIC in nanoseconds.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
