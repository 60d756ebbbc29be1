"""A concentrator's lab: one server namespace S and many client
namespaces, each client joined to S by `links` links.

    client 0  e0 ----+                     +---- br0 172.16.0.1/16
              e1 --+ |   S: one bridge per |
    client 1  e0 --|-+-- link, one mpt     +---- br1 172.17.0.1/16
              e1 --+     concentrator
    ...              (link l of client i: 172.(16+l).(i//250).(i%250+2)/16)

Each client link may be shaped with tbf (both directions). The server's
mpt is a concentrator with one [[peer]] per client; each client runs an
ordinary client configuration. Tunnel addresses: the server 10.201.0.1/16,
client i 10.201.(1 + i//250).(i%250 + 2)/16 (its allowed IP, /32).

Invariants: namespaces are uniquely named and always deleted (context
manager, atexit); every daemon has its own directory of files; processes
are stopped by PID.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

from .daemon import Peer
from .netns import _counter, _live, teardown
from .util import mpt_binary, run

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
        self, clients: int, links: int = 2, rate_mbit: float | None = None, servers: int = 1
    ):
        """With `servers` = 2, the bridges move to a switch namespace and a
        second server namespace ("s1", link addresses 172.(16+l).255.251)
        joins them: two concentrators for the same clients."""
        if not 1 <= clients <= 2000 or not 1 <= links <= 8 or servers not in (1, 2):
            raise ValueError("1 to 2000 clients, 1 to 8 links, 1 or 2 servers")
        uid = f"{os.getpid()}x{next(_counter)}"
        self.s = f"mps{uid}s"
        self.servers = [self.s] + ([f"mps{uid}t"] if servers == 2 else [])
        # Where the bridges are: the server, or a switch between servers.
        self.w = self.s if servers == 1 else f"mps{uid}w"
        self.c = [f"mps{uid}c{i}" for i in range(clients)]
        self.second: Peer | None = None
        self.links = links
        self.procs: list[subprocess.Popen[Any]] = []
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
                run(
                    [
                        *["ip", "link", "add", a, "netns", sv, "type", "veth"],
                        *["peer", "name", b, "netns", self.w],
                    ]
                )
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
        return list(dict.fromkeys([*self.servers, self.w, *self.c]))

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


def peer_block(i: int, pub: str) -> str:
    return (
        f'[[peer]]\nname = "client{i}"\npublic_key = "{pub}"\n'
        f'allowed_ips = ["{client_tunnel(i)}/32"]\n'
    )


def _server_config(
    star: Star,
    workdir: Path,
    k: int,
    listed: list[int],
    cpubs: list[str],
    announce_table: int | None = None,
    workers: int | None = None,
) -> Path:
    """Concentrator k's configuration (server 0 keeps the plain names)."""
    tag = "server" if k == 0 else f"server{k}"
    lines = [
        "[tunnel]",
        'name = "mpc0"',
        f'addresses = ["{SERVER_TUNNEL}/16"]',
        f'control_socket = "{workdir / f"{tag}.sock"}"',
        *([f"announce_table = {announce_table}"] if announce_table else []),
        *([f"workers = {workers}"] if workers else []),
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
    lines += [peer_block(i, cpubs[i]) for i in listed]
    path = workdir / f"{tag}.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def start(
    star: Star,
    workdir: Path,
    peers: list[int] | None = None,
    failover: str = "",
    announce_table: int | None = None,
    server_workers: int | None = None,
    client_paths: list[str] | None = None,
) -> tuple[Peer, list[Peer]]:
    """Write the configurations (the concentrator lists `peers`, default
    all clients), start every daemon; return (server, clients). With two
    servers, both run (the second is `star.second`), and each client lists
    the second as its `[[server]]`; `failover` is extra `[failover]` text."""
    workdir.mkdir(parents=True, exist_ok=True)
    n = len(star.c)
    spubs = [_key(workdir, "server" if k == 0 else f"server{k}") for k in range(len(star.servers))]
    cpubs = [_key(workdir, f"client{i}") for i in range(n)]
    listed = list(range(n)) if peers is None else peers
    running = []
    for k in range(len(star.servers)):
        tag = "server" if k == 0 else f"server{k}"
        cfg = _server_config(star, workdir, k, listed, cpubs, announce_table, server_workers)
        side = "s" if k == 0 else "s1"
        p = Peer(star, side, cfg, workdir / f"{tag}.sock", workdir / f"{tag}.log")  # type: ignore[arg-type]
        running.append(p.start())
    server = running[0]
    star.second = running[1] if len(running) > 1 else None
    clients = []
    for i in range(n):
        d = workdir / f"client{i}"
        d.mkdir(exist_ok=True)
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
            f'peer_public_key = "{spubs[0]}"',
        ]
        for link in range(star.links):
            pname = client_paths[link] if client_paths else f"link{link}"
            text += [
                "",
                "[[path]]",
                f'name = "{pname}"',
                f'local = "{client_link(i, link)}:{PORT + link}"',
                f'remote = "{server_link(link)}:{PORT + link}"',
            ]
        for k in range(1, len(star.servers)):
            remotes = ", ".join(
                f'"{server_link(link, k)}:{PORT + link}"' for link in range(star.links)
            )
            text += ["", "[[server]]", f'name = "server{k}"', f'public_key = "{spubs[k]}"']
            text.append(f"remotes = [{remotes}]")
        if failover:
            text += ["", "[failover]", failover]
        (d / "c.toml").write_text("\n".join(text) + "\n")
        c = Peer(star, i, d / "c.toml", d / "c.sock", d / "c.log")  # type: ignore[arg-type]
        clients.append(c.start())
    return server, clients


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
