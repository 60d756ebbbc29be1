"""Traffic generators: iperf3 (TCP/UDP) and ping, returning parsed results.

Invariants: every run is bounded in time (iperf3 duration plus a margin,
enforced by a subprocess timeout); servers are one-off (`-1`) and stopped by
PID through the topology if a client fails.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass

from .netns import Topology
from .util import run, wait_for


@dataclass
class IperfResult:
    mbps: float
    retransmits: int | None = None
    lost_percent: float | None = None
    raw: dict | None = None


def _port_open(topo: Topology, side: str, port: int) -> bool:
    out = run(["ss", "-Hltn", f"sport = :{port}"], ns=topo.ns(side), check=False).stdout
    return bool(out.strip())


def iperf3(
    topo: Topology,
    server_addr: str,
    *,
    udp: bool = False,
    seconds: float = 5,
    rate: str | None = None,
    length: int | None = None,
    streams: int = 1,
    port: int = 5201,
    reverse: bool = False,
) -> IperfResult:
    """Run iperf3 from A to a server in B at `server_addr`."""
    srv = topo.spawn(
        "b",
        ["iperf3", "-s", "-1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_for(f"iperf3 server on port {port}", lambda: _port_open(topo, "b", port), timeout=10)
    args = [
        "iperf3",
        "-c",
        server_addr,
        "-p",
        str(port),
        "-J",
        "-t",
        str(seconds),
        "-P",
        str(streams),
    ]
    if udp:
        args += ["-u", "-b", rate or "0"]
    elif rate:
        args += ["-b", rate]
    if length:
        args += ["-l", str(length)]
    if reverse:
        args.append("-R")
    p = run(args, ns=topo.a, check=False, timeout=seconds + 30)
    try:
        srv.wait(timeout=10)
    except subprocess.TimeoutExpired:
        srv.kill()
    try:
        data = json.loads(p.stdout)
    except json.JSONDecodeError as e:
        raise RuntimeError(f"iperf3 failed: {p.stderr.strip() or p.stdout[:300]}") from e
    if "error" in data:
        raise RuntimeError(f"iperf3: {data['error']}")
    end = data["end"]
    if udp:
        s = end["sum"]
        # Received rate: the sent rate times the fraction the server got
        # (the server's own rate field is unreliable across iperf3 versions).
        lost = float(s.get("lost_percent", 0))
        mbps = s["bits_per_second"] * (1 - lost / 100) / 1e6
        return IperfResult(mbps=mbps, lost_percent=lost, raw=data)
    recv = end["sum_received"]["bits_per_second"] / 1e6
    retr = end.get("sum_sent", {}).get("retransmits")
    return IperfResult(mbps=recv, retransmits=retr, raw=data)


@dataclass
class PingResult:
    sent: int
    received: int
    avg_ms: float | None


def ping(topo: Topology, side: str, addr: str, count: int = 5, interval: float = 0.2) -> PingResult:
    p = run(
        ["ping", "-c", str(count), "-i", str(interval), "-W", "2", addr],
        ns=topo.ns(side),
        check=False,
        timeout=count * interval + 10,
    )
    m = re.search(r"(\d+) packets transmitted, (\d+) received", p.stdout)
    if not m:
        raise RuntimeError(f"ping output not understood: {p.stdout} {p.stderr}")
    avg = re.search(r"= [\d.]+/([\d.]+)/", p.stdout)
    return PingResult(int(m.group(1)), int(m.group(2)), float(avg.group(1)) if avg else None)
