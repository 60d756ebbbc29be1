//! Interface configuration: addresses, MTU, link state and routes, over
//! rtnetlink (`netlink-packet-route` messages on a `netlink-sys` socket;
//! no `ip` process is spawned).
//!
//! Each change is one request with `NLM_F_ACK`; the kernel's answer (an
//! acknowledgement or an errno) is waited for before the next, so errors
//! are reported with what was asked (`cannot add address 10.0.0.1/24 to
//! mpt0: File exists (os error 17)`).
//!
//! Invariants:
//! * [`configure`] either succeeds completely or returns an error naming the
//!   step that failed and why; it leaves nothing behind that dropping the
//!   TUN (which removes its addresses and routes) does not clean;
//! * [`Routes`] removes the routes it installed when dropped, even though the
//!   kernel also removes them with the interface, so that a stop is explicit.

use std::io;
use std::net::IpAddr;

use ipnet::IpNet;
use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_CREATE, NLM_F_EXCL,
    NLM_F_REQUEST,
};
use netlink_packet_route::address::{
    AddressAttribute, AddressFlags, AddressHeaderFlags, AddressMessage,
};
use netlink_packet_route::link::{LinkAttribute, LinkFlags, LinkMessage};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteProtocol, RouteScope, RouteType,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};
use tracing::{debug, warn};

/// A route request's answer may not take longer (tuning knob).
const NETLINK_TIMEOUT_MS: u64 = 2_000;

/// Packets the TUN device holds for mpt to read (its `txqueuelen`; tuning
/// knob). The kernel drops what does not fit, before mpt classifies it,
/// whatever its class: with the default of 500, a UDP flood at 225 Mbit/s
/// filled it within 21 ms of the reader falling behind on a 2-core
/// machine, and a call lost packets there (qos-matrix, 60+15 Mbit/s).
/// Packets wait in it only while mpt is behind.
pub const TUN_TXQUEUELEN: u32 = 4096;

/// One rtnetlink socket; requests are answered in order.
struct Netlink {
    socket: Socket,
    seq: u32,
}

impl Netlink {
    fn open() -> io::Result<Self> {
        let mut socket = Socket::new(NETLINK_ROUTE)?;
        socket.bind_auto()?;
        socket.connect(&SocketAddr::new(0, 0))?;
        let timeout = std::time::Duration::from_millis(NETLINK_TIMEOUT_MS);
        socket2::SockRef::from(&socket).set_read_timeout(Some(timeout))?;
        Ok(Self { socket, seq: 0 })
    }

    /// Send `msg` with `flags` (plus request and ack) and return the
    /// messages of the answer; an errno from the kernel is the error.
    fn request(
        &mut self,
        msg: RouteNetlinkMessage,
        flags: u16,
    ) -> io::Result<Vec<RouteNetlinkMessage>> {
        self.seq = self.seq.wrapping_add(1);
        let mut header = NetlinkHeader::default();
        header.flags = NLM_F_REQUEST | NLM_F_ACK | flags;
        header.sequence_number = self.seq;
        let mut m = NetlinkMessage::new(header, NetlinkPayload::from(msg));
        m.finalize();
        let mut buf = vec![0u8; m.buffer_len()];
        m.serialize(&mut buf);
        self.socket.send(&buf, 0)?;
        let mut answer = vec![];
        let mut rx = vec![0u8; 16 << 10];
        loop {
            let n = self.socket.recv(&mut &mut rx[..], 0)?;
            let mut at = 0;
            while at < n {
                let reply = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&rx[at..n])
                    .map_err(|e| io::Error::other(format!("netlink answer not understood: {e}")))?;
                let len = reply.header.length as usize;
                if len == 0 {
                    break;
                }
                at += (len + 3) & !3;
                if reply.header.sequence_number != self.seq {
                    continue;
                }
                match reply.payload {
                    NetlinkPayload::Error(e) if e.code.is_none() => return Ok(answer),
                    NetlinkPayload::Error(e) => return Err(e.to_io()),
                    NetlinkPayload::Done(_) => return Ok(answer),
                    NetlinkPayload::InnerMessage(i) => answer.push(i),
                    _ => {}
                }
            }
        }
    }

    /// The index of interface `dev`.
    fn index(&mut self, dev: &str) -> io::Result<u32> {
        self.link(dev).map(|l| l.header.index)
    }

    /// Interface `dev`'s link message (its index, attributes, counters).
    fn link(&mut self, dev: &str) -> io::Result<LinkMessage> {
        let mut m = LinkMessage::default();
        m.attributes.push(LinkAttribute::IfName(dev.to_string()));
        let answer = self
            .request(RouteNetlinkMessage::GetLink(m), 0)
            .map_err(|e| io::Error::new(e.kind(), format!("no interface {dev}: {e}")))?;
        answer
            .into_iter()
            .find_map(|r| match r {
                RouteNetlinkMessage::NewLink(l) => Some(l),
                _ => None,
            })
            .ok_or_else(|| io::Error::other(format!("no interface {dev}")))
    }
}

