//! Batched UDP I/O: `recvmmsg(2)` and `sendmmsg(2)`, many datagrams per
//! system call.
//!
//! Invariants:
//! * buffers are allocated once, at construction; receiving and sending
//!   allocate nothing per packet;
//! * `recv` fills at most `capacity` slots and reports each datagram's
//!   length and source; `send` reports, for every datagram that could not
//!   be sent, its index and the error, so the caller can count it.

use std::io;
use std::net::{SocketAddr, SocketAddrV4, SocketAddrV6, UdpSocket};
use std::os::fd::AsRawFd;

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

/// Receive slots for `recvmmsg`.
pub struct RecvBatch {
    bufs: Vec<Vec<u8>>,
    addrs: Vec<libc::sockaddr_storage>,
    lens: Vec<usize>,
}

impl RecvBatch {
    pub fn new(capacity: usize, buf_bytes: usize) -> Self {
        // SAFETY: an all-zero sockaddr_storage is a valid value.
        let zero: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        Self {
            bufs: vec![vec![0u8; buf_bytes]; capacity],
            addrs: vec![zero; capacity],
            lens: vec![0; capacity],
        }
    }

    pub fn capacity(&self) -> usize {
        self.bufs.len()
    }

    /// Receive up to `capacity` datagrams without blocking. Returns how
    /// many; `WouldBlock` when none is queued.
    pub fn recv(&mut self, sock: &UdpSocket) -> io::Result<usize> {
        let n = self.bufs.len();
        let mut iovs: Vec<libc::iovec> = self
            .bufs
            .iter_mut()
            .map(|b| libc::iovec {
                iov_base: b.as_mut_ptr().cast(),
                iov_len: b.len(),
            })
            .collect();
        // SAFETY: an all-zero mmsghdr is valid; fields are set below.
        let mut msgs: Vec<libc::mmsghdr> = (0..n).map(|_| unsafe { std::mem::zeroed() }).collect();
        for i in 0..n {
            msgs[i].msg_hdr.msg_name = (&mut self.addrs[i] as *mut libc::sockaddr_storage).cast();
            msgs[i].msg_hdr.msg_namelen =
                std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            msgs[i].msg_hdr.msg_iov = &mut iovs[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
        }
        // SAFETY: `msgs` holds `n` headers whose name and iovec pointers
        // refer to live buffers owned by `self` and `iovs` for the call.
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
            self.lens[i] = m.msg_len as usize;
        }
        Ok(r as usize)
    }

    /// Datagram `i` of the last `recv`: its bytes and source.
    pub fn get(&mut self, i: usize) -> (&mut [u8], Option<SocketAddr>) {
        let len = self.lens[i].min(self.bufs[i].len());
        (&mut self.bufs[i][..len], from_sockaddr(&self.addrs[i]))
    }
}

/// Datagrams queued for one `sendmmsg`.
pub struct SendBatch {
    bufs: Vec<Vec<u8>>,
    lens: Vec<usize>,
    dsts: Vec<libc::sockaddr_storage>,
    dst_lens: Vec<libc::socklen_t>,
    tags: Vec<u8>,
    count: usize,
}

