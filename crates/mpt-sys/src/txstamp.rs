//! Kernel transmit timestamps for measuring instruments (`mpt-probe`).
//!
//! With `SO_TIMESTAMPING` and `SOF_TIMESTAMPING_TX_SOFTWARE` the kernel
//! stamps each datagram (CLOCK_REALTIME, ns) as the device driver takes it
//! (`skb_tx_timestamp`; for a veth, as it hands the frame to its peer) and
//! queues the stamp on the socket's error queue, with the datagram's
//! number on the socket (`SOF_TIMESTAMPING_OPT_ID`, counting from 0) and
//! without a copy of the datagram (`SOF_TIMESTAMPING_OPT_TSONLY`). A
//! stamp taken in user space before `send` also counts the time the
//! system call took to reach the driver: a few µs, more on a cold core or
//! a virtual machine (Linux's Documentation/networking/timestamping.rst).
//!
//! Invariants: [`read_tx_stamps`] never blocks (`MSG_DONTWAIT`) and reads
//! the error queue until it is empty; a message without a stamp is
//! skipped; nothing here retains a pointer past the call that uses it.

use std::io;
use std::os::fd::{AsFd, AsRawFd};

use crate::packet::setsockopt_int;

/// Ask the kernel for a software transmit stamp of every datagram sent on
/// `sock`, numbered, on its error queue.
pub fn enable_tx_timestamps(sock: &impl AsFd) -> io::Result<()> {
    let flags = libc::SOF_TIMESTAMPING_TX_SOFTWARE
        | libc::SOF_TIMESTAMPING_SOFTWARE
        | libc::SOF_TIMESTAMPING_OPT_ID
        | libc::SOF_TIMESTAMPING_OPT_TSONLY;
    let fd = sock.as_fd().as_raw_fd();
    if setsockopt_int(
        fd,
        libc::SOL_SOCKET,
        libc::SO_TIMESTAMPING,
        flags as libc::c_int,
    ) < 0
    {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Read every transmit stamp queued on `sock`: `f(id, ns)` for each, in
/// the order the kernel queued them (`id`: the datagram's number on the
/// socket, from 0; `ns`: since the UNIX epoch). Returns how many.
pub fn read_tx_stamps(sock: &impl AsFd, mut f: impl FnMut(u32, u64)) -> io::Result<usize> {
    let fd = sock.as_fd().as_raw_fd();
    let mut n = 0;
    loop {
        // Room for SCM_TIMESTAMPING (three timespecs) and the extended
        // error (IP_RECVERR / IPV6_RECVERR) with their headers, 8-aligned.
        let mut control = [0u64; 32];
        let mut data = [0u8; 64];
        let mut iov = libc::iovec {
            iov_base: data.as_mut_ptr().cast(),
            iov_len: data.len(),
        };
        // SAFETY: an all-zero msghdr is a valid value (null pointers, zero
        // lengths); the fields that matter are set below.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&control);
        // SAFETY: `msg` points to `iov` (describing `data`, writable for its
        // length) and to `control` (writable for msg_controllen bytes); all
        // outlive the call, and the kernel writes only within those lengths.
        let r = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT) };
        if r < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock => Ok(n),
                io::ErrorKind::Interrupted => continue,
                _ => Err(e),
            };
        }
        let (mut stamp, mut id) = (None, None);
        // SAFETY: `msg` was filled by a successful recvmsg; CMSG_FIRSTHDR and
        // CMSG_NXTHDR stay within msg_control/msg_controllen, and a header is
        // read only when they return non-null.
        let mut cmsg = unsafe { libc::CMSG_FIRSTHDR(&msg) };
        while !cmsg.is_null() {
            // SAFETY: `cmsg` is non-null and points into `control` (see above).
            let hdr = unsafe { &*cmsg };
            let is_err = (hdr.cmsg_level == libc::SOL_IP && hdr.cmsg_type == libc::IP_RECVERR)
                || (hdr.cmsg_level == libc::SOL_IPV6 && hdr.cmsg_type == libc::IPV6_RECVERR);
            if hdr.cmsg_level == libc::SOL_SOCKET && hdr.cmsg_type == libc::SCM_TIMESTAMPING {
                // SAFETY: an SCM_TIMESTAMPING message carries three
                // timespecs, the software stamp first; the read is
                // unaligned-safe.
                let ts: libc::timespec =
                    unsafe { std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast()) };
                if ts.tv_sec > 0 || ts.tv_nsec > 0 {
                    stamp = Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64);
                }
            } else if is_err {
                // SAFETY: an IP(V6)_RECVERR message starts with a
                // sock_extended_err; the read is unaligned-safe.
                let ee: libc::sock_extended_err =
                    unsafe { std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast()) };
                if ee.ee_errno == libc::ENOMSG as u32
                    && ee.ee_origin == libc::SO_EE_ORIGIN_TIMESTAMPING
                {
                    id = Some(ee.ee_data);
                }
            }
            // SAFETY: as for CMSG_FIRSTHDR; `cmsg` is a header within `msg`.
            cmsg = unsafe { libc::CMSG_NXTHDR(&msg, cmsg) };
        }
        if let (Some(ns), Some(id)) = (stamp, id) {
            f(id, ns);
            n += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stamp::{enable_rx_timestamps, realtime_ns, recv_stamped};
    use std::net::UdpSocket;

    #[test]
    fn each_datagram_gets_a_numbered_stamp_between_send_and_receive() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        enable_rx_timestamps(&rx).unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(rx.local_addr().unwrap()).unwrap();
        enable_tx_timestamps(&tx).unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 64];
        for i in 0..3u8 {
            let before = realtime_ns();
            tx.send(&[i]).unwrap();
            let (_, rx_stamp) = recv_stamped(&rx, &mut buf).unwrap();
            read_tx_stamps(&tx, |id, ns| got.push((id, ns))).unwrap();
            let (id, ns) = *got.last().expect("a transmit stamp");
            assert_eq!(id, u32::from(i));
            assert!(
                before <= ns && ns <= rx_stamp.unwrap(),
                "{before} {ns} {rx_stamp:?}"
            );
        }
        assert_eq!(got.len(), 3);
        assert_eq!(
            read_tx_stamps(&tx, |_, _| panic!("queue empty")).unwrap(),
            0
        );
    }
}
