"""The systems a scenario compares, each brought up on a topology.

* plain  -- link 1 alone, no tunnel: the reference;
* mpt    -- the mpt tunnel over every link (variants: mpt-insecure without
            encryption, mpt-1w with one worker thread, mpt-parallel with
            helpers working on every batch, mpt-recover and
            mpt-norecover with loss recovery on and off, mpt-base run by
            the earlier build in $MPT_BASE_BIN for A/B comparisons in one
            run; see MPT_VARIANTS);
* mptcp  -- the kernel's Multipath TCP: B announces its address on every
            link (ADD_ADDR), A opens one subflow per link; applications are
            run under `mptcpize`;
* hook   -- any other tunnel, through a user-supplied up/down script pair.

Each system is a context manager that yields the address to send traffic
to and the command prefix that applications need (for mptcp). Invariant:
leaving the context undoes everything it set up (daemons stopped by PID,
endpoints flushed, the hook's down script run).
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .daemon import TUNNEL_V4, TUNNEL_V6, PathOpts, Peer, TunnelOpts, start_pair
from .netns import Topology, link_addr
from .util import CommandError, base_binary, need_tool, run

# The in-kernel path manager allows at most 8 endpoints and 8 additional
# subflows: the initial subflow plus 8, so 9 links at most.
MPTCP_MAX_EXTRA_SUBFLOWS = 8


@dataclass
class Target:
    """Where to send traffic, and how to run applications for this system."""

    addr: str
    wrap: list[str] = field(default_factory=list)
    pids: dict[str, int] = field(default_factory=dict)
    peers: list[Peer] = field(default_factory=list)
    notes: dict[str, object] = field(default_factory=dict)
    # The tunnel's MTU when it is not mpt's (a hook's), for UDP sizing.
    mtu: int | None = None


def weights_for(rates: list[float]) -> list[int]:
    """Path weights proportional to link rates (all 1 when unshaped): what
    only the lab knows, for the `mpt-wrr` comparison system."""
    known = [r for r in rates if r > 0]
    if len(known) != len(rates):
        return [1] * len(rates)
    low = min(known)
    return [max(1, min(1000, round(r / low))) for r in rates]


@contextmanager
def plain(topo: Topology, path_v: int) -> Iterator[Target]:
    yield Target(addr=link_addr(1, "b", path_v))


@contextmanager
def mpt(
    topo: Topology,
    tunnel_v: int,
    path_v: int,
    rates: list[float],
    workdir: Path,
    extra: str = "",
    security: str = "keys",
    workers: int | None = None,
    parallel: str | None = None,
    binary: Path | None = None,
    weights: bool = False,
    learns: bool = False,
    side_extra: dict[str, str] | None = None,
) -> Iterator[Target]:
    """mpt over every link; `security` "keys" (encrypted) or "insecure";
    `learns`: the server (side A) has no `remote` and learns its client's
    addresses;
    `workers` threads per daemon (None: one per core). Path weights stay at
    their default unless `weights` (set from the emulated rates, which a
    user does not know: the `mpt-wrr` system)."""
    w: list[int | None] = list(weights_for(rates)) if weights else [None] * len(rates)
    opts = TunnelOpts(
        paths=[PathOpts(i + 1, path_v, weight=w[i]) for i in range(topo.n)],
        tunnel_v4=tunnel_v == 4,
        tunnel_v6=tunnel_v == 6,
        extra=extra,
        security=security,
        workers=workers,
        parallel=parallel,
        binary=binary,
        server_learns=learns,
        side_extra=side_extra,
    )
    a, b = start_pair(topo, opts, workdir)
    try:
        addr = TUNNEL_V4["b"] if tunnel_v == 4 else TUNNEL_V6["b"]
        pids = {"mpt-a": a.proc.pid, "mpt-b": b.proc.pid} if a.proc and b.proc else {}
        yield Target(addr=addr, pids=pids, peers=[a, b])
    finally:
        a.stop()
        b.stop()


@contextmanager
def mptcp(topo: Topology, path_v: int) -> Iterator[Target]:
    need_tool("mptcpize", "to run iperf3 over the kernel's MPTCP (the mptcp system)")
    extra = min(topo.n - 1, MPTCP_MAX_EXTRA_SUBFLOWS)
    for ns in (topo.a, topo.b):
        run(["sysctl", "-qw", "net.mptcp.enabled=1"], ns=ns)
        run(["ip", "mptcp", "endpoint", "flush"], ns=ns)
        limits = ["subflow", str(extra), "add_addr_accepted", str(extra)]
        run(["ip", "mptcp", "limits", "set", *limits], ns=ns)
    for i in range(2, extra + 2):
        addr = link_addr(i, "b", path_v)
        run(["ip", "mptcp", "endpoint", "add", addr, "dev", topo.dev(i, "b"), "signal"], ns=topo.b)
    try:
        yield Target(
            addr=link_addr(1, "b", path_v),
            wrap=["mptcpize", "run"],
            notes={"mptcp_links_used": extra + 1},
        )
    finally:
        for ns in (topo.a, topo.b):
            run(["ip", "mptcp", "endpoint", "flush"], ns=ns, check=False)


@contextmanager
def hook(
    topo: Topology, up: str, down: str, tunnel_v: int, path_v: int, mtu: int | None = None
) -> Iterator[Target]:
    """Run the user's up script; it prints the address to send to on its
    last line, and before it may print `mtu=N` (the tunnel's MTU, which
    overrides `mtu`)."""
    env = dict(
        os.environ,
        MPTLAB_NS_A=topo.a,
        MPTLAB_NS_B=topo.b,
        MPTLAB_LINKS=str(topo.n),
        MPTLAB_TUNNEL_IP=str(tunnel_v),
        MPTLAB_PATH_IP=str(path_v),
    )
    for i in range(1, topo.n + 1):
        env[f"MPTLAB_LINK{i}_A"] = link_addr(i, "a", path_v)
        env[f"MPTLAB_LINK{i}_B"] = link_addr(i, "b", path_v)
        s = topo.shapes[i - 1]
        env[f"MPTLAB_LINK{i}_RATE_MBIT"] = f"{s.rate_mbit or 0:g}"
        env[f"MPTLAB_LINK{i}_DELAY_MS"] = f"{s.delay_ms:g}"
        env[f"MPTLAB_LINK{i}_JITTER_MS"] = f"{s.jitter_ms:g}"
        env[f"MPTLAB_LINK{i}_LOSS"] = f"{s.loss:g}"
    p = subprocess.run([up], env=env, capture_output=True, text=True, timeout=60, check=False)
    if p.returncode != 0:
        raise CommandError(f"hook up script {up} failed: {p.stderr.strip()}")
    lines = p.stdout.strip().splitlines()
    for line in lines:
        if line.startswith("mtu="):
            try:
                mtu = int(line[4:])
            except ValueError as e:
                raise CommandError(f"hook up script {up} printed a bad MTU: {line!r}") from e
    addrs = [ln for ln in lines if not ln.startswith("mtu=")]
    addr = addrs[-1].strip() if addrs else ""
    try:
        yield Target(addr=addr, mtu=mtu)
    finally:
        subprocess.run([down], env=env, capture_output=True, timeout=60, check=False)


REALTIME_ON = re.compile(r"(?m)^realtime\s*=\s*true\s*$")
OUTER_DSCP = re.compile(r"(?m)^outer_dscp\s*=.*\n?")


def unmarked(extra: str) -> str:
    """The scenario's mpt text with `outer_dscp = 0` on every class that
    sets `realtime = true` (and no other outer_dscp line)."""
    return REALTIME_ON.sub("realtime = true\nouter_dscp = 0", OUTER_DSCP.sub("", extra))


# mpt run in other ways than the default, by system name.
MPT_VARIANTS: dict[str, dict[str, Any]] = {
    "mpt-insecure": {"security": "insecure"},
    "mpt-1w": {"workers": 1},
    "mpt-parallel": {"parallel": "always"},
    "mpt-recover": {"extra": "[reorder]\nrecover = true"},
    # Loss recovery off: what the recovery ring's copies cost.
    "mpt-norecover": {"extra": "[reorder]\nrecover = false"},
    # A tunnel MTU of one datagram (1432 over IPv4 paths of MTU 1500):
    # every inner packet whole, the inner TCP's segments small.
    "mpt-1dg": {"extra": "tunnel.mtu = 1432"},
    # The reorder buffer waits 200 ms longer for a gap (with recovery,
    # its resend's wait comes on top), and mpt's send queue holds twice
    # as long: the two waits the inner TCP sees as loss when they end.
    "mpt-hold": {"extra": "[reorder]\nmax_delay_ms = 300"},
    "mpt-q200": {"extra": "[scheduler]\nqueue_ms = 200"},
    # Local push-back on (off by default): each path socket's send buffer
    # at 4 ms of its paths' delivery rate.
    "mpt-pushback": {"extra": "[scheduler]\nlocal_queue_ms = 4"},
    # Static weights from the emulated link rates: today's weighted
    # round-robin with knowledge a user lacks, for comparison only.
    "mpt-wrr": {"weights": True},
    # The same tunnel run by an earlier build ($MPT_BASE_BIN): A/B in one run.
    "mpt-base": {"binary": base_binary},
    # QoS off: one FIFO per path, the "classic design" of the QoS scenario.
    "mpt-noqos": {"extra": "[qos]\nenabled = false", "without_qos": True},
    # Real-time classes on one path: the scenario's `redundant = true` off.
    "mpt-noredundant": {"transform": lambda own: REDUNDANT_ON.sub("redundant = false", own)},
    # The scenario's real-time classes without the outer DSCP mark (RFC
    # 2983's pipe model): what a WMM link makes of the mark, in one run.
    "mpt-nomark": {"transform": unmarked},
}
REDUNDANT_ON = re.compile(r"(?m)^redundant\s*=\s*true\s*$")


def without_qos(extra: str) -> str:
    """The scenario's mpt text without its QoS part (which scenarios write
    last: everything from the first [qos] or [[qos.class]] line on)."""
    lines = extra.splitlines()
    for i, line in enumerate(lines):
        if line.strip().startswith(("[qos]", "[[qos.")):
            return "\n".join(lines[:i])
    return extra
