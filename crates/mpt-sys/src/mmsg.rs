//! Batched UDP system calls: `recvmmsg(2)` and `sendmmsg(2)`, many
//! datagrams per call, with UDP GSO (`UDP_SEGMENT`) and GRO (`UDP_GRO`)
//! when the kernel has them (Linux ≥ 4.18 / 5.0; detected per socket).
//!
//! The buffers belong to the caller; this module only builds the kernel's
//! message headers over them (scratch vectors reused within their capacity,
//! so a warm call allocates nothing).
//!
//! Invariants:
//! * every pointer handed to the kernel points into a buffer borrowed for
//!   the duration of the call;
//! * a message with `segment > 0` carries one `UDP_SEGMENT` control
//!   message; the kernel cuts its payload (the concatenation of its chunks)
//!   into datagrams of that size, the last possibly shorter;
//! * a message with `tos > 0` carries one `IP_TOS` (IPv4 destination) or
//!   `IPV6_TCLASS` (IPv6) control message: every datagram of it leaves
//!   with that TOS / traffic-class byte;
//! * every message that could not be sent is reported with its index.

use std::io;
use std::net::{SocketAddr, SocketAddrV4, SocketAddrV6, UdpSocket};
use std::os::fd::AsRawFd;

/// `UDP_SEGMENT` and `UDP_GRO` from `<linux/udp.h>`.
const UDP_SEGMENT: libc::c_int = 103;
const UDP_GRO: libc::c_int = 104;
/// Space for one control message with a small integer (CMSG_SPACE(4)).
const CMSG_ONE: usize = 24;
/// Space for the control messages of one datagram: `UDP_SEGMENT` and the
/// TOS.
const CMSG_BYTES: usize = 2 * CMSG_ONE;
type Cmsg = [u64; CMSG_BYTES / 8];

fn set_int_opt(sock: &UdpSocket, opt: libc::c_int, v: libc::c_int) -> bool {
    crate::packet::setsockopt_int(sock.as_raw_fd(), libc::SOL_UDP, opt, v) == 0
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

/// Write a control message `(level, ty, value)` into `buf` at byte `at`
/// (a multiple of [`CMSG_ONE`]); `value` is 2 or 4 bytes, as the option
/// wants it. Returns where the next one goes (the control length to
/// declare so far).
fn write_cmsg(
    buf: &mut Cmsg,
    at: usize,
    level: libc::c_int,
    ty: libc::c_int,
    value: &[u8],
) -> usize {
    let hdr_len = std::mem::size_of::<libc::cmsghdr>();
    assert!(at.is_multiple_of(CMSG_ONE) && at + CMSG_ONE <= CMSG_BYTES && value.len() <= 4);
    // SAFETY: `buf` is 8-byte aligned and `at` a multiple of CMSG_ONE (24)
    // with CMSG_ONE bytes left (asserted): room for a cmsghdr (16 bytes on
    // 64-bit Linux) followed by up to 4 bytes of data, and the header's
    // start is 8-byte aligned.
    unsafe {
        let base = buf.as_mut_ptr().cast::<u8>().add(at);
        let c = base.cast::<libc::cmsghdr>();
        (*c).cmsg_len = (hdr_len + value.len()) as _;
        (*c).cmsg_level = level;
        (*c).cmsg_type = ty;
        std::ptr::copy_nonoverlapping(value.as_ptr(), base.add(hdr_len), value.len());
    }
    at + CMSG_ONE
}

/// The control messages of one outgoing message: its GSO segment size and
/// its TOS, each if set. Returns the control length (0: none).
fn write_send_cmsgs(buf: &mut Cmsg, m: &SendMsg) -> usize {
    let mut at = 0;
    if m.segment > 0 && m.segment <= usize::from(u16::MAX) {
        let seg = (m.segment as u16).to_ne_bytes();
        at = write_cmsg(buf, at, libc::SOL_UDP, UDP_SEGMENT, &seg);
    }
    if m.tos != 0 {
        let v = libc::c_int::from(m.tos).to_ne_bytes();
        at = match m.dst {
            SocketAddr::V4(_) => write_cmsg(buf, at, libc::IPPROTO_IP, libc::IP_TOS, &v),
            SocketAddr::V6(_) => write_cmsg(buf, at, libc::IPPROTO_IPV6, libc::IPV6_TCLASS, &v),
        };
    }
    at
}

/// Ask for the TOS / traffic-class byte of each received datagram (for
/// its ECN bits, RFC 6040); returns whether the kernel agreed.
pub fn enable_recv_tos(sock: &UdpSocket) -> bool {
    let fd = sock.as_raw_fd();
    let v4 = crate::packet::setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_RECVTOS, 1) == 0;
    let v6 = crate::packet::setsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_RECVTCLASS, 1) == 0;
    v4 || v6
}

