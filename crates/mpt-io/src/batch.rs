//! Batched UDP I/O: `recvmmsg(2)` and `sendmmsg(2)`, many datagrams per
//! system call, with UDP GSO (`UDP_SEGMENT`) and GRO (`UDP_GRO`) when the
//! kernel has them (Linux ≥ 4.18 / 5.0; detected per socket at run time).
//!
//! With GSO, consecutive datagrams of one size to one destination are laid
//! out back to back and sent as one "super-datagram" that the kernel cuts
//! late (one pass through the UDP/IP stack for up to 64 datagrams). With GRO,
//! the kernel hands up to 64 KiB of same-size datagrams in one buffer with
//! their size in a control message; [`RecvBatch::datagrams`] splits them.
//!
//! Invariants:
//! * buffers are allocated once, at construction; receiving and sending
//!   allocate nothing per packet (only the per-call `mmsghdr` vectors);
//! * a GSO super-datagram only ever holds datagrams to one destination, all
//!   of one size except possibly a shorter last one (the kernel's rule);
//! * every datagram that could not be sent is reported with its tag.

use std::io;
use std::net::{SocketAddr, SocketAddrV4, SocketAddrV6, UdpSocket};
use std::os::fd::AsRawFd;

use crate::workers::Span;

/// `UDP_SEGMENT` and `UDP_GRO` from `<linux/udp.h>`.
const UDP_SEGMENT: libc::c_int = 103;
const UDP_GRO: libc::c_int = 104;
/// Largest UDP payload of one super-datagram.
const GSO_MAX_BYTES: usize = 65_000;
/// Most segments per super-datagram (`UDP_MAX_SEGMENTS` of older kernels).
const GSO_MAX_SEGMENTS: usize = 64;
/// Space for one control message with a small integer (CMSG_SPACE(4)).
const CMSG_BYTES: usize = 24;

fn set_int_opt(sock: &UdpSocket, opt: libc::c_int, v: libc::c_int) -> bool {
    // SAFETY: `v` lives for the call and its size is passed; setsockopt
    // does not keep the pointer.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_UDP,
            opt,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    rc == 0
}

/// Whether the kernel accepts UDP GSO on this socket.
pub fn gso_supported(sock: &UdpSocket) -> bool {
    set_int_opt(sock, UDP_SEGMENT, 1400) && set_int_opt(sock, UDP_SEGMENT, 0)
}

/// Ask for UDP GRO on this socket; returns whether the kernel agreed.
pub fn enable_gro(sock: &UdpSocket) -> bool {
    set_int_opt(sock, UDP_GRO, 1)
}

