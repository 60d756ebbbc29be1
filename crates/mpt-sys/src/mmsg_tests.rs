//! Tests of the batch system calls on loopback sockets.

use super::*;

/// The TOS / traffic-class byte a datagram arrived with, read with
/// `IP_RECVTOS` / `IPV6_RECVTCLASS` (set on `sock` by the caller).
fn recv_tos(sock: &UdpSocket) -> Option<u8> {
    let mut data = [0u8; 2048];
    let mut ctrl: [u64; 8] = [0; 8];
    let mut iov = libc::iovec {
        iov_base: data.as_mut_ptr().cast(),
        iov_len: data.len(),
    };
    // SAFETY: an all-zero msghdr is valid; the pointers set below refer
    // to `iov`, `data` and `ctrl`, live for the call.
    let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
    h.msg_iov = &mut iov;
    h.msg_iovlen = 1;
    h.msg_control = ctrl.as_mut_ptr().cast();
    h.msg_controllen = std::mem::size_of_val(&ctrl) as _;
    // SAFETY: `h` describes buffers owned by this frame.
    let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut h, 0) };
    assert!(n > 0, "recvmsg: {}", io::Error::last_os_error());
    // SAFETY: the kernel filled `ctrl` with `msg_controllen` bytes of
    // control messages; CMSG_FIRSTHDR/NXTHDR stay within them.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&h);
        while !c.is_null() {
            let tos = ((*c).cmsg_level == libc::IPPROTO_IP && (*c).cmsg_type == libc::IP_TOS)
                || ((*c).cmsg_level == libc::IPPROTO_IPV6 && (*c).cmsg_type == libc::IPV6_TCLASS);
            if tos {
                // IP_TOS arrives as one byte, IPV6_TCLASS as an int.
                return Some(*libc::CMSG_DATA(c));
            }
            c = libc::CMSG_NXTHDR(&h, c);
        }
    }
    None
}

/// Chunks at (start, length).
fn chunks_at(at: &[(usize, usize)]) -> Vec<Chunk> {
    at.iter()
        .map(|&(start, len)| Chunk { start, len })
        .collect()
}

#[test]
fn datagrams_leave_with_their_message_s_tos_and_segment() {
    for (bind, level, opt) in [
        ("127.0.0.1:0", libc::IPPROTO_IP, libc::IP_RECVTOS),
        ("[::1]:0", libc::IPPROTO_IPV6, libc::IPV6_RECVTCLASS),
    ] {
        let tx = UdpSocket::bind(bind).unwrap();
        let rx = UdpSocket::bind(bind).unwrap();
        rx.set_read_timeout(Some(std::time::Duration::from_secs(2)))
            .unwrap();
        assert_eq!(
            crate::packet::setsockopt_int(rx.as_raw_fd(), level, opt, 1),
            0
        );
        let dst = rx.local_addr().unwrap();
        let buf = [7u8; 3000];
        let gso = gso_supported(&tx);
        let chunks = chunks_at(&[(0, 1000), (1000, 1000), (2000, 100)]);
        let msgs = [
            // EF on two GSO segments (one datagram without GSO), then
            // one datagram with no TOS.
            SendMsg {
                dst,
                first: 0,
                count: if gso { 2 } else { 1 },
                segment: if gso { 1000 } else { 0 },
                tos: 0xb8,
            },
            SendMsg {
                dst,
                first: 2,
                count: 1,
                segment: 0,
                tos: 0,
            },
        ];
        let mut failed = vec![];
        MmsgSend::new(4).send(&tx, &buf, &msgs, &chunks, |i, e| failed.push((i, e)));
        assert!(failed.is_empty(), "{bind}: {failed:?}");
        let expect: &[u8] = if gso { &[0xb8, 0xb8, 0] } else { &[0xb8, 0] };
        let got: Vec<u8> = expect.iter().map(|_| recv_tos(&rx).unwrap_or(0)).collect();
        assert_eq!(got, expect, "{bind} gso {gso}");
    }
}

#[test]
fn chunks_back_to_back_or_apart_arrive_as_their_datagrams() {
    // Chunks that lie back to back go as one iovec, one apart as its
    // own: the datagrams are the chunks either way.
    let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
    let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
    rx.set_read_timeout(Some(std::time::Duration::from_secs(2)))
        .unwrap();
    let dst = rx.local_addr().unwrap();
    if !gso_supported(&tx) {
        return;
    }
    let buf: Vec<u8> = (0..4000u32).map(|i| (i * 7 + i / 251) as u8).collect();
    let chunks = chunks_at(&[
        (0, 1000),
        (1000, 1000),
        (2500, 1000),
        (3500, 400),
        (9000, 10),
    ]);
    let msgs = [SendMsg {
        dst,
        first: 0,
        count: 4,
        segment: 1000,
        tos: 0,
    }];
    let mut failed = vec![];
    MmsgSend::new(4).send(&tx, &buf, &msgs, &chunks, |i, e| failed.push((i, e)));
    assert!(failed.is_empty(), "{failed:?}");
    for c in &chunks[..4] {
        let mut got = [0u8; 2000];
        let n = rx.recv(&mut got).unwrap();
        assert_eq!(&got[..n], &buf[c.start..c.start + c.len]);
    }
}
