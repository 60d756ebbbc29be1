//! Writing inner packets to the TUN, coalesced where the kernel allows.
//!
//! In offload mode consecutive in-order segments of one TCP flow become one
//! TCP super-packet (`offload::TcpCoalescer`) and consecutive datagrams of one
//! UDP flow one UDP super-packet (`offload::UdpCoalescer`, only when
//! the kernel has USO); everything else is written as it is, behind a
//! zero virtio header.
//!
//! Invariants:
//! * packets of one flow reach the TUN in the order they were given: a
//!   packet that cannot join a pending super-packet of its protocol first
//!   flushes it, and a packet that no coalescer takes flushes both;
//! * [`TunWriter::flush`] is called at the end of every batch, so nothing
//!   waits in a coalescer across a poll;
//! * every failed write is reported to the caller (counted as a drop).

pub use mpt_control::status::WriteStats;
use mpt_core::stats::DropReason;
use mpt_core::tunnel::{Received, Tunnel};

use crate::offload::{udp, TcpCoalescer, UdpCoalescer, VnetHdr, GSO_NONE, VNET_HDR_LEN};
use crate::seam::TunDevice;

/// See the module documentation.
pub struct TunWriter {
    tcp: Option<TcpCoalescer>,
    udp: Option<UdpCoalescer>,
    pub stats: WriteStats,
}

impl TunWriter {
    /// `offload`: the TUN takes virtio headers; `uso`: and UDP GSO.
    pub fn new(offload: bool, uso: bool) -> Self {
        Self {
            tcp: offload.then(TcpCoalescer::default),
            udp: (offload && uso).then(UdpCoalescer::default),
            stats: WriteStats::default(),
        }
    }

    /// Write one inner packet (or hold it for coalescing). Returns whether
    /// every write this caused succeeded.
    pub fn write<T: TunDevice>(&mut self, tun: &mut T, pkt: &[u8]) -> bool {
        if self.tcp.is_none() {
            self.stats.tun_writes += 1;
            return tun.write(&[], pkt).is_ok();
        }
        let is_udp = udp::is_candidate(pkt);
        if let (true, Some(u)) = (is_udp, self.udp.as_mut()) {
            if u.push(pkt) {
                self.stats.udp_gro_segments += 1;
                return true;
            }
            let ok = self.flush_udp(tun);
            let u = self.udp.as_mut().expect("checked above");
            if u.push(pkt) {
                self.stats.udp_gro_segments += 1;
                return ok;
            }
            return ok & self.write_plain(tun, pkt);
        }
        if let Some(c) = self.tcp.as_mut() {
            if c.push(pkt) {
                self.stats.gro_segments += 1;
                return true;
            }
        }
        let mut ok = self.flush_tcp(tun);
        if let Some(c) = self.tcp.as_mut() {
            if c.push(pkt) {
                self.stats.gro_segments += 1;
                return ok;
            }
        }
        // No coalescer takes it: keep order with anything pending.
        ok &= self.flush_udp(tun);
        ok & self.write_plain(tun, pkt)
    }

    fn write_plain<T: TunDevice>(&mut self, tun: &mut T, pkt: &[u8]) -> bool {
        self.stats.tun_writes += 1;
        tun.write(&[0u8; VNET_HDR_LEN], pkt).is_ok()
    }

    fn flush_tcp<T: TunDevice>(&mut self, tun: &mut T) -> bool {
        let bytes = self.tcp.as_mut().and_then(TcpCoalescer::take);
        write_taken(
            tun,
            bytes,
            &mut self.stats.tun_writes,
            &mut self.stats.gro_super_packets,
        )
    }

    fn flush_udp<T: TunDevice>(&mut self, tun: &mut T) -> bool {
        let bytes = self.udp.as_mut().and_then(UdpCoalescer::take);
        let st = &mut self.stats;
        write_taken(
            tun,
            bytes,
            &mut st.tun_writes,
            &mut st.udp_gro_super_packets,
        )
    }

    /// Write whatever is pending (end of a batch).
    pub fn flush<T: TunDevice>(&mut self, tun: &mut T) -> bool {
        let ok = self.flush_tcp(tun);
        ok & self.flush_udp(tun)
    }

    /// Write what the core delivers ([`Tunnel::deliver`]): the packet a
    /// datagram carried in place (`arrived`), then what the reorder buffer
    /// releases; a failed write is counted as a drop in the core.
    pub fn deliver<T: TunDevice>(
        &mut self,
        tun: &mut T,
        tunnel: &mut Tunnel,
        arrived: Option<(&Received, &[u8])>,
    ) {
        tunnel.deliver(arrived, |p| {
            if self.write(tun, p) {
                Ok(())
            } else {
                Err(DropReason::TunWriteFailed)
            }
        });
    }
}

/// Write what a coalescer gave up (if anything), counting the write and,
/// if it is a super-packet, `merged`.
fn write_taken<T: TunDevice>(
    tun: &mut T,
    bytes: Option<&[u8]>,
    writes: &mut u64,
    merged: &mut u64,
) -> bool {
    let Some(bytes) = bytes else {
        return true;
    };
    *writes += 1;
    if VnetHdr::parse(bytes).is_some_and(|h| h.gso_type != GSO_NONE) {
        *merged += 1;
    }
    tun.write(&[], bytes).is_ok()
}