/// The `UDP_GRO` segment size and the TOS / traffic-class byte from a
/// received control buffer (each `None` when absent).
// `cmsg_len` and `msg_controllen` are `usize` on glibc but not on every libc.
#[allow(clippy::unnecessary_cast)]
fn read_recv_cmsgs(buf: &Cmsg, controllen: usize) -> (Option<usize>, Option<u8>) {
    let hdr_len = std::mem::size_of::<libc::cmsghdr>();
    let end = controllen.min(CMSG_BYTES);
    let (mut gro, mut tos) = (None, None);
    let mut at = 0;
    while at + hdr_len <= end {
        // SAFETY: `at + hdr_len <= end <= CMSG_BYTES`, so the header lies
        // within the buffer; `at` is a multiple of 8 (the buffer is u64-
        // aligned), as the kernel aligns each control message.
        let (level, ty, len) = unsafe {
            let c = buf.as_ptr().cast::<u8>().add(at).cast::<libc::cmsghdr>();
            ((*c).cmsg_level, (*c).cmsg_type, (*c).cmsg_len as usize)
        };
        if len < hdr_len || at + len > end {
            break;
        }
        let data_len = len - hdr_len;
        // SAFETY: the data lies within `at + hdr_len .. at + len <= end`.
        let data = unsafe {
            std::slice::from_raw_parts(buf.as_ptr().cast::<u8>().add(at + hdr_len), data_len)
        };
        match (level, ty) {
            (libc::SOL_UDP, UDP_GRO) if data_len >= 4 => {
                gro = Some(i32::from_ne_bytes([data[0], data[1], data[2], data[3]]) as usize);
            }
            (libc::SOL_UDP, UDP_GRO) if data_len >= 2 => {
                gro = Some(usize::from(u16::from_ne_bytes([data[0], data[1]])));
            }
            // IPv4 gives the byte itself, IPv6 an int.
            (libc::IPPROTO_IP, libc::IP_TOS) if data_len >= 1 => tos = Some(data[0]),
            (libc::IPPROTO_IPV6, libc::IPV6_TCLASS) if data_len >= 4 => {
                tos = Some(i32::from_ne_bytes([data[0], data[1], data[2], data[3]]) as u8);
            }
            _ => {}
        }
        at += len.div_ceil(8) * 8;
    }
    (gro, tos)
}

/// One received buffer: its source, its length, and the size of the
/// datagrams in it (`segment == len` unless the kernel coalesced several
/// with GRO; then datagram `j` starts at `j * segment`, the last may be
/// shorter).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RecvMeta {
    pub from: Option<SocketAddr>,
    pub len: usize,
    pub segment: usize,
    /// The outer TOS / traffic-class byte (0 unless [`enable_recv_tos`];
    /// GRO coalesces only datagrams whose bytes agree).
    pub tos: u8,
}

/// A byte range of the caller's send buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunk {
    pub start: usize,
    pub len: usize,
}

/// One message of a `sendmmsg`: chunks `first..first + count` (of the
/// chunk list passed along) to `dst`, cut into `segment`-byte datagrams by
/// the kernel when `segment > 0` (UDP GSO).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendMsg {
    pub dst: SocketAddr,
    pub first: usize,
    pub count: usize,
    pub segment: usize,
    /// TOS / traffic-class byte of its datagrams (0: the socket's).
    pub tos: u8,
}

