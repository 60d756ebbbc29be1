"""mpt daemons in a topology: configuration, start, status, stop.

Invariants: each daemon gets its own control socket and log file under a
per-run directory (namespaces share one filesystem); a daemon is stopped by
its PID with SIGTERM and waited for, with SIGKILL only after a timeout.
"""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .netns import Topology, link_addr
from .util import mpt_binary, run, wait_for

TUNNEL_V4 = {"a": "10.99.0.1", "b": "10.99.0.2"}
TUNNEL_V6 = {"a": "fd99::1", "b": "fd99::2"}
BASE_PORT = 6000


@dataclass
class PathOpts:
    link: int
    ipv: int = 4
    # None: no weight written, so the daemon learns each path's capacity
    # (path-aware scheduling); a number selects static weights.
    weight: int | None = None


@dataclass
class TunnelOpts:
    """What to build: tunnel IP versions, paths, and extra config text."""

    paths: list[PathOpts]
    tunnel_v4: bool = True
    tunnel_v6: bool = True
    name: str = "mpt0"
    keepalive_ms: int | None = None
    dead_ms: int | None = None
    extra: str = ""
    # "keys": encrypted with fresh keys per run; "insecure": plaintext.
    security: str = "keys"
    # Extra lines for the [security] section (cipher, rekey, psk ...).
    security_extra: str = ""
    # Server paths without `remote` (the server learns the client's address).
    server_learns: bool = False
    # [tunnel] workers; None: the daemon's default (one per CPU core).
    workers: int | None = None
    # [tunnel] parallel: "auto" (the daemon's default) or "always".
    parallel: str | None = None
    # The daemon binary; None: mpt_binary() (A/B runs use an earlier build).
    binary: Path | None = None
    # Configuration text for one side only ({"a": ..., "b": ...}): routes
    # of routed sites.
    side_extra: dict[str, str] | None = None


def _sock(addr: str, port: int) -> str:
    return f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}"


def make_keys(workdir: Path) -> dict[str, str]:
    """Private key files (mode 0600) and public keys for both sides."""
    pubs = {}
    for side in ("a", "b"):
        key = workdir / f"{side}.key"
        if key.exists():
            key.unlink()
        run([str(mpt_binary()), "genkey", "-o", str(key)])
        pubs[side] = run([str(mpt_binary()), "pubkey", "-i", str(key)]).stdout.strip()
    return pubs


def _in_tunnel(line: str) -> bool:
    """A line of extra configuration that belongs in [tunnel]."""
    return line.strip().startswith("tunnel.")


def config_text(
    topo: Topology,
    side: str,
    opts: TunnelOpts,
    control: Path,
    pubs: dict[str, str] | None = None,
) -> str:
    other = "b" if side == "a" else "a"
    addrs = []
    if opts.tunnel_v4:
        addrs.append(f'"{TUNNEL_V4[side]}/24"')
    if opts.tunnel_v6:
        addrs.append(f'"{TUNNEL_V6[side]}/64"')
    # Lines of `extra` written `tunnel.KEY = VALUE` belong in [tunnel]
    # (TOML cannot return to it after the other tables).
    extra_lines = opts.extra.splitlines()
    tunnel_keys = [x.strip()[len("tunnel.") :] for x in extra_lines if _in_tunnel(x)]
    rest = "\n".join(x for x in extra_lines if not _in_tunnel(x))
    lines = [
        "[tunnel]",
        f'name = "{opts.name}"',
        f"addresses = [{', '.join(addrs)}]",
        f'control_socket = "{control}"',
        *([f"workers = {opts.workers}"] if opts.workers else []),
        *([f'parallel = "{opts.parallel}"'] if opts.parallel else []),
        *tunnel_keys,
        "",
        "[peer]",
        f'role = "{"server" if side == "a" else "client"}"',
        "",
        "[security]",
    ]
    if opts.security == "insecure" or pubs is None:
        lines.append("insecure_no_encryption = true")
    else:
        lines += [
            f'private_key_file = "{control.parent / f"{side}.key"}"',
            f'peer_public_key = "{pubs[other]}"',
        ]
        if opts.security_extra:
            lines.append(opts.security_extra)
    for i, p in enumerate(opts.paths):
        port = BASE_PORT + i
        lines += [
            "",
            "[[path]]",
            f'name = "link{p.link}v{p.ipv}"',
            f'local = "{_sock(link_addr(p.link, side, p.ipv), port)}"',
        ]
        if not (opts.server_learns and side == "a"):
            lines.append(f'remote = "{_sock(link_addr(p.link, other, p.ipv), port)}"')
        if p.weight is not None:
            lines += [f"weight = {p.weight}"]
        if opts.keepalive_ms:
            lines.append(f"keepalive_ms = {opts.keepalive_ms}")
        if opts.dead_ms:
            lines.append(f"dead_ms = {opts.dead_ms}")
    if rest.strip():
        lines += ["", rest]
    if opts.side_extra and opts.side_extra.get(side):
        lines += ["", opts.side_extra[side]]
    return "\n".join(lines) + "\n"