fn to_sockaddr(a: &SocketAddr, out: &mut libc::sockaddr_storage) -> libc::socklen_t {
    match a {
        SocketAddr::V4(v4) => {
            // SAFETY: sockaddr_storage is large and aligned enough for a
            // sockaddr_in; we write a fully initialised value.
            let sin =
                unsafe { &mut *(out as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = v4.port().to_be();
            sin.sin_addr = libc::in_addr {
                s_addr: u32::from_ne_bytes(v4.ip().octets()),
            };
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t
        }
        SocketAddr::V6(v6) => {
            // SAFETY: as above, for sockaddr_in6.
            let sin6 =
                unsafe { &mut *(out as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = v6.port().to_be();
            sin6.sin6_flowinfo = v6.flowinfo();
            sin6.sin6_addr = libc::in6_addr {
                s6_addr: v6.ip().octets(),
            };
            sin6.sin6_scope_id = v6.scope_id();
            std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t
        }
    }
}

fn from_sockaddr(s: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match i32::from(s.ss_family) {
        libc::AF_INET => {
            // SAFETY: the kernel wrote a sockaddr_in (family checked).
            let sin = unsafe { &*(s as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            let ip = std::net::Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
            Some(SocketAddr::V4(SocketAddrV4::new(
                ip,
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: the kernel wrote a sockaddr_in6 (family checked).
            let sin6 =
                unsafe { &*(s as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            let ip = std::net::Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            let a = SocketAddrV6::new(
                ip,
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            );
            Some(SocketAddr::V6(a))
        }
        _ => None,
    }
}

/// Write a control message `(SOL_UDP, ty, value)` into `buf`; returns the
/// control length to declare.
fn write_cmsg(buf: &mut [u64; CMSG_BYTES / 8], ty: libc::c_int, value: u16) -> usize {
    let hdr_len = std::mem::size_of::<libc::cmsghdr>();
    // SAFETY: `buf` is 8-byte aligned and CMSG_BYTES long, enough for a
    // cmsghdr (16 bytes on 64-bit Linux) followed by a u16.
    unsafe {
        let c = buf.as_mut_ptr().cast::<libc::cmsghdr>();
        (*c).cmsg_len = (hdr_len + 2) as _;
        (*c).cmsg_level = libc::SOL_UDP;
        (*c).cmsg_type = ty;
        let data = buf.as_mut_ptr().cast::<u8>().add(hdr_len).cast::<u16>();
        data.write_unaligned(value);
    }
    CMSG_BYTES
}

/// Read the `UDP_GRO` segment size from a received control buffer.
// `cmsg_len` and `msg_controllen` are `usize` on glibc but not on every libc.
#[allow(clippy::unnecessary_cast)]
fn read_gro(buf: &[u64; CMSG_BYTES / 8], controllen: usize) -> Option<usize> {
    let hdr_len = std::mem::size_of::<libc::cmsghdr>();
    if controllen < hdr_len + 2 {
        return None;
    }
    // SAFETY: the kernel wrote at least one cmsghdr (length checked) into
    // this aligned buffer; the data follows the header.
    unsafe {
        let c = buf.as_ptr().cast::<libc::cmsghdr>();
        if (*c).cmsg_level != libc::SOL_UDP || (*c).cmsg_type != UDP_GRO {
            return None;
        }
        let data = buf.as_ptr().cast::<u8>().add(hdr_len);
        let v = if (*c).cmsg_len as usize >= hdr_len + 4 {
            data.cast::<i32>().read_unaligned() as usize
        } else {
            usize::from(data.cast::<u16>().read_unaligned())
        };
        Some(v)
    }
}

/// Receive slots for `recvmmsg`, each large enough for a GRO buffer.
pub struct RecvBatch {
    bufs: Vec<Vec<u8>>,
    addrs: Vec<libc::sockaddr_storage>,
    ctrl: Vec<[u64; CMSG_BYTES / 8]>,
    lens: Vec<usize>,
    segs: Vec<usize>,
    /// Scratch headers, rebuilt on every call inside their capacity (no
    /// allocation after construction).
    iovs: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
}

impl RecvBatch {
    pub fn new(capacity: usize, buf_bytes: usize) -> Self {
        // SAFETY: an all-zero sockaddr_storage is a valid value.
        let zero: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        Self {
            bufs: vec![vec![0u8; buf_bytes]; capacity],
            addrs: vec![zero; capacity],
            ctrl: vec![[0u64; CMSG_BYTES / 8]; capacity],
            lens: vec![0; capacity],
            segs: vec![0; capacity],
            iovs: Vec::with_capacity(capacity),
            msgs: Vec::with_capacity(capacity),
        }
    }

    pub fn capacity(&self) -> usize {
        self.bufs.len()
    }

    /// Receive up to `capacity` buffers without blocking. Returns how many;
    /// `WouldBlock` when none is queued.
    #[allow(clippy::unnecessary_cast)] // msg_controllen differs across libcs
    pub fn recv(&mut self, sock: &UdpSocket) -> io::Result<usize> {
        let n = self.bufs.len();
        let (iovs, msgs) = (&mut self.iovs, &mut self.msgs);
        iovs.clear();
        iovs.extend(self.bufs.iter_mut().map(|b| libc::iovec {
            iov_base: b.as_mut_ptr().cast(),
            iov_len: b.len(),
        }));
        msgs.clear();
        // SAFETY: an all-zero mmsghdr is valid; fields are set below.
        msgs.extend((0..n).map(|_| unsafe { std::mem::zeroed::<libc::mmsghdr>() }));
        for i in 0..n {
            let h = &mut msgs[i].msg_hdr;
            h.msg_name = (&mut self.addrs[i] as *mut libc::sockaddr_storage).cast();
            h.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            h.msg_iov = &mut iovs[i];
            h.msg_iovlen = 1;
            h.msg_control = self.ctrl[i].as_mut_ptr().cast();
            h.msg_controllen = CMSG_BYTES as _;
        }
        // SAFETY: `msgs` holds `n` headers whose name, iovec and control
        // pointers refer to live buffers owned by `self` and `iovs`.
        let r = unsafe {
            libc::recvmmsg(
                sock.as_raw_fd(),
                msgs.as_mut_ptr(),
                n as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        for (i, m) in msgs.iter().enumerate().take(r as usize) {
            self.lens[i] = (m.msg_len as usize).min(self.bufs[i].len());
            self.segs[i] = read_gro(&self.ctrl[i], m.msg_hdr.msg_controllen as usize).unwrap_or(0);
        }
        Ok(r as usize)
    }

    /// Buffer `i` of the last `recv`: its source, its length, and the size
    /// of the datagrams in it (several when the kernel coalesced them; the
    /// last may be shorter). Datagram `j` starts at `j * seg`.
    pub fn meta(&self, i: usize) -> (Option<SocketAddr>, usize, usize) {
        let len = self.lens[i];
        let seg = if self.segs[i] == 0 {
            len.max(1)
        } else {
            self.segs[i]
        };
        (from_sockaddr(&self.addrs[i]), len, seg)
    }

    /// Buffer `i` of the last `recv`: its source and the (offset, length)
    /// of each datagram in it.
    pub fn datagrams(
        &self,
        i: usize,
    ) -> (Option<SocketAddr>, impl Iterator<Item = (usize, usize)>) {
        let (from, len, seg) = self.meta(i);
        (
            from,
            (0..len)
                .step_by(seg)
                .map(move |off| (off, seg.min(len - off))),
        )
    }

    /// All receive buffers, for work on many datagrams at once (opening
    /// them in parallel); index them like [`RecvBatch::meta`].
    pub fn bufs_mut(&mut self) -> &mut [Vec<u8>] {
        &mut self.bufs
    }

    /// Bytes of datagram `(off, len)` in buffer `i`, for in-place processing.
    pub fn slice_mut(&mut self, i: usize, off: usize, len: usize) -> &mut [u8] {
        &mut self.bufs[i][off..off + len]
    }
}

struct Entry {
    start: usize,
    len: usize,
    seg: usize,
    segs: usize,
    /// A shorter last segment was appended: nothing more may follow.
    closed: bool,
    dst: SocketAddr,
    tag: u8,
}

/// Datagrams queued for one `sendmmsg`, merged into GSO super-datagrams
/// where allowed.
pub struct SendBatch {
    arena: Vec<u8>,
    used: usize,
    max_datagram: usize,
    entries: Vec<Entry>,
    max_entries: usize,
    gso: bool,
    /// Every queued datagram as (0, start, len) in `arena`.
    spans: Vec<Span>,
    /// Scratch for `flush`, reused within its capacity (no allocation after
    /// construction).
    addrs: Vec<libc::sockaddr_storage>,
    ctrl: Vec<[u64; CMSG_BYTES / 8]>,
    iovs: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
}

impl SendBatch {
    /// Room for `capacity` datagrams of up to `max_datagram` bytes.
    pub fn new(capacity: usize, max_datagram: usize, gso: bool) -> Self {
        // SAFETY: an all-zero sockaddr_storage is a valid value.
        let zero: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        Self {
            arena: vec![0u8; capacity * max_datagram],
            used: 0,
            max_datagram,
            entries: Vec::with_capacity(capacity),
            max_entries: capacity,
            gso,
            spans: Vec::with_capacity(capacity),
            addrs: vec![zero; capacity],
            ctrl: vec![[0u64; CMSG_BYTES / 8]; capacity],
            iovs: Vec::with_capacity(capacity),
            msgs: Vec::with_capacity(capacity),
        }
    }

    pub fn gso(&self) -> bool {
        self.gso
    }
    /// Datagrams queued.
    pub fn len(&self) -> usize {
        self.entries.iter().map(|e| e.segs).sum()
    }
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
    /// Whether another datagram may not fit: flush first.
    pub fn is_full(&self) -> bool {
        self.entries.len() >= self.max_entries || self.used + self.max_datagram > self.arena.len()
    }

    /// The queued datagrams as spans of one buffer, for work in place
    /// before `flush` (sealing them, in parallel).
    pub fn datagrams_mut(&mut self) -> (&mut [Vec<u8>], &[Span]) {
        (std::slice::from_mut(&mut self.arena), &self.spans)
    }

    /// The next free buffer (`max_datagram` bytes), to fill and `commit`.
    pub fn slot(&mut self) -> Option<&mut [u8]> {
        if self.is_full() {
            return None;
        }
        Some(&mut self.arena[self.used..self.used + self.max_datagram])
    }

    /// Queue the filled slot: `len` bytes to `dst`; `tag` (the path id)
    /// comes back with errors.
    pub fn commit(&mut self, len: usize, dst: SocketAddr, tag: u8) {
        if self.is_full() || len > self.max_datagram {
            return;
        }
        let start = self.used;
        self.used += len;
        self.spans.push((0, start, len));
        if self.gso {
            if let Some(e) = self.entries.last_mut() {
                let joins = !e.closed
                    && e.dst == dst
                    && e.start + e.len == start
                    && len <= e.seg
                    && e.segs < GSO_MAX_SEGMENTS
                    && e.len + len <= GSO_MAX_BYTES;
                if joins {
                    e.len += len;
                    e.segs += 1;
                    e.closed = len < e.seg;
                    return;
                }
            }
        }
        self.entries.push(Entry {
            start,
            len,
            seg: len,
            segs: 1,
            closed: false,
            dst,
            tag,
        });
    }

    /// Send everything queued; returns the failures as (tag, datagrams, error).
    pub fn flush(&mut self, sock: &UdpSocket) -> Vec<(u8, usize, io::Error)> {
        let mut failures = vec![];
        let n = self.entries.len();
        let Self {
            arena,
            entries,
            addrs,
            ctrl,
            iovs,
            msgs,
            ..
        } = self;
        iovs.clear();
        iovs.extend(entries.iter().map(|e| libc::iovec {
            iov_base: arena[e.start..].as_mut_ptr().cast(),
            iov_len: e.len,
        }));
        msgs.clear();
        // SAFETY: an all-zero mmsghdr is valid; fields are set below.
        msgs.extend((0..n).map(|_| unsafe { std::mem::zeroed::<libc::mmsghdr>() }));
        for (k, e) in entries.iter().enumerate() {
            let h = &mut msgs[k].msg_hdr;
            h.msg_namelen = to_sockaddr(&e.dst, &mut addrs[k]);
            h.msg_name = (&mut addrs[k] as *mut libc::sockaddr_storage).cast();
            h.msg_iov = &mut iovs[k];
            h.msg_iovlen = 1;
            if e.segs > 1 {
                h.msg_controllen = write_cmsg(&mut ctrl[k], UDP_SEGMENT, e.seg as u16) as _;
                h.msg_control = ctrl[k].as_mut_ptr().cast();
            }
        }
        let mut start = 0;
        while start < n {
            // SAFETY: `msgs[start..]` are valid headers pointing at live
            // buffers, addresses and control data owned by this frame.
            let r = unsafe {
                libc::sendmmsg(
                    sock.as_raw_fd(),
                    msgs[start..].as_mut_ptr(),
                    (n - start) as libc::c_uint,
                    libc::MSG_DONTWAIT,
                )
            };
            if r <= 0 {
                let e = &self.entries[start];
                let err = if r < 0 {
                    io::Error::last_os_error()
                } else {
                    io::Error::other("nothing sent")
                };
                if e.segs > 1 && matches!(err.raw_os_error(), Some(libc::EIO) | Some(libc::EINVAL))
                {
                    // The device cannot segment: stop using GSO on this socket.
                    self.gso = false;
                }
                failures.push((e.tag, e.segs, err));
                start += 1;
            } else {
                start += r as usize;
            }
        }
        self.entries.clear();
        self.spans.clear();
        self.used = 0;
        failures
    }
}

#[cfg(test)]
#[path = "batch_tests.rs"]
mod tests;