fn zeroed_storage() -> libc::sockaddr_storage {
    // SAFETY: an all-zero sockaddr_storage is a valid value.
    unsafe { std::mem::zeroed() }
}

fn zeroed_mmsghdr() -> libc::mmsghdr {
    // SAFETY: an all-zero mmsghdr is valid (null pointers, zero lengths).
    unsafe { std::mem::zeroed() }
}

/// The kernel-facing headers of one batch call, reused within their
/// capacity.
struct Scratch {
    addrs: Vec<libc::sockaddr_storage>,
    ctrl: Vec<Cmsg>,
    iovs: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
    /// Per message to send: its first iovec and how many (`None`: its
    /// chunks are out of range).
    iov_spans: Vec<Option<(usize, usize)>>,
}

impl Scratch {
    fn new(capacity: usize) -> Self {
        Self {
            addrs: vec![zeroed_storage(); capacity],
            ctrl: vec![[0u64; CMSG_BYTES / 8]; capacity],
            iovs: Vec::with_capacity(capacity),
            msgs: Vec::with_capacity(capacity),
            iov_spans: Vec::with_capacity(capacity),
        }
    }
}

/// Scratch for `recvmmsg` over up to `capacity` buffers.
pub struct MmsgRecv(Scratch);

impl MmsgRecv {
    pub fn new(capacity: usize) -> Self {
        Self(Scratch::new(capacity))
    }

    /// Receive into `bufs` (at most `capacity` of them) without blocking;
    /// fills `meta[i]` for each buffer filled and returns how many.
    /// `WouldBlock` when nothing is queued.
    #[allow(clippy::unnecessary_cast)] // msg_controllen differs across libcs
    pub fn recv(
        &mut self,
        sock: &UdpSocket,
        bufs: &mut [Vec<u8>],
        meta: &mut [RecvMeta],
    ) -> io::Result<usize> {
        let n = bufs.len().min(meta.len()).min(self.0.addrs.len());
        let Scratch {
            addrs,
            ctrl,
            iovs,
            msgs,
            ..
        } = &mut self.0;
        iovs.clear();
        iovs.extend(bufs[..n].iter_mut().map(|b| libc::iovec {
            iov_base: b.as_mut_ptr().cast(),
            iov_len: b.len(),
        }));
        msgs.clear();
        msgs.extend((0..n).map(|_| zeroed_mmsghdr()));
        for i in 0..n {
            let h = &mut msgs[i].msg_hdr;
            h.msg_name = (&mut addrs[i] as *mut libc::sockaddr_storage).cast();
            h.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            h.msg_iov = &mut iovs[i];
            h.msg_iovlen = 1;
            h.msg_control = ctrl[i].as_mut_ptr().cast();
            h.msg_controllen = CMSG_BYTES as _;
        }
        // SAFETY: `msgs` holds `n` headers whose name, iovec and control
        // pointers refer to live buffers borrowed for this call.
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
            let len = (m.msg_len as usize).min(bufs[i].len());
            let (gro, tos) = read_recv_cmsgs(&ctrl[i], m.msg_hdr.msg_controllen as usize);
            let gro = gro.unwrap_or(0);
            meta[i] = RecvMeta {
                from: from_sockaddr(&addrs[i]),
                len,
                segment: if gro == 0 { len.max(1) } else { gro },
                tos: tos.unwrap_or(0),
            };
        }
        Ok(r as usize)
    }
}

/// `chunks` of `buf` appended to `iovs`, those that lie back to back in
/// `buf` as one iovec (the kernel copies a long run faster than many short
/// ones); a chunk outside `buf` as an empty iovec.
fn push_iovecs(iovs: &mut Vec<libc::iovec>, buf: &[u8], chunks: &[Chunk]) {
    // Where the last iovec pushed for these chunks ends in `buf`.
    let mut end = None;
    for c in chunks {
        let Some(e) = c.start.checked_add(c.len).filter(|&e| e <= buf.len()) else {
            iovs.push(libc::iovec {
                iov_base: std::ptr::null_mut(),
                iov_len: 0,
            });
            end = None;
            continue;
        };
        match iovs.last_mut() {
            Some(last) if end == Some(c.start) => last.iov_len += c.len,
            _ => iovs.push(libc::iovec {
                // sendmsg only reads through iov_base; the cast to *mut is
                // the C API's, not a write.
                iov_base: buf[c.start..].as_ptr() as *mut libc::c_void,
                iov_len: c.len,
            }),
        }
        end = Some(e);
    }
}