/// Packets the kernel dropped because the TUN device `dev`'s queue was
/// full ([`TUN_TXQUEUELEN`]): its `tx_dropped`, the packets routed into
/// the tunnel that mpt did not read in time. Over rtnetlink, so it is the
/// interface of the daemon's own network namespace.
pub fn tun_queue_drops(dev: &str) -> io::Result<u64> {
    let link = Netlink::open()?.link(dev)?;
    link.attributes
        .iter()
        .find_map(|a| match a {
            LinkAttribute::Stats64(s) => Some(s.tx_dropped),
            _ => None,
        })
        .ok_or_else(|| io::Error::other(format!("no counters for {dev}")))
}

fn family(ip: &IpAddr) -> AddressFamily {
    match ip {
        IpAddr::V4(_) => AddressFamily::Inet,
        IpAddr::V6(_) => AddressFamily::Inet6,
    }
}

/// No IPv6 link-local address on the TUN (`addr_gen_mode` 1, set before
/// the link comes up): a point-to-point tunnel has no neighbours, and
/// without one the kernel sends no router solicitations or other link
/// chatter through the tunnel (which a concentrator would only drop). The
/// configured addresses are unaffected. A kernel without IPv6 has no such
/// file: nothing to quiet.
fn quiet_ipv6(dev: &str) {
    let knob = format!("/proc/sys/net/ipv6/conf/{dev}/addr_gen_mode");
    if std::path::Path::new(&knob).exists() {
        if let Err(e) = std::fs::write(&knob, "1") {
            debug!(dev, "cannot turn off the IPv6 link-local address: {e}");
        }
    }
}

/// Give interface `dev` its addresses, MTU and queue length
/// ([`TUN_TXQUEUELEN`]) and bring it up.
pub fn configure(dev: &str, addresses: &[IpNet], mtu: u32) -> io::Result<()> {
    let mut nl =
        Netlink::open().map_err(|e| io::Error::new(e.kind(), format!("rtnetlink: {e}")))?;
    let index = nl.index(dev)?;
    let mut link = LinkMessage::default();
    link.header.index = index;
    link.attributes.push(LinkAttribute::Mtu(mtu));
    link.attributes
        .push(LinkAttribute::TxQueueLen(TUN_TXQUEUELEN));
    debug!(
        dev,
        mtu,
        txqueuelen = TUN_TXQUEUELEN,
        "configuring: mtu and queue length"
    );
    nl.request(RouteNetlinkMessage::SetLink(link), 0)
        .map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot set mtu {mtu} and txqueuelen {TUN_TXQUEUELEN} on {dev}: {e}"),
            )
        })?;
    for a in addresses {
        let ip = a.addr();
        let mut m = AddressMessage::default();
        m.header.family = family(&ip);
        m.header.prefix_len = a.prefix_len();
        m.header.index = index;
        m.attributes.push(AddressAttribute::Local(ip));
        if ip.is_ipv6() {
            // No duplicate address detection on a point-to-point tunnel:
            // the address is usable at once.
            m.header.flags = AddressHeaderFlags::Nodad;
            m.attributes
                .push(AddressAttribute::Flags(AddressFlags::Nodad));
        } else {
            m.attributes.push(AddressAttribute::Address(ip));
        }
        debug!(dev, address = %a, "configuring: address");
        nl.request(
            RouteNetlinkMessage::NewAddress(m),
            NLM_F_CREATE | NLM_F_EXCL,
        )
        .map_err(|e| io::Error::new(e.kind(), format!("cannot add address {a} to {dev}: {e}")))?;
    }
    quiet_ipv6(dev);
    let mut up = LinkMessage::default();
    up.header.index = index;
    up.header.flags = LinkFlags::Up;
    up.header.change_mask = LinkFlags::Up;
    nl.request(RouteNetlinkMessage::SetLink(up), 0)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot bring {dev} up: {e}")))?;
    Ok(())
}

/// The kernel's main routing table.
pub const MAIN_TABLE: u32 = RouteHeader::RT_TABLE_MAIN as u32;

