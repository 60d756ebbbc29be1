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
use crate::stamp::{read_cmsg, recv_with_cmsgs, timespec_ns};

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
    let mut n = 0;
    loop {
        let mut data = [0u8; 64];
        let (mut stamp, mut id) = (None, None);
        let got = recv_with_cmsgs(
            sock,
            &mut data,
            libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT,
            |level, ty, payload| {
                let is_err = (level == libc::SOL_IP && ty == libc::IP_RECVERR)
                    || (level == libc::SOL_IPV6 && ty == libc::IPV6_RECVERR);
                if level == libc::SOL_SOCKET && ty == libc::SCM_TIMESTAMPING {
                    // Three timespecs, the software stamp first.
                    stamp = read_cmsg::<libc::timespec>(payload)
                        .filter(|ts| ts.tv_sec > 0 || ts.tv_nsec > 0)
                        .map(|ts| timespec_ns(&ts));
                } else if is_err {
                    id = read_cmsg::<libc::sock_extended_err>(payload)
                        .filter(|ee| {
                            ee.ee_errno == libc::ENOMSG as u32
                                && ee.ee_origin == libc::SO_EE_ORIGIN_TIMESTAMPING
                        })
                        .map(|ee| ee.ee_data);
                }
            },
        );
        match got {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
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
