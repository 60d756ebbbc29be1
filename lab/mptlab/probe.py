"""Probe streams through a topology with mpt-probe: one-way delay, jitter,
loss and reordering as measured by the receiver.

Invariant: the receiver is started and reports `ready` before the sender
begins; both are bounded (count, idle timeout, subprocess timeouts).
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

from .netns import Topology
from .util import probe_binary, run


def _sockaddr(addr: str, port: int) -> str:
    return f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}"


def stream(
    topo: Topology,
    dst_addr: str,
    *,
    count: int,
    pps: float | None,
    size: int = 160,
    train: int = 1,
    port: int = 7000,
    src_side: str = "a",
    dscp: int = 0,
    link_overhead: int = 14,
    idle_ms: int = 1500,
    user_stamps: bool = False,
    sender_cpu: int | None = None,
) -> dict[str, Any]:
    """Send `count` probes from `src_side` to `dst_addr` (on the other side)
    and return the receiver's summary (see mpt_probe::Summary). With
    `train` ≥ 2 the receiver also estimates the bottleneck capacity from
    the trains' dispersion, counting `link_overhead` bytes per packet beyond
    IP (14: Ethernet)."""
    dst_side = "b" if src_side == "a" else "a"
    bind = "[::]" if ":" in dst_addr else "0.0.0.0"
    recv = topo.spawn(
        dst_side,
        [
            str(probe_binary()),
            "recv",
            "--bind",
            f"{bind}:{port}",
            "--count",
            str(count),
            "--idle-ms",
            str(idle_ms),
            "--train",
            str(train),
            "--link-overhead",
            str(link_overhead),
            "--json",
            *(["--user-stamps"] if user_stamps else []),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert recv.stdout is not None
    if recv.stdout.readline().strip() != "ready":
        raise RuntimeError("mpt-probe receiver did not start")
    pin = ["taskset", "-c", str(sender_cpu)] if sender_cpu is not None else []
    args = [
        *pin,
        str(probe_binary()),
        "send",
        "--to",
        _sockaddr(dst_addr, port),
        "--count",
        str(count),
        "--size",
        str(size),
        "--train",
        str(train),
        "--dscp",
        str(dscp),
        "--json",
    ]
    if pps:
        args += ["--pps", str(pps)]
    if user_stamps:
        args.append("--user-stamps")
    duration = count / pps if pps else 1.0
    run(args, ns=topo.ns(src_side), timeout=duration + 30)
    out, _ = recv.communicate(timeout=duration + 30)
    return json.loads(out.strip().splitlines()[-1])


# DSCP of VoIP media: EF (RFC 3246), as VoIP applications mark it.
DSCP_EF = 46


def voip(topo: Topology, dst_addr: str, seconds: float = 10, port: int = 7100) -> dict[str, Any]:
    """A G.711-like stream: 160-byte payload every 20 ms, marked EF."""
    return stream(
        topo, dst_addr, count=int(seconds * 50), pps=50, size=160, port=port, dscp=DSCP_EF
    )
