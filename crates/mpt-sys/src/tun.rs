//! The TUN device: a file descriptor that reads and writes raw IP packets.
//!
//! Invariants:
//! * the device is created exclusively (`IFF_TUN_EXCL`): an existing
//!   interface of the same name is never hijacked;
//! * the device is not persistent: when the [`Tun`] is dropped, its file
//!   descriptor closes and the kernel removes the interface together with its
//!   addresses and routes, so no state outlives the daemon;
//! * the descriptor is non-blocking; reads and writes move exactly one packet
//!   without the 4-byte packet-information prefix (`IFF_NO_PI`);
//! * with offloads (`IFF_VNET_HDR` and `TUNSETOFFLOAD` accepted), every read
//!   and write carries a 10-byte virtio-net header first (see `offload`);
//!   when the kernel refuses them, the device is reopened without, and
//!   [`Tun::offload`] says which mode is active.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// `_IOW('T', 202, int)` from `<linux/if_tun.h>`.
const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
/// `_IOW('T', 208, unsigned int)`.
const TUNSETOFFLOAD: libc::c_ulong = 0x4004_54d0;
const TUN_F_CSUM: libc::c_uint = 0x01;
const TUN_F_TSO4: libc::c_uint = 0x02;
const TUN_F_TSO6: libc::c_uint = 0x04;
/// UDP segmentation offload (Linux ≥ 6.2).
const TUN_F_USO4: libc::c_uint = 0x20;
const TUN_F_USO6: libc::c_uint = 0x40;

/// `struct ifreq` as TUNSETIFF reads it: name then flags, padded to 40 bytes.
#[repr(C)]
struct IfReq {
    name: [libc::c_char; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// An open TUN device.
#[derive(Debug)]
pub struct Tun {
    fd: OwnedFd,
    name: String,
    offload: bool,
    uso: bool,
}

/// Errors creating a TUN device, worded for the operator.
pub fn explain(name: &str, err: io::Error) -> io::Error {
    let why = match err.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => {
            "permission denied: creating a TUN device needs CAP_NET_ADMIN (run as root)".to_string()
        }
        Some(libc::EBUSY) | Some(libc::EEXIST) => {
            format!("an interface named '{name}' already exists; choose another tunnel.name")
        }
        Some(libc::ENOENT) | Some(libc::ENODEV) => {
            "/dev/net/tun is missing: load the tun module (modprobe tun)".to_string()
        }
        _ => err.to_string(),
    };
    io::Error::new(
        err.kind(),
        format!("cannot create TUN device '{name}': {why}"),
    )
}

/// Whether an interface of this name exists (in this network namespace).
pub fn interface_exists(name: &str) -> bool {
    let Ok(c) = CString::new(name) else {
        return false;
    };
    // SAFETY: `c` is a valid NUL-terminated string that outlives the call;
    // if_nametoindex only reads it.
    unsafe { libc::if_nametoindex(c.as_ptr()) != 0 }
}

/// Which descriptor of a device [`Tun::open`] makes.
#[derive(Clone, Copy)]
enum Queues {
    /// The device's only one.
    One,
    /// The first of a multi-queue device (which it creates).
    First,
    /// Another queue of that device.
    More,
}

impl Tun {
    /// Create the TUN device `name` (non-blocking, no packet info), with
    /// TSO/checksum offloads if `offload` and the kernel supports them.
    pub fn create(name: &str, offload: bool) -> io::Result<Tun> {
        let mut q = Self::create_queues(name, 1, offload)?;
        Ok(q.remove(0))
    }

