//! UDP sockets for the paths.
//!
//! Paths that share a local address share one socket; the path id in each
//! packet's header tells them apart. [`bind_path_sockets`] returns the
//! sockets and, for each path, the index of its socket (the core's
//! `local_key`).
//!
//! Invariants:
//! * sockets are non-blocking and close-on-exec;
//! * IPv6 sockets are IPv6-only, so a v6 path never receives v4-mapped
//!   traffic meant for another path;
//! * a bind failure is reported with the path name and the likely cause
//!   (port in use, address not local, no such interface, permission).

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;

use socket2::{Domain, Protocol, Socket, Type};

use mpt_sys::packet::setsockopt_int;

/// Socket buffer size requested for each path socket (tuning knob).
pub const SOCKET_BUFFER_BYTES: usize = 8 << 20;

/// With local push-back on (`[scheduler] local_queue_ms`, off by
/// default), a single tunnel's path socket keeps at most that long of its
/// paths' rate in the local stack (its send buffer; TCP Small Queues
/// keeps about 1 ms per flow, and a Wi-Fi driver asks for 4 ms to
/// aggregate frames, `sk_pacing_shift` 8: [`SEND_QUEUE_NS`] is the value
/// the docs suggest), and at least
/// [`SEND_LIMIT_MIN_BYTES`] (the kernel doubles it: 16 kB, seven
/// datagrams of 1.5 kB counted with their buffers, or 14 kB of GSO
/// super-datagrams, whose buffers are nearly all payload: within a 4
/// Mbit/s shaper of 20 ms and a 16 kB burst, 26 kB, which 32 kB
/// overflowed in the lab).
/// What the interface cannot take waits in [`crate::hold`].
pub const SEND_QUEUE_NS: u64 = 4_000_000;
pub const SEND_LIMIT_MIN_BYTES: usize = 8 << 10;

/// The send buffer for a socket whose paths carry `rate_bps` together
/// (`None`: not known yet): `queue_ns` of it, within
/// [`SEND_LIMIT_MIN_BYTES`] and [`SOCKET_BUFFER_BYTES`]. The kernel counts
/// a datagram's whole buffer (its truesize, about 2.3 kB for 1.5 kB) and
/// doubles the value asked for.
pub fn send_limit_bytes(rate_bps: Option<u64>, queue_ns: u64) -> usize {
    let bytes = rate_bps.map_or(0, |r| {
        (r as u128 * queue_ns as u128 / 8_000_000_000).min(usize::MAX as u128) as usize
    });
    bytes.clamp(SEND_LIMIT_MIN_BYTES, SOCKET_BUFFER_BYTES)
}

/// Set `sock`'s send buffer to `bytes` (as root past `net.core.wmem_max`).
pub fn set_send_limit(sock: &UdpSocket, bytes: usize) -> io::Result<()> {
    let v = bytes.min(i32::MAX as usize) as libc::c_int;
    let fd = sock.as_raw_fd();
    if setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, v) == 0
        || setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, v) == 0
    {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// A bound path socket.
#[derive(Debug)]
pub struct PathSocket {
    pub local: SocketAddr,
    pub socket: UdpSocket,
    /// Names of the paths using this socket (for messages).
    pub paths: Vec<String>,
}

/// What a path needs from this module.
pub struct PathBind<'a> {
    pub name: &'a str,
    pub local: SocketAddr,
    pub interface: Option<&'a str>,
}

fn explain(path: &str, local: SocketAddr, what: &str, e: io::Error) -> io::Error {
    let why = match e.raw_os_error() {
        Some(libc::EADDRINUSE) => {
            format!("port {} is already in use on {}", local.port(), local.ip())
        }
        Some(libc::EADDRNOTAVAIL) => format!("{} is not an address of this host", local.ip()),
        Some(libc::ENODEV) => "no such network interface".to_string(),
        Some(libc::EPERM) | Some(libc::EACCES) => {
            "permission denied (binding to a device or a low port needs root)".to_string()
        }
        _ => e.to_string(),
    };
    io::Error::new(
        e.kind(),
        format!("path '{path}': cannot {what} {local}: {why}"),
    )
}

/// Open and bind one path socket (as [`bind_path_sockets`] does for each
/// distinct local address).
pub fn open(b: &PathBind<'_>) -> io::Result<UdpSocket> {
    open_with(b, false)
}