/// A route to `net` through interface `index` (in `table`, scope link),
/// with the `metric` if given.
fn route_message(net: &IpNet, index: u32, metric: Option<u32>, table: u32) -> RouteMessage {
    let mut m = RouteMessage::default();
    let ip = net.network();
    m.header.address_family = family(&ip);
    m.header.destination_prefix_length = net.prefix_len();
    // Tables beyond 255 exist only as the attribute (RT_TABLE_COMPAT).
    m.header.table = u8::try_from(table).unwrap_or(252);
    m.attributes.push(RouteAttribute::Table(table));
    m.header.protocol = RouteProtocol::Boot;
    m.header.scope = RouteScope::Link;
    m.header.kind = RouteType::Unicast;
    m.attributes
        .push(RouteAttribute::Destination(RouteAddress::from(ip)));
    m.attributes.push(RouteAttribute::Oif(index));
    if let Some(p) = metric {
        m.attributes.push(RouteAttribute::Priority(p));
    }
    m
}

/// Routes installed through the tunnel; removed on drop.
pub struct Routes {
    dev: String,
    index: u32,
    nl: Option<Netlink>,
    installed: Vec<(IpNet, Option<u32>)>,
    table: u32,
}

impl std::fmt::Debug for Routes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Routes")
            .field("dev", &self.dev)
            .field("installed", &self.installed)
            .finish()
    }
}

impl Routes {
    /// Install `routes` via `dev`; each comes with a label naming where it
    /// was configured, for errors. On error, routes installed so far are
    /// removed again when the returned error drops the partial set.
    pub fn install(dev: &str, routes: &[(IpNet, Option<u32>, String)]) -> io::Result<Routes> {
        Self::install_in(dev, MAIN_TABLE, routes)
    }

    /// As [`Routes::install`], in routing table `table` (a concentrator's
    /// table of connected peers, which a routing daemon announces).
    pub fn install_in(
        dev: &str,
        table: u32,
        routes: &[(IpNet, Option<u32>, String)],
    ) -> io::Result<Routes> {
        let mut nl =
            Netlink::open().map_err(|e| io::Error::new(e.kind(), format!("rtnetlink: {e}")))?;
        let index = nl.index(dev)?;
        let mut r = Routes {
            dev: dev.to_string(),
            index,
            nl: Some(nl),
            installed: vec![],
            table,
        };
        for (net, metric, label) in routes {
            r.add(*net, *metric, label)?;
        }
        Ok(r)
    }

    fn nl(&mut self) -> io::Result<&mut Netlink> {
        if self.nl.is_none() {
            self.nl = Some(Netlink::open()?);
        }
        self.nl
            .as_mut()
            .ok_or_else(|| io::Error::other("rtnetlink"))
    }

    /// Install one more route (a reload); `label` names where it was
    /// configured, for errors.
    pub fn add(&mut self, net: IpNet, metric: Option<u32>, label: &str) -> io::Result<()> {
        let m = route_message(&net, self.index, metric, self.table);
        debug!(dev = %self.dev, route = %net, "configuring: route");
        self.nl()?
            .request(
                RouteNetlinkMessage::NewRoute(m),
                NLM_F_CREATE | NLM_F_EXCL,
            )
            .map_err(|e| {
                if e.raw_os_error() == Some(libc::EEXIST) {
                    io::Error::new(
                        io::ErrorKind::AlreadyExists,
                        format!(
                            "{label}: a route to {net}{} already exists on this host (see `ip route show {net}`); remove it, or give this route another metric",
                            metric.map_or(String::new(), |m| format!(" with metric {m}"))
                        ),
                    )
                } else {
                    io::Error::new(e.kind(), format!("{label}: cannot add a route to {net} via {}: {e}", self.dev))
                }
            })?;
        self.installed.push((net, metric));
        Ok(())
    }

    /// Remove a route this set installed (a reload).
    pub fn remove(&mut self, net: IpNet, metric: Option<u32>) -> io::Result<()> {
        let Some(i) = self.installed.iter().position(|r| *r == (net, metric)) else {
            return Err(io::Error::other(format!(
                "no route to {net} was installed by mpt"
            )));
        };
        let m = route_message(&net, self.index, metric, self.table);
        let dev = self.dev.clone();
        self.nl()?
            .request(RouteNetlinkMessage::DelRoute(m), 0)
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("cannot remove the route to {net} via {dev}: {e}"),
                )
            })?;
        self.installed.remove(i);
        Ok(())
    }

    /// The routes installed, as (network, metric).
    pub fn installed(&self) -> &[(IpNet, Option<u32>)] {
        &self.installed
    }
}

impl Drop for Routes {
    fn drop(&mut self) {
        for (net, metric) in self.installed.clone() {
            match self.remove(net, metric) {
                Ok(()) => {}
                // Gone with the interface already.
                Err(e) if matches!(e.raw_os_error(), Some(libc::ESRCH | libc::ENODEV)) => {}
                Err(e) => warn!(route = %net, "could not remove route: {e}"),
            }
        }
    }
}