    /// Create the TUN device `name` with `n` queues (`IFF_MULTI_QUEUE` for
    /// more than one), one descriptor each, with offloads as
    /// [`Tun::create`]: the kernel spreads the packets it routes into the
    /// device over the queues by flow, and a flow whose packets were last
    /// written through a queue is read from that queue (the device's flow
    /// table), so whoever reads a queue mostly reads the flows it writes.
    /// Each queue has a qdisc of its own (`mq`).
    pub fn create_queues(name: &str, n: usize, offload: bool) -> io::Result<Vec<Tun>> {
        if name.is_empty() || name.len() >= libc::IFNAMSIZ {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "bad interface name",
            ));
        }
        if interface_exists(name) {
            return Err(explain(name, io::Error::from_raw_os_error(libc::EEXIST)));
        }
        if offload {
            if let Ok(mut qs) = Self::open_queues(name, n, true) {
                if let Some(uso) = Self::set_offload(&qs[0]) {
                    qs.iter_mut().for_each(|q| q.uso = uso);
                    return Ok(qs);
                }
                // Dropping `qs` removes the device; fall back below.
            }
        }
        Self::open_queues(name, n, false)
    }

    fn open_queues(name: &str, n: usize, vnet: bool) -> io::Result<Vec<Tun>> {
        if n <= 1 {
            return Ok(vec![Self::open(name, vnet, Queues::One)?]);
        }
        let mut queues = vec![Self::open(name, vnet, Queues::First)?];
        for _ in 1..n {
            queues.push(Self::open(name, vnet, Queues::More)?);
        }
        Ok(queues)
    }

    /// Turn on the device's offloads (any queue): `Some(uso)` when on.
    fn set_offload(t: &Tun) -> Option<bool> {
        let tcp = TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6;
        // UDP segmentation too where the kernel has it, else TCP only.
        for (flags, uso) in [(tcp | TUN_F_USO4 | TUN_F_USO6, true), (tcp, false)] {
            // SAFETY: TUNSETOFFLOAD takes an unsigned int by value.
            let rc =
                unsafe { libc::ioctl(t.fd.as_raw_fd(), TUNSETOFFLOAD, flags as libc::c_ulong) };
            if rc == 0 {
                return Some(uso);
            }
        }
        None
    }

    fn open(name: &str, vnet: bool, queues: Queues) -> io::Result<Tun> {
        let path = c"/dev/net/tun";
        // SAFETY: `path` is a valid C string; open has no other preconditions.
        let raw = unsafe {
            libc::open(
                path.as_ptr(),
                libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC,
            )
        };
        if raw < 0 {
            return Err(explain(name, io::Error::last_os_error()));
        }
        // SAFETY: `raw` is a freshly opened descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let mut req = IfReq {
            name: [0; libc::IFNAMSIZ],
            flags: 0,
            _pad: [0; 22],
        };
        for (d, s) in req.name.iter_mut().zip(name.bytes()) {
            *d = s as libc::c_char;
        }
        let mut flags = libc::IFF_TUN | libc::IFF_NO_PI;
        match queues {
            Queues::One => flags |= libc::IFF_TUN_EXCL,
            Queues::First => flags |= libc::IFF_TUN_EXCL | libc::IFF_MULTI_QUEUE,
            // Attach to the device the first queue made.
            Queues::More => flags |= libc::IFF_MULTI_QUEUE,
        }
        if vnet {
            flags |= libc::IFF_VNET_HDR;
        }
        req.flags = flags as libc::c_short;
        // SAFETY: TUNSETIFF reads and writes a `struct ifreq`; `req` is a
        // properly sized and aligned repr(C) equivalent that lives for the call.
        let rc = unsafe { libc::ioctl(fd.as_raw_fd(), TUNSETIFF, &mut req as *mut IfReq) };
        if rc < 0 {
            return Err(explain(name, io::Error::last_os_error()));
        }
        Ok(Tun {
            fd,
            name: name.to_string(),
            offload: vnet,
            uso: false,
        })
    }

    /// Whether reads and writes carry a virtio-net header (offloads on).
    /// Whether the kernel hands us UDP super-packets too (USO).
    pub fn uso(&self) -> bool {
        self.uso
    }

    pub fn offload(&self) -> bool {
        self.offload
    }

    /// Write `hdr` followed by `pkt` as one packet (offload mode).
    pub fn write_vectored(&self, hdr: &[u8], pkt: &[u8]) -> io::Result<usize> {
        let iov = [
            libc::iovec {
                iov_base: hdr.as_ptr() as *mut libc::c_void,
                iov_len: hdr.len(),
            },
            libc::iovec {
                iov_base: pkt.as_ptr() as *mut libc::c_void,
                iov_len: pkt.len(),
            },
        ];
        // SAFETY: both iovecs point at live, readable buffers of the given
        // lengths for the duration of the call; writev does not write them.
        let n = unsafe { libc::writev(self.fd.as_raw_fd(), iov.as_ptr(), 2) };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Read one packet into `buf`; `WouldBlock` when none is queued.
    pub fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: `buf` is valid for writes of `buf.len()` bytes and the
        // descriptor is open for the lifetime of `self`.
        let n = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }

    /// Write one packet.
    pub fn write(&self, pkt: &[u8]) -> io::Result<usize> {
        // SAFETY: `pkt` is valid for reads of `pkt.len()` bytes and the
        // descriptor is open for the lifetime of `self`.
        let n = unsafe { libc::write(self.fd.as_raw_fd(), pkt.as_ptr().cast(), pkt.len()) };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }
}

impl AsRawFd for Tun {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}