impl SendBatch {
    pub fn new(capacity: usize, buf_bytes: usize) -> Self {
        // SAFETY: an all-zero sockaddr_storage is a valid value.
        let zero: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        Self {
            bufs: vec![vec![0u8; buf_bytes]; capacity],
            lens: vec![0; capacity],
            dsts: vec![zero; capacity],
            dst_lens: vec![0; capacity],
            tags: vec![0; capacity],
            count: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.count
    }
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
    pub fn is_full(&self) -> bool {
        self.count == self.bufs.len()
    }

    /// The next free buffer, to be filled and then committed with `commit`.
    pub fn slot(&mut self) -> Option<&mut [u8]> {
        let c = self.count;
        self.bufs.get_mut(c).map(|b| b.as_mut_slice())
    }

    /// Queue the filled slot: `len` bytes to `dst`; `tag` comes back with
    /// errors (the path id).
    pub fn commit(&mut self, len: usize, dst: SocketAddr, tag: u8) {
        let c = self.count;
        if c >= self.bufs.len() {
            return;
        }
        self.lens[c] = len;
        self.dst_lens[c] = to_sockaddr(&dst, &mut self.dsts[c]);
        self.tags[c] = tag;
        self.count += 1;
    }

    /// Send everything queued; returns the failures as (tag, error).
    pub fn flush(&mut self, sock: &UdpSocket) -> Vec<(u8, io::Error)> {
        let mut failures = vec![];
        let mut start = 0;
        while start < self.count {
            let n = self.count - start;
            let mut iovs: Vec<libc::iovec> = (start..self.count)
                .map(|i| libc::iovec {
                    iov_base: self.bufs[i].as_mut_ptr().cast(),
                    iov_len: self.lens[i],
                })
                .collect();
            // SAFETY: an all-zero mmsghdr is valid; fields are set below.
            let mut msgs: Vec<libc::mmsghdr> =
                (0..n).map(|_| unsafe { std::mem::zeroed() }).collect();
            for (k, m) in msgs.iter_mut().enumerate() {
                m.msg_hdr.msg_name =
                    (&mut self.dsts[start + k] as *mut libc::sockaddr_storage).cast();
                m.msg_hdr.msg_namelen = self.dst_lens[start + k];
                m.msg_hdr.msg_iov = &mut iovs[k];
                m.msg_hdr.msg_iovlen = 1;
            }
            // SAFETY: `msgs` holds `n` headers pointing at live buffers and
            // addresses owned by `self` and `iovs` for the call.
            let r = unsafe {
                libc::sendmmsg(
                    sock.as_raw_fd(),
                    msgs.as_mut_ptr(),
                    n as libc::c_uint,
                    libc::MSG_DONTWAIT,
                )
            };
            if r < 0 {
                // The first message failed: record it and go on after it.
                failures.push((self.tags[start], io::Error::last_os_error()));
                start += 1;
            } else {
                start += r as usize;
                if r == 0 {
                    break;
                }
            }
        }
        self.count = 0;
        failures
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_roundtrip_v4_and_v6() {
        for bind in ["127.0.0.1:0", "[::1]:0"] {
            let a = UdpSocket::bind(bind).unwrap();
            let b = UdpSocket::bind(bind).unwrap();
            a.set_nonblocking(true).unwrap();
            b.set_nonblocking(true).unwrap();
            let mut sb = SendBatch::new(8, 2048);
            for i in 0..5u8 {
                let s = sb.slot().unwrap();
                s[..3].copy_from_slice(&[i, i, i]);
                sb.commit(3, b.local_addr().unwrap(), i);
            }
            assert_eq!(sb.len(), 5);
            assert!(sb.flush(&a).is_empty());
            let mut rb = RecvBatch::new(8, 2048);
            let mut got = vec![];
            for _ in 0..100 {
                match rb.recv(&b) {
                    Ok(n) => {
                        for i in 0..n {
                            let (d, src) = rb.get(i);
                            assert_eq!(src, Some(a.local_addr().unwrap()));
                            got.push(d.to_vec());
                        }
                    }
                    Err(_) => std::thread::sleep(std::time::Duration::from_millis(1)),
                }
                if got.len() == 5 {
                    break;
                }
            }
            assert_eq!(got, (0..5u8).map(|i| vec![i, i, i]).collect::<Vec<_>>());
        }
    }

    #[test]
    fn send_failures_are_reported_with_their_tag() {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut sb = SendBatch::new(4, 100);
        sb.slot().unwrap();
        // An IPv6 destination on an IPv4 socket fails.
        sb.commit(10, "[::1]:9".parse().unwrap(), 7);
        sb.slot().unwrap();
        sb.commit(10, a.local_addr().unwrap(), 8);
        let f = sb.flush(&a);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].0, 7);
        assert!(sb.is_empty());
    }
}