/// Scratch for `sendmmsg` of up to `capacity` messages and chunks.
pub struct MmsgSend(Scratch);

impl MmsgSend {
    pub fn new(capacity: usize) -> Self {
        Self(Scratch::new(capacity))
    }

    /// Send `msgs` (at most `capacity`) whose chunks lie in `buf`; calls
    /// `failed(index, error)` for each message the kernel refused.
    /// Messages or chunks that lie outside `buf` or beyond the capacity
    /// are reported as `InvalidInput` and not sent. Once the socket's send
    /// buffer is full (`WouldBlock`), the rest are reported so, unsent.
    pub fn send(
        &mut self,
        sock: &UdpSocket,
        buf: &[u8],
        msgs: &[SendMsg],
        chunks: &[Chunk],
        mut failed: impl FnMut(usize, io::Error),
    ) {
        let n = msgs.len().min(self.0.addrs.len());
        for (i, _) in msgs.iter().enumerate().skip(n) {
            failed(i, io::Error::from(io::ErrorKind::InvalidInput));
        }
        let Scratch {
            addrs,
            ctrl,
            iovs,
            msgs: hdrs,
            iov_spans: spans,
        } = &mut self.0;
        // Each message's chunks as iovecs; (first iovec, count) per message.
        iovs.clear();
        spans.clear();
        for m in &msgs[..n] {
            let first = iovs.len();
            let cs = m
                .first
                .checked_add(m.count)
                .and_then(|e| chunks.get(m.first..e));
            spans.push(cs.map(|cs| {
                push_iovecs(iovs, buf, cs);
                (first, iovs.len() - first)
            }));
        }
        hdrs.clear();
        hdrs.extend((0..n).map(|_| zeroed_mmsghdr()));
        for (k, m) in msgs[..n].iter().enumerate() {
            let h = &mut hdrs[k].msg_hdr;
            h.msg_namelen = to_sockaddr(&m.dst, &mut addrs[k]);
            h.msg_name = (&mut addrs[k] as *mut libc::sockaddr_storage).cast();
            if let Some((first, count)) = spans[k] {
                h.msg_iov = iovs[first..].as_mut_ptr();
                h.msg_iovlen = count as _;
            }
            let controllen = write_send_cmsgs(&mut ctrl[k], m);
            if controllen > 0 {
                h.msg_controllen = controllen as _;
                h.msg_control = ctrl[k].as_mut_ptr().cast();
            }
        }
        let mut start = 0;
        while start < n {
            // SAFETY: `hdrs[start..n]` are valid headers whose name, iovec
            // and control pointers refer to `addrs`, `iovs`, `ctrl` and
            // `buf`, all live for this call; null iovecs have length zero.
            let r = unsafe {
                libc::sendmmsg(
                    sock.as_raw_fd(),
                    hdrs[start..].as_mut_ptr(),
                    (n - start) as libc::c_uint,
                    libc::MSG_DONTWAIT,
                )
            };
            if r <= 0 {
                let err = if r < 0 {
                    io::Error::last_os_error()
                } else {
                    io::Error::other("nothing sent")
                };
                if err.kind() == io::ErrorKind::WouldBlock {
                    // The send buffer is full: so is it for every later
                    // message (no call for each; their order is kept).
                    for i in start..n {
                        failed(i, io::ErrorKind::WouldBlock.into());
                    }
                    return;
                }
                failed(start, err);
                start += 1;
            } else {
                start += r as usize;
            }
        }
    }
}

#[cfg(test)]
#[path = "mmsg_tests.rs"]
mod tests;
