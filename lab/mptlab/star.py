"""A concentrator's lab: one server namespace S and many client
namespaces, each client joined to S by `links` links.

    client 0  e0 ----+                     +---- br0 172.16.0.1/16
              e1 --+ |   S: one bridge per |
    client 1  e0 --|-+-- link, one mpt     +---- br1 172.17.0.1/16
              e1 --+     concentrator
    ...              (link l of client i: 172.(16+l).(i//250).(i%250+2)/16)

Each client link may be shaped with tbf (both directions), and each link
may have a one-way delay of its own (`delays_ms`): the bridges then move to
a switch namespace and an `mpt-netem` in a namespace of its own delays
every frame between server 0 and each bridge, both ways (so a client's
paths differ in delay as Wi-Fi and LTE do). The server's
mpt is a concentrator with one [[peer]] per client; each client runs an
ordinary client configuration. Tunnel addresses: the server 10.201.0.1/16,
client i 10.201.(1 + i//250).(i%250 + 2)/16 (its allowed IP, /32).

Invariants: namespaces are uniquely named and always deleted (context
manager, atexit); every daemon has its own directory of files; processes
are stopped by PID.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .daemon import Peer, _in_tunnel
from .netns import (
    _counter,
    _live,
    _no_offloads,
    _veth,
    emulator_config_path,
    emulator_priority,
    stop_emulator,
    teardown,
)
from .util import mpt_binary, netem_binary, run

SERVER_TUNNEL = "10.201.0.1"
PORT = 6100


def client_tunnel(i: int) -> str:
    return f"10.201.{1 + i // 250}.{i % 250 + 2}"


def server_link(link: int, server: int = 0) -> str:
    """Server 0 at .0.1; a second server at .255.251 (no client's)."""
    return f"172.{16 + link}.0.1" if server == 0 else f"172.{16 + link}.255.{250 + server}"


def client_link(i: int, link: int) -> str:
    return f"172.{16 + link}.{i // 250}.{i % 250 + 2}"


class Star:
    """See the module documentation. Sides are "s" and client indices."""

    def __init__(
        self,
        clients: int,
        links: int = 2,
        rate_mbit: float | None = None,
        servers: int = 1,
        delays_ms: list[float] | None = None,
    ):
        """With `servers` = 2, the bridges move to a switch namespace and a
        second server namespace ("s1", link addresses 172.(16+l).255.251)
        joins them: two concentrators for the same clients. `delays_ms`:
        one-way delay of each link between server 0 and its bridge."""
        if not 1 <= clients <= 2000 or not 1 <= links <= 8 or servers not in (1, 2):
            raise ValueError("1 to 2000 clients, 1 to 8 links, 1 or 2 servers")
        delays = list(delays_ms or [])
        if delays and (len(delays) != links or any(not 0 <= d <= 10_000 for d in delays)):
            raise ValueError(f"delays_ms: one delay per link ({links}), each 0..10000 ms")
        self.delays = delays if any(delays) else []
        uid = f"{os.getpid()}x{next(_counter)}"
        self.s = f"mps{uid}s"
        self.servers = [self.s] + ([f"mps{uid}t"] if servers == 2 else [])
        # Where the bridges are: the server, or a switch between servers.
        split = servers == 2 or bool(self.delays)
        self.w = f"mps{uid}w" if split else self.s
        # The emulator's namespace (delays only).
        self.d = f"mps{uid}d" if self.delays else None
        self.c = [f"mps{uid}c{i}" for i in range(clients)]
        self.second: Peer | None = None
        # Namespaces a caller adds (a core router, LAN hosts): torn down
        # with the star.
        self.extra_ns: list[str] = []
        self.links = links
        self.procs: list[subprocess.Popen[Any]] = []
        self.emulator: subprocess.Popen[Any] | None = None
        self._closed = False
        _live.append(self)  # type: ignore[arg-type]
        try:
            self._build(rate_mbit)
        except BaseException:
            self.close()
            raise

    def _build(self, rate: float | None) -> None:
        for ns in self.namespaces():
            run(["ip", "netns", "add", ns])
            run(["ip", "link", "set", "lo", "up"], ns=ns)
            run(["sysctl", "-qw", "net.ipv4.tcp_no_metrics_save=1"], ns=ns)
        for link in range(self.links):
            br = f"br{link}"
            run(["ip", "link", "add", br, "type", "bridge"], ns=self.w)
            run(["ip", "link", "set", br, "up"], ns=self.w)
            if self.w == self.s:
                run(["ip", "addr", "add", f"{server_link(link)}/16", "dev", br], ns=self.s)
                continue
            for k, sv in enumerate(self.servers):
                a, b = f"u{link}", f"s{k}l{link}"
                if k == 0 and self.d is not None:
                    # server 0 -- d{link}a [mpt-netem] d{link}b -- bridge
                    da, db = f"d{link}a", f"d{link}b"
                    _veth(a, sv, da, self.d)
                    _veth(db, self.d, b, self.w)
                    for ns, dev in ((sv, a), (self.d, da), (self.d, db), (self.w, b)):
                        _no_offloads(ns, dev)
                    for dev in (da, db):
                        run(["ip", "link", "set", dev, "up"], ns=self.d)
                else:
                    _veth(a, sv, b, self.w)
                run(["ip", "link", "set", b, "master", br, "up"], ns=self.w)
                run(["ip", "addr", "add", f"{server_link(link, k)}/16", "dev", a], ns=sv)
                run(["ip", "link", "set", a, "up"], ns=sv)
        for i, ns in enumerate(self.c):
            for link in range(self.links):
                a, b = f"e{link}", f"v{i}l{link}"
                run(
                    [
                        *["ip", "link", "add", a, "netns", ns, "type", "veth"],
                        *["peer", "name", b, "netns", self.w],
                    ]
                )
                run(["ip", "link", "set", b, "master", f"br{link}", "up"], ns=self.w)
                run(["ip", "addr", "add", f"{client_link(i, link)}/16", "dev", a], ns=ns)
                run(["ip", "link", "set", a, "up"], ns=ns)
                if rate:
                    burst = max(int(rate * 1e6 / 8 / 100), 16_000)
                    limit = int(rate * 1e6 / 8 * 0.02) + burst
                    tbf = ["tbf", "rate", f"{rate}mbit", "burst", str(burst), "limit", str(limit)]
                    run(["tc", "qdisc", "replace", "dev", a, "root", *tbf], ns=ns)
                    run(["tc", "qdisc", "replace", "dev", b, "root", *tbf], ns=self.w)

        if self.d is not None:
            self._start_emulator()

    def _start_emulator(self) -> None:
        """mpt-netem between server 0 and the bridges, one delay per link."""
        assert self.d is not None
        links = [
            {"a": f"d{i}a", "b": f"d{i}b", "a_to_b": {"delay_ms": d}, "b_to_a": {"delay_ms": d}}
            for i, d in enumerate(self.delays)
        ]
        cfg = emulator_config_path(self.d)
        cfg.write_text(json.dumps({"links": links}))
        p = self.spawn_in(self.d, [*emulator_priority(False), str(netem_binary()), str(cfg)])
        self.emulator = p
        assert p.stdout is not None
        line = p.stdout.readline().strip()
        if not line.startswith("ready"):
            raise RuntimeError(f"mpt-netem did not start: {line}")

    def client_shapers(self) -> dict[str, int]:
        """The clients' rate shapers toward the server, summed over every
        client and link: packets sent and dropped (a full bottleneck
        buffer: what the senders' rate control overshot). Zeros without
        shaping. The units differ: tbf counts each segment of a GSO send
        it passes, and a GSO send it drops as one drop (up to 64 KiB,
        dozens of mpt's datagrams)."""
        total = {"packets": 0, "drops": 0}
        for ns in self.c:
            for link in range(self.links):
                p = run(["tc", "-s", "-j", "qdisc", "show", "dev", f"e{link}"], ns=ns, check=False)
                try:
                    qdiscs = json.loads(p.stdout) if p.returncode == 0 else []
                except json.JSONDecodeError:
                    continue
                for q in qdiscs:
                    if q.get("kind") == "tbf":
                        total["packets"] += int(q.get("packets", 0))
                        total["drops"] += int(q.get("drops", 0))
        return total

    def emulator_stats(self) -> dict[str, Any] | None:
        """Stop the delay emulator and return its counters per direction
        (frames passed, how late the latest left: `late_ns_max`), or None
        without one. A late emulator stalls every client's paths at once,
        which a tunnel's liveness reads as its paths going silent."""
        if self.emulator is None:
            return None
        try:
            return stop_emulator(self.emulator)
        except subprocess.TimeoutExpired:
            return None

    def server_dev(self, link: int) -> str:
        """Server 0's interface on link `link`."""
        return f"br{link}" if self.w == self.s else f"u{link}"

    def spawn_in(self, ns: str, args: list[str]) -> subprocess.Popen[Any]:
        p = subprocess.Popen(
            ["ip", "netns", "exec", ns, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self.procs.append(p)
        return p

    def ns(self, side: str | int) -> str:
        if side == "s":
            return self.s
        if side == "s1":
            return self.servers[1]
        return self.c[int(side)]

    def spawn(self, side: str | int, args: list[str], **kw: Any) -> subprocess.Popen[Any]:
        p = subprocess.Popen(["ip", "netns", "exec", self.ns(side), *args], **kw)
        self.procs.append(p)
        return p

    def namespaces(self) -> list[str]:
        extra = [self.d] if self.d else []
        return list(dict.fromkeys([*self.servers, self.w, *extra, *self.c, *self.extra_ns]))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        teardown(self.procs, self.namespaces())
        if self in _live:  # type: ignore[comparison-overlap]
            _live.remove(self)  # type: ignore[arg-type]

    def __enter__(self) -> Star:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _key(workdir: Path, name: str) -> str:
    key = workdir / f"{name}.key"
    if key.exists():
        key.unlink()
    run([str(mpt_binary()), "genkey", "-o", str(key)])
    return run([str(mpt_binary()), "pubkey", "-i", str(key)]).stdout.strip()


def peer_block(i: int, pub: str, lan: str | None = None) -> str:
    """Client i's [[peer]]; `lan`: a network behind it (its `routes`)."""
    return (
        f'[[peer]]\nname = "client{i}"\npublic_key = "{pub}"\n'
        f'allowed_ips = ["{client_tunnel(i)}/32"]\n' + (f'routes = ["{lan}"]\n' if lan else "")
    )


def _server_config(
    star: Star,
    workdir: Path,
    k: int,
    listed: list[int],
    cpubs: list[str],
    announce_table: int | None = None,
    shards: int | None = None,
    lans: dict[int, str] | None = None,
    extra: str = "",
) -> Path:
    """Concentrator k's configuration (server 0 keeps the plain names)."""
    tag = "server" if k == 0 else f"server{k}"
    lines = [
        "[tunnel]",
        'name = "mpc0"',
        f'addresses = ["{SERVER_TUNNEL}/16"]',
        f'control_socket = "{workdir / f"{tag}.sock"}"',
        *([f"announce_table = {announce_table}"] if announce_table else []),
        *([f"shards = {shards}"] if shards else []),
        "",
        "[security]",
        f'private_key_file = "{workdir / f"{tag}.key"}"',
    ]
    for link in range(star.links):
        lines += [
            "",
            "[[path]]",
            f'name = "link{link}"',
            f'local = "{server_link(link, k)}:{PORT + link}"',
        ]
    lines.append("")
    if extra:
        lines += [extra, ""]
    lines += [peer_block(i, cpubs[i], (lans or {}).get(i)) for i in listed]
    path = workdir / f"{tag}.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def start(
    star: Star,
    workdir: Path,
    peers: list[int] | None = None,
    failover: str = "",
    announce_table: int | None = None,
    server_shards: int | None = None,
    client_paths: list[str] | None = None,
    lans: dict[int, str] | None = None,
    client_routes: list[str] | None = None,
    server_extra: str = "",
    binary: Path | None = None,
    client_extra: str = "",
) -> tuple[Peer, list[Peer]]:
    """Write the configurations (the concentrator lists `peers`, default
    all clients), start every daemon; return (server, clients). With two
    servers, both run (the second is `star.second`), and each client lists
    the second as its `[[server]]`; `failover` is extra `[failover]` text.
    `lans`: client index to the network behind it (the concentrators'
    `routes` for that peer); `client_routes`: networks every client
    reaches through the tunnel (its `[[route]]`s); `server_extra`: more
    sections for the concentrators' files; `binary` runs every daemon
    (None: `mpt_binary()`); `client_extra`: more TOML for every client's
    file."""
    workdir.mkdir(parents=True, exist_ok=True)
    n = len(star.c)
    spubs = [_key(workdir, "server" if k == 0 else f"server{k}") for k in range(len(star.servers))]
    cpubs = [_key(workdir, f"client{i}") for i in range(n)]
    listed = list(range(n)) if peers is None else peers
    running = []
    for k in range(len(star.servers)):
        tag = "server" if k == 0 else f"server{k}"
        cfg = _server_config(
            star, workdir, k, listed, cpubs, announce_table, server_shards, lans, server_extra
        )
        side = "s" if k == 0 else "s1"
        p = Peer(star, side, cfg, workdir / f"{tag}.sock", workdir / f"{tag}.log", binary)  # type: ignore[arg-type]
        running.append(p.start())
    server = running[0]
    star.second = running[1] if len(running) > 1 else None
    clients = []
    for i in range(n):
        d = workdir / f"client{i}"
        d.mkdir(exist_ok=True)
        text = _client_text(star, workdir, i, spubs[0], lambda link: PORT + link, client_paths)
        for k in range(1, len(star.servers)):
            remotes = ", ".join(
                f'"{server_link(link, k)}:{PORT + link}"' for link in range(star.links)
            )
            text += ["", "[[server]]", f'name = "server{k}"', f'public_key = "{spubs[k]}"']
            text.append(f"remotes = [{remotes}]")
        if failover:
            text += ["", "[failover]", failover]
        for net in client_routes or []:
            text += ["", "[[route]]", f'network = "{net}"']
        if client_extra:
            # `tunnel.KEY = VALUE` lines belong in [tunnel] (as for a pair).
            lines = client_extra.splitlines()
            at = text.index("[tunnel]") + 1
            text[at:at] = [x.strip()[len("tunnel.") :] for x in lines if _in_tunnel(x)]
            text += ["", *(x for x in lines if not _in_tunnel(x))]
        (d / "c.toml").write_text("\n".join(text) + "\n")
        c = Peer(star, i, d / "c.toml", d / "c.sock", d / "c.log", binary)  # type: ignore[arg-type]
        clients.append(c.start())
    return server, clients


def _client_text(
    star: Star,
    workdir: Path,
    i: int,
    server_pub: str,
    remote_port: Callable[[int], int],
    path_names: list[str] | None = None,
) -> list[str]:
    """Client i's configuration, its path `link` to the server's port
    `remote_port(link)` (its files in `workdir/client{i}`)."""
    d = workdir / f"client{i}"
    text = [
        "[tunnel]",
        'name = "mpc0"',
        f'addresses = ["{client_tunnel(i)}/16"]',
        f'control_socket = "{d / "c.sock"}"',
        "workers = 1",
        "",
        "[peer]",
        'role = "client"',
        "",
        "[security]",
        f'private_key_file = "{workdir / f"client{i}.key"}"',
        f'peer_public_key = "{server_pub}"',
    ]
    for link in range(star.links):
        pname = path_names[link] if path_names else f"link{link}"
        text += [
            "",
            "[[path]]",
            f'name = "{pname}"',
            f'local = "{client_link(i, link)}:{PORT + link}"',
            f'remote = "{server_link(link)}:{remote_port(link)}"',
        ]
    return text


def peer_add_args(workdir: Path, i: int) -> list[str]:
    """`mpt peer add` arguments for client i (its key written by start)."""
    pub = run([str(mpt_binary()), "pubkey", "-i", str(workdir / f"client{i}.key")]).stdout.strip()
    return [
        "peer",
        "-s",
        str(workdir / "server.sock"),
        "add",
        "--name",
        f"client{i}",
        "--public-key",
        pub,
        "--allowed-ips",
        f"{client_tunnel(i)}/32",
    ]


def tunnel_port(i: int, link: int, links: int) -> int:
    """Server port of link `link` of the single tunnel that serves client
    `i` ([`start_tunnels`])."""
    return PORT + 1000 + i * links + link


def start_tunnels(star: Star, workdir: Path) -> tuple[list[Peer], list[Peer]]:
    """The same clients served by single tunnels instead of a concentrator:
    the server namespace runs one ordinary daemon per client (interface
    `mpsN`, the server's tunnel address as a /32, a route to its client's
    address, its own ports); each client runs the configuration `start`
    writes, its remotes at its own daemon's ports. Returns (servers,
    clients)."""
    workdir.mkdir(parents=True, exist_ok=True)
    n = len(star.c)
    spub = _key(workdir, "server")
    cpubs = [_key(workdir, f"client{i}") for i in range(n)]
    servers = []
    for i in range(n):
        lines = [
            "[tunnel]",
            f'name = "mps{i}"',
            f'addresses = ["{SERVER_TUNNEL}/32"]',
            f'control_socket = "{workdir / f"server{i}.sock"}"',
            "workers = 1",
            "",
            "[peer]",
            'role = "server"',
            "",
            "[security]",
            f'private_key_file = "{workdir / "server.key"}"',
            f'peer_public_key = "{cpubs[i]}"',
        ]
        for link in range(star.links):
            lines += [
                "",
                "[[path]]",
                f'name = "link{link}"',
                f'local = "{server_link(link)}:{tunnel_port(i, link, star.links)}"',
            ]
        lines += ["", "[[route]]", f'network = "{client_tunnel(i)}/32"']
        cfg = workdir / f"server{i}.toml"
        cfg.write_text("\n".join(lines) + "\n")
        p = Peer(star, "s", cfg, workdir / f"server{i}.sock", workdir / f"server{i}.log")  # type: ignore[arg-type]
        servers.append(p.start())
    clients = []
    for i in range(n):
        d = workdir / f"client{i}"
        d.mkdir(exist_ok=True)
        text = _client_text(
            star, workdir, i, spub, lambda link, i=i: tunnel_port(i, link, star.links)
        )
        (d / "c.toml").write_text("\n".join(text) + "\n")
        c = Peer(star, i, d / "c.toml", d / "c.sock", d / "c.log")  # type: ignore[arg-type]
        clients.append(c.start())
    return servers, clients
