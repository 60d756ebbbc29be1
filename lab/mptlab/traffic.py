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

from .netns import Topology, link_addr
from .util import need_tool, run, wait_for


@dataclass
class IperfResult:
    mbps: float
    retransmits: int | None = None
    lost_percent: float | None = None
    raw: dict | None = None


# Report period of the server's own intervals when they are asked for: the
# receiver's view of a transfer over time (the client's intervals count
# what entered its socket buffer).
SERVER_INTERVAL_S = 0.5


def _server_spans(raw: dict | None, start_s: float, end_s: float | None) -> list[dict]:
    """The receiver's (iperf3 server's) whole intervals that start at
    `start_s` or later and end by `end_s` (None: no end)."""
    server = (raw or {}).get("server_output_json") or {}
    return [
        i
        for i in server.get("intervals", [])
        if i.get("sum", {}).get("start", -1) >= start_s - 1e-6
        and (end_s is None or i["sum"].get("end", 0) <= end_s + 1e-3)
    ]


def steady_mbps(raw: dict | None, after_s: float) -> float | None:
    """The receiver's mean rate over its whole intervals that start at
    `after_s` or later and end by the client's duration (the server's last
    interval is the tail after the client stopped): the transfer once
    started, without its slow start. None without server intervals."""
    duration = (raw or {}).get("start", {}).get("test_start", {}).get("duration")
    spans = [i["sum"] for i in _server_spans(raw, after_s, duration)]
    secs = sum(s["seconds"] for s in spans)
    if secs <= 0:
        return None
    return sum(s["bytes"] for s in spans) * 8 / secs / 1e6


def receiver_timeline_mbps(raw: dict | None) -> list[float] | None:
    """The receiver's rate in each of its intervals (every
    SERVER_INTERVAL_S), Mbit/s, in order: how the transfer started and
    held. None without server intervals."""
    spans = [i["sum"] for i in _server_spans(raw, 0.0, None)]
    out = [s["bytes"] * 8 / s["seconds"] / 1e6 for s in spans if s.get("seconds", 0) > 0]
    return out or None


def receiver_details(raw: dict | None, after_s: float) -> dict:
    """What the receiver's intervals say of a transfer, for its details:
    `steady_mbps` from `after_s` on (with `steady_after_s`), and the rate
    in each interval (`receiver_mbps`, every `receiver_interval_s`).
    Empty without server intervals."""
    d: dict = {}
    steady = steady_mbps(raw, after_s)
    if steady is not None:
        d["steady_mbps"] = steady
        d["steady_after_s"] = after_s
    timeline = receiver_timeline_mbps(raw)
    if timeline is not None:
        d["receiver_mbps"] = [round(x, 3) for x in timeline]
        d["receiver_interval_s"] = SERVER_INTERVAL_S
    return d


def window_streams_mbps(raw: dict | None, start_s: float, end_s: float) -> list[float] | None:
    """Each stream's rate at the receiver over its whole intervals within
    [`start_s`, `end_s`] of the client's run (server intervals, as for
    `steady_mbps`). None without server intervals in that span."""
    spans = _server_spans(raw, start_s, end_s)
    secs = sum(i["sum"]["seconds"] for i in spans)
    if secs <= 0:
        return None
    n = min(len(i.get("streams", [])) for i in spans)
    if n == 0:
        return None
    return [sum(i["streams"][k]["bytes"] for i in spans) * 8 / secs / 1e6 for k in range(n)]


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
    wrap: list[str] | None = None,
    interval: float | None = None,
    window: str | None = None,
    server_intervals: bool = False,
) -> IperfResult:
    """Run iperf3 from A to a server in B at `server_addr`. `wrap` prefixes
    both commands (for example mptcpize); `interval` sets the report period
    of the per-interval timeline; `window` the socket buffer size (-w) of
    both ends; `server_intervals` brings the receiver's intervals
    (every SERVER_INTERVAL_S) into the result, for `steady_mbps`."""
    need_tool("iperf3", "for TCP and UDP transfers")
    w = wrap or []
    srv_args = ["-J", "-i", str(SERVER_INTERVAL_S)] if server_intervals else []
    srv = topo.spawn(
        "b",
        [*w, "iperf3", "-s", "-1", "-p", str(port), *srv_args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_for(f"iperf3 server on port {port}", lambda: _port_open(topo, "b", port), timeout=10)
    args = [*w, "iperf3", "-c", server_addr, "-p", str(port), "-J", "-t", str(seconds)]
    args += ["-P", str(streams)]
    if udp:
        args += ["-u", "-b", rate or "0"]
    elif rate:
        args += ["-b", rate]
    if length:
        args += ["-l", str(length)]
    if reverse:
        args.append("-R")
    if interval:
        args += ["-i", str(interval)]
    if window:
        args += ["-w", window]
    if server_intervals:
        args.append("--get-server-output")
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


def reference_mbps(topo: Topology, link: int = 1, seconds: float = 2) -> float:
    """Plain TCP throughput over link `link` between the namespaces, without
    the tunnel: the machine's own reference, measured in the same test, for
    assertions that would otherwise hard-code figures of one machine."""
    return iperf3(topo, link_addr(link, "b", 4), seconds=seconds, port=5299).mbps


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


@dataclass
class HttpResult:
    mbps: float
    seconds: float
    bytes: int


NGINX_CONF = """
daemon off;
master_process off;
worker_processes 1;
error_log {root}/error.log;
pid {root}/nginx.pid;
events {{ worker_connections 64; }}
http {{
    access_log off;
    sendfile on;
    tcp_nopush on;
    server {{
        listen {port};
        listen [::]:{port};
        root {root};
    }}
}}
"""


def http_download(
    topo: Topology,
    server_addr: str,
    size_bytes: int,
    *,
    port: int = 8080,
    wrap: list[str] | None = None,
    timeout: float = 600,
) -> HttpResult:
    """Serve a file of `size_bytes` with nginx from tmpfs in B and fetch it
    with curl in A to /dev/null."""
    import shutil
    import tempfile
    from pathlib import Path

    w = wrap or []
    root = Path(tempfile.mkdtemp(prefix=f"{topo.b}-www-", dir="/dev/shm"))
    try:
        with open(root / "file.bin", "wb") as f:
            f.truncate(size_bytes)  # sparse on tmpfs: served as zeros, no memory
        conf = root / "nginx.conf"
        conf.write_text(NGINX_CONF.format(root=root, port=port))
        srv = topo.spawn(
            "b",
            [*w, "nginx", "-c", str(conf)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_for(f"nginx on port {port}", lambda: _port_open(topo, "b", port), timeout=10)
        host = f"[{server_addr}]" if ":" in server_addr else server_addr
        p = run(
            [
                *w,
                "curl",
                "-sS",
                "-o",
                "/dev/null",
                "-w",
                "%{size_download} %{time_total}",
                f"http://{host}:{port}/file.bin",
            ],
            ns=topo.a,
            timeout=timeout,
        )
        srv.terminate()
        srv.wait(timeout=10)
        size_s, secs_s = p.stdout.split()
        size, secs = int(float(size_s)), float(secs_s)
        if size != size_bytes:
            raise RuntimeError(f"HTTP download incomplete: {size} of {size_bytes} bytes")
        return HttpResult(mbps=size * 8 / secs / 1e6, seconds=secs, bytes=size)
    finally:
        shutil.rmtree(root, ignore_errors=True)