class Peer:
    """One running mpt daemon."""

    def __init__(
        self,
        topo: Topology,
        side: str,
        cfg: Path,
        control: Path,
        log: Path,
        binary: Path | None = None,
    ):
        self.topo, self.side, self.cfg, self.control, self.log = topo, side, cfg, control, log
        self.binary = binary or mpt_binary()
        self.proc: subprocess.Popen[Any] | None = None

    def start(self) -> Peer:
        logf = open(self.log, "w")  # noqa: SIM115 - owned by the process
        self.proc = self.topo.spawn(
            self.side,
            [str(self.binary), "up", "-c", str(self.cfg)],
            stdout=logf,
            stderr=subprocess.STDOUT,
        )
        return self

    def status(self) -> dict[str, Any]:
        return json.loads(self.status_text(json_doc=True))

    def status_text(
        self, json_doc: bool = False, verbose: bool = False, peer: str | None = None
    ) -> str:
        """`mpt status` of this daemon: the human view (one screen, or with
        `verbose` everything), or the JSON text; of a concentrator's `peer`
        in full when named."""
        p = run(
            [
                str(self.binary),
                "status",
                "-s",
                str(self.control),
                *(["--json"] if json_doc else []),
                *(["-v"] if verbose else []),
                *(["--peer", peer] if peer else []),
            ],
            ns=self.topo.ns(self.side),
            timeout=10,
        )
        return p.stdout

    def wait_ready(self, paths_up: int, timeout: float = 10) -> dict[str, Any]:
        def probe() -> dict[str, Any] | None:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"mpt exited with {self.proc.returncode}: {self.log_text()}")
            s = self.status()
            return s if s["paths_up"] >= paths_up else None

        return wait_for(f"{paths_up} paths up on side {self.side}", probe, timeout=timeout)

    def log_text(self) -> str:
        try:
            return self.log.read_text()
        except OSError:
            return ""

    def stop(self, timeout: float = 10) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=timeout)
        return self.proc.returncode


def start_pair(
    topo: Topology,
    opts: TunnelOpts,
    workdir: Path,
    wait: bool = True,
    edit: Callable[[str, str], str] | None = None,
) -> tuple[Peer, Peer]:
    """Write both configurations, start both daemons, wait for all paths.
    `edit(side, text)` may change a configuration before it is written."""
    workdir = workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    pubs = make_keys(workdir) if opts.security == "keys" else None
    peers = []
    for side in ("a", "b"):
        control = workdir / f"{side}.sock"
        cfg = workdir / f"{side}.toml"
        text = config_text(topo, side, opts, control, pubs)
        cfg.write_text(edit(side, text) if edit else text)
        cfg.chmod(0o600)
        log = workdir / f"{side}.log"
        peers.append(Peer(topo, side, cfg, control, log, opts.binary).start())
    if wait:
        for p in peers:
            p.wait_ready(len(opts.paths))
    return peers[0], peers[1]