/// [`open`], in a `SO_REUSEPORT` group with `reuse_port`.
fn open_with(b: &PathBind<'_>, reuse_port: bool) -> io::Result<UdpSocket> {
    let sock = Socket::new(
        Domain::for_address(b.local),
        Type::DGRAM.cloexec(),
        Some(Protocol::UDP),
    )
    .map_err(|e| explain(b.name, b.local, "create a socket for", e))?;
    if b.local.is_ipv6() {
        sock.set_only_v6(true)
            .map_err(|e| explain(b.name, b.local, "set IPV6_V6ONLY on", e))?;
    }
    if let Some(dev) = b.interface {
        sock.bind_device(Some(dev.as_bytes())).map_err(|e| {
            explain(
                b.name,
                b.local,
                &format!("bind to interface '{dev}' for"),
                e,
            )
        })?;
    }
    // Larger buffers absorb bursts; failures here are not fatal. As root
    // the *FORCE options pass net.core.[rw]mem_max; else the plain ones.
    let _ = sock.set_recv_buffer_size(SOCKET_BUFFER_BYTES);
    let _ = sock.set_send_buffer_size(SOCKET_BUFFER_BYTES);
    for opt in [libc::SO_RCVBUFFORCE, libc::SO_SNDBUFFORCE] {
        let bytes = SOCKET_BUFFER_BYTES as libc::c_int;
        let _ = setsockopt_int(sock.as_raw_fd(), libc::SOL_SOCKET, opt, bytes);
    }
    if reuse_port {
        sock.set_reuse_port(true)
            .map_err(|e| explain(b.name, b.local, "set SO_REUSEPORT on", e))?;
    }
    sock.bind(&b.local.into())
        .map_err(|e| explain(b.name, b.local, "bind", e))?;
    sock.set_nonblocking(true)?;
    Ok(sock.into())
}

/// Bind one socket per distinct local address. Returns the sockets and the
/// socket index of every path, in path order.
pub fn bind_path_sockets(paths: &[PathBind<'_>]) -> io::Result<(Vec<PathSocket>, Vec<usize>)> {
    bind_sockets(paths, false)
}

/// `n` sets of path sockets, each as [`bind_path_sockets`] binds them,
/// where the `i`-th socket of every set shares its local address with the
/// others' in a `SO_REUSEPORT` group (a port of 0 becomes the port the
/// first set got): the kernel spreads the datagrams of different remote
/// addresses over the group (a concentrator's shards, one set each; see
/// `docs/deploy.md`). `n == 1` is [`bind_path_sockets`].
pub fn bind_path_socket_sets(
    paths: &[PathBind<'_>],
    n: usize,
) -> io::Result<(Vec<Vec<PathSocket>>, Vec<usize>)> {
    if n <= 1 {
        let (s, k) = bind_path_sockets(paths)?;
        return Ok((vec![s], k));
    }
    let (first, keys) = bind_sockets(paths, true)?;
    let mut sets = vec![];
    for _ in 1..n {
        let mut set = vec![];
        for s in &first {
            let local = s.socket.local_addr()?;
            let b = PathBind {
                name: &s.paths[0],
                local,
                interface: paths
                    .iter()
                    .find(|p| p.name == s.paths[0])
                    .and_then(|p| p.interface),
            };
            set.push(PathSocket {
                local: s.local,
                socket: open_with(&b, true)?,
                paths: s.paths.clone(),
            });
        }
        sets.push(set);
    }
    sets.insert(0, first);
    Ok((sets, keys))
}

fn bind_sockets(
    paths: &[PathBind<'_>],
    reuse_port: bool,
) -> io::Result<(Vec<PathSocket>, Vec<usize>)> {
    let mut sockets: Vec<PathSocket> = vec![];
    let mut keys = vec![];
    for p in paths {
        if let Some(i) = sockets.iter().position(|s| s.local == p.local) {
            sockets[i].paths.push(p.name.to_string());
            keys.push(i);
            continue;
        }
        let socket = open_with(p, reuse_port)?;
        sockets.push(PathSocket {
            local: p.local,
            socket,
            paths: vec![p.name.to_string()],
        });
        keys.push(sockets.len() - 1);
    }
    Ok((sockets, keys))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_local_addresses_share_a_socket_and_conflicts_are_explained() {
        let a = PathBind {
            name: "a",
            local: "127.0.0.1:0".parse().unwrap(),
            interface: None,
        };
        let (s, k) = bind_path_sockets(&[a]).unwrap();
        let taken = s[0].socket.local_addr().unwrap();
        let same = [
            PathBind {
                name: "x",
                local: taken,
                interface: None,
            },
            PathBind {
                name: "y",
                local: taken,
                interface: None,
            },
        ];
        let err = bind_path_sockets(&same).unwrap_err().to_string();
        assert!(
            err.contains("path 'x'") && err.contains("already in use"),
            "{err}"
        );
        drop(s);
        let (s2, k2) = bind_path_sockets(&same).unwrap();
        assert_eq!((s2.len(), k2), (1, vec![0, 0]));
        assert_eq!(k, vec![0]);
        let bad = PathBind {
            name: "z",
            local: "192.0.2.77:4000".parse().unwrap(),
            interface: None,
        };
        let err = bind_path_sockets(&[bad]).unwrap_err().to_string();
        assert!(err.contains("not an address of this host"), "{err}");
    }

    #[test]
    fn a_sockets_send_buffer_follows_its_rate_within_its_bounds() {
        let q = SEND_QUEUE_NS;
        assert_eq!(
            send_limit_bytes(None, q),
            SEND_LIMIT_MIN_BYTES,
            "not measured"
        );
        assert_eq!(send_limit_bytes(Some(4_000_000), q), SEND_LIMIT_MIN_BYTES);
        // 4 ms of 1 Gbit/s.
        assert_eq!(send_limit_bytes(Some(1_000_000_000), q), 500_000);
        assert_eq!(send_limit_bytes(Some(u64::MAX), q), SOCKET_BUFFER_BYTES);
    }
}
