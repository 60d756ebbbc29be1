"""The `concentrator` scenario: many clients, each with two paths, against
one server, side by side with kernel MPTCP on the same topology.

For mpt: all clients start at once against a running concentrator (time
until every one has a session), then one TCP flow per client to the
server for `seconds` (aggregate throughput, Jain's fairness index across
clients), and the server's memory (RSS) idle and loaded. For MPTCP: the
same flows under `mptcpize`, the server announcing its second address so
that each connection gets a subflow per link. Separately, a concentrator
with `idle_peers` configured peers and no client gives the memory per idle
peer (RSS difference against an empty one).

Invariant: one Star topology per system, always torn down; every figure
comes with the other system's, measured in the same run.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .cpu import cpu_hz
from .results import machine
from .star import SERVER_TUNNEL, Star, server_link, start, start_tunnels
from .systems import MPT_VARIANTS
from .util import CommandError, base_binary, mpt_binary, run, wait_for

IPERF_BASE_PORT = 5300


@dataclass
class Settings:
    clients: int = 50
    links: int = 2
    rate_mbit: float = 4.0
    seconds: float = 10.0
    idle_peers: int = 1000
    systems: list[str] = field(default_factory=lambda: ["mpt", "mptcp"])
    # One-way delay of each link between the server and its clients, ms
    # (empty: none): the clients' paths differ as Wi-Fi and LTE do.
    delay_ms: list[float] = field(default_factory=list)
    # More TOML for every client's file (mpt and mpt-base), e.g.
    # concentrator.client_extra=$'[scheduler]\nlocal_queue_ms = 15'.
    client_extra: str = ""

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Settings:
        s = Settings()
        for k, v in d.items():
            if not hasattr(s, k):
                raise ValueError(f"[concentrator]: unknown key '{k}'")
            cur = getattr(s, k)
            if k == "delay_ms":
                items = v if isinstance(v, list) else [v]
                s.delay_ms = [float(x) for x in items]
            elif isinstance(cur, list):
                items = v if isinstance(v, list) else [v]
                setattr(s, k, [str(x) for x in items])
            else:
                setattr(s, k, type(cur)(v))
        if not 1 <= s.clients <= 500 or not 1 <= s.links <= 4 or s.seconds <= 0:
            raise ValueError("[concentrator]: 1-500 clients, 1-4 links, seconds > 0")
        plain = {"mpt", "mpt-base", "mpt-1w", "mpt-tunnels", "mptcp"}
        bad = [x for x in s.systems if x not in plain and not client_variant(x)]
        if bad:
            variants = ", ".join(sorted(k for k in MPT_VARIANTS if client_variant(k)))
            raise ValueError(
                f"[concentrator]: unknown system {bad[0]!r}: systems are mpt, mpt-base, "
                "mpt-1w, mpt-tunnels, mptcp, and the variants that only add to the "
                f"clients' files ({variants})"
            )
        if s.delay_ms and (len(s.delay_ms) != s.links or min(s.delay_ms) < 0):
            raise ValueError("[concentrator]: delay_ms: one delay (>= 0 ms) per link")
        if s.rate_mbit < 0:
            raise ValueError("[concentrator]: rate_mbit >= 0 (0: links not shaped)")
        return s


def client_variant(system: str) -> str | None:
    """The TOML a variant of `systems.MPT_VARIANTS` adds to every client's
    file, if that is all it changes (e.g. `mpt-pushback`)."""
    v = MPT_VARIANTS.get(system)
    return v["extra"] if v is not None and set(v) == {"extra"} else None


def jain(xs: list[float]) -> float:
    """Jain's fairness index: 1 when all equal, 1/n when one takes all."""
    if not xs or not any(xs):
        return 0.0
    return sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs))


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def cpu_s(pid: int) -> float:
    """User plus system CPU time of a process, seconds."""
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def _flows(
    star: Star, dst: str, seconds: float, wrap: list[str], timeline: list[float] | None = None
) -> list[float]:
    """One TCP flow per client to `dst`, all at once; Mbit/s per client.
    `timeline` receives the Mbit/s the server received from all clients,
    per iperf3 interval (1 s), to show where a system falls behind."""
    n = len(star.c)
    servers = [
        star.spawn(
            "s",
            [*wrap, "iperf3", "-s", "-1", "-J", "-p", str(IPERF_BASE_PORT + i)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for i in range(n)
    ]
    time.sleep(0.5)
    clients = [
        star.spawn(
            i,
            [
                *wrap,
                "iperf3",
                "-c",
                dst,
                "-p",
                str(IPERF_BASE_PORT + i),
                "-J",
                "-t",
                str(seconds),
                "--get-server-output",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        for i in range(n)
    ]
    out = []
    for p in clients:
        try:
            text, _ = p.communicate(timeout=seconds + 30)
            doc = json.loads(text)
            out.append(doc["end"]["sum_received"]["bits_per_second"] / 1e6)
            if timeline is not None:
                received = doc.get("server_output_json", {}).get("intervals", [])
                for k, iv in enumerate(received):
                    if k >= len(timeline):
                        timeline.append(0.0)
                    timeline[k] += iv["sum"]["bits_per_second"] / 1e6
        except (subprocess.TimeoutExpired, json.JSONDecodeError, KeyError):
            p.kill()
            out.append(0.0)
    for s in servers:
        if s.poll() is None:
            s.terminate()
    return out


def _rate(s: Settings) -> float | None:
    return s.rate_mbit or None


def cycles_per_byte(cores: float, mbps: float) -> float | None:
    """The server's CPU cycles per byte carried (`cores`: CPU seconds per
    second of its daemons)."""
    hz, rate = cpu_hz(), mbps * 1e6 / 8
    return cores * hz / rate if hz and rate > 0 else None


def _mpt_tunnels(s: Settings, outdir: Path, say: Callable[[str], None]) -> dict[str, Any]:
    """`mpt-tunnels`: each client served by a single tunnel of its own on
    the server (what a concentrator replaces), for its CPU per byte."""
    with Star(s.clients, s.links, rate_mbit=_rate(s), delays_ms=s.delay_ms) as star:
        servers, clients = start_tunnels(star, outdir / "mpt-tunnels")
        for c in clients:
            c.wait_ready(paths_up=s.links, timeout=30)
        pids = [p.proc.pid for p in servers if p.proc is not None]
        cpu0, t0 = sum(cpu_s(p) for p in pids), time.monotonic()
        timeline: list[float] = []
        mbps = _flows(star, SERVER_TUNNEL, s.seconds, [], timeline)
        server_cpu = (sum(cpu_s(p) for p in pids) - cpu0) / (time.monotonic() - t0)
        rss = sum(rss_kib(p) for p in pids)
        for p in [*clients, *servers]:
            p.stop()
    say(f"  mpt-tunnels: {s.clients} single tunnels on the server, {server_cpu:.2f} cores")
    return {
        "system": "mpt-tunnels",
        "mbps": mbps,
        "aggregate_mbps": sum(mbps),
        "timeline_mbps": timeline,
        "jain": jain(mbps),
        "server_rss_kib_loaded": rss,
        "server_cpu": server_cpu,
        "server_cycles_per_byte": cycles_per_byte(server_cpu, sum(mbps)),
    }


def path_gaps(peer_doc: dict[str, Any]) -> int:
    """The datagrams a concentrator found missing from one peer's paths
    (`mpt status --peer NAME --json`: each path's `rx_lost`, the gaps in
    its sequence numbers)."""
    paths = (peer_doc.get("tunnel") or {}).get("paths") or []
    return sum(int(p.get("rx_lost") or 0) for p in paths)


def emulator_late(emulator: dict[str, Any] | None) -> tuple[float, float] | None:
    """How late the delay emulator released frames, over every direction:
    the mean and the largest, ms (None without its counters or frames).
    Its own lateness is the network's, not the systems': a figure from a
    run whose emulator fell behind by milliseconds is one of a slower,
    jittering network than the scenario describes."""
    stats = [d.get("stats") or {} for d in (emulator or {}).get("directions") or []]
    passed = sum(st.get("passed", 0) for st in stats)
    if not passed:
        return None
    mean = sum(st.get("late_ns_sum", 0) for st in stats) / passed / 1e6
    return mean, max(st.get("late_ns_max", 0) for st in stats) / 1e6


def _mpt(
    s: Settings, outdir: Path, say: Callable[[str], None], system: str = "mpt"
) -> dict[str, Any]:
    """`mpt`: the concentrator as configured by default (a thread per
    core, each a shard of the peers); `mpt-1w`: with `shards = 1`;
    `mpt-base`: as `mpt`, every daemon run by the earlier build in
    $MPT_BASE_BIN (A/B in one run)."""
    shards = 1 if system == "mpt-1w" else None
    binary = base_binary() if system == "mpt-base" else None
    with Star(s.clients, s.links, rate_mbit=_rate(s), delays_ms=s.delay_ms) as star:
        t0 = time.monotonic()
        server, clients = start(
            star,
            outdir / system,
            server_shards=shards,
            binary=binary,
            client_extra="\n".join(x for x in (s.client_extra, client_variant(system) or "") if x),
        )
        assert server.proc is not None

        def connected() -> bool:
            doc = json.loads(server.status_text(json_doc=True))
            return doc["peers_connected"] == s.clients

        wait_for("every client connected", connected, timeout=60, interval=0.1)
        connect_s = time.monotonic() - t0
        for c in clients:
            c.wait_ready(paths_up=s.links, timeout=30)
        rss_idle = rss_kib(server.proc.pid)
        say(f"  {system}: {s.clients} clients connected in {connect_s:.2f} s (from their start)")
        cpu0, t0 = cpu_s(server.proc.pid), time.monotonic()
        timeline: list[float] = []
        mbps = _flows(star, SERVER_TUNNEL, s.seconds, [], timeline)
        server_cpu = (cpu_s(server.proc.pid) - cpu0) / (time.monotonic() - t0)
        rss_loaded = rss_kib(server.proc.pid)
        shapers = star.client_shapers()
        text = server.status_text(json_doc=True)
        (outdir / system / "server.status.json").write_text(text)
        doc = json.loads(text)
        gaps = 0
        for i, c in enumerate(clients):
            # Each client's own view (its paths' rate control, its
            # losses) and the server's view of it (its paths' sequence
            # gaps: the datagrams lost on the way), kept beside its log.
            try:
                (outdir / system / f"client{i}" / "c.status.json").write_text(
                    c.status_text(json_doc=True)
                )
                seen = server.status_text(json_doc=True, peer=f"client{i}")
                (outdir / system / f"client{i}" / "server-view.status.json").write_text(seen)
                gaps += path_gaps(json.loads(seen))
            except (CommandError, OSError, ValueError) as e:
                say(f"  client {i}: no status ({e})")
            c.stop()
        shapers["datagrams_lost"] = gaps
        server.stop()
        emulator = star.emulator_stats()
    return {
        "system": system,
        "connect_s": connect_s,
        "mbps": mbps,
        "aggregate_mbps": sum(mbps),
        "timeline_mbps": timeline,
        "jain": jain(mbps),
        "server_rss_kib_connected": rss_idle,
        "server_rss_kib_loaded": rss_loaded,
        "server_cpu": server_cpu,
        "server_cycles_per_byte": cycles_per_byte(server_cpu, sum(mbps)),
        "drops": doc.get("drops", {}),
        "client_shapers": shapers,
        "emulator": emulator,
        "shards": doc.get("shards", []),
    }


def _mptcp(s: Settings, say: Callable[[str], None]) -> dict[str, Any]:
    with Star(s.clients, s.links, rate_mbit=_rate(s), delays_ms=s.delay_ms) as star:
        extra = str(s.links - 1)
        for ns in star.namespaces():
            run(["sysctl", "-qw", "net.mptcp.enabled=1"], ns=ns)
            run(
                ["ip", "mptcp", "limits", "set", "subflow", extra, "add_addr_accepted", extra],
                ns=ns,
            )
        for link in range(1, s.links):
            run(
                [
                    *["ip", "mptcp", "endpoint", "add", server_link(link)],
                    *["dev", star.server_dev(link), "signal"],
                ],
                ns=star.s,
            )
        timeline: list[float] = []
        mbps = _flows(star, server_link(0), s.seconds, ["mptcpize", "run"], timeline)
        shapers = star.client_shapers()
        emulator = star.emulator_stats()
    return {
        "system": "mptcp",
        "mbps": mbps,
        "aggregate_mbps": sum(mbps),
        "timeline_mbps": timeline,
        "jain": jain(mbps),
        "client_shapers": shapers,
        "emulator": emulator,
    }


def _idle_memory(s: Settings, outdir: Path, say: Callable[[str], None]) -> dict[str, Any]:
    """RSS of a concentrator with `idle_peers` peers minus an empty one's."""
    rss = {}
    for n in (0, s.idle_peers):
        d = outdir / f"idle-{n}"
        d.mkdir(parents=True, exist_ok=True)
        key = d / "server.key"
        if key.exists():
            key.unlink()
        run([str(mpt_binary()), "genkey", "-o", str(key)])
        (d / "peers.d").mkdir(exist_ok=True)
        lines = [
            "[tunnel]",
            f'name = "mpi{1 if n else 0}"',
            'addresses = ["10.202.0.1/16"]',
            f'control_socket = "{d / "s.sock"}"',
            'peers_dir = "peers.d"',
            "[security]",
            f'private_key_file = "{key}"',
            "[[path]]",
            'name = "link0"',
            'local = "127.0.0.1:6300"',
        ]
        for i in range(n):
            pub = base64.b64encode(os.urandom(32)).decode()
            ip = f"10.202.{1 + i // 250}.{i % 250 + 2}"
            lines += ["[[peer]]", f'public_key = "{pub}"', f'allowed_ips = ["{ip}/32"]']
        (d / "s.toml").write_text("\n".join(lines) + "\n")
        with Star(1, links=1) as star:
            p = star.spawn(
                "s",
                [str(mpt_binary()), "up", "-c", str(d / "s.toml")],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.STDOUT,
            )
            wait_for("concentrator up", (d / "s.sock").exists, timeout=30)
            time.sleep(0.5)
            rss[n] = rss_kib(p.pid)
            p.terminate()
            p.wait(timeout=10)
    per_peer = (rss[s.idle_peers] - rss[0]) * 1024 / max(s.idle_peers, 1)
    say(f"  idle peers: {s.idle_peers} peers add {per_peer:.0f} bytes each to the server's RSS")
    return {"idle_peers": s.idle_peers, "rss_kib": rss, "bytes_per_idle_peer": per_peer}


def run_scenario(
    settings: dict[str, Any], outdir: Path, command: str, say: Callable[[str], None]
) -> int:
    s = Settings.from_dict(settings)
    # The daemons' files name paths from here; relative ones would be read
    # relative to each configuration file.
    outdir = outdir.resolve()
    outdir.mkdir(parents=True, exist_ok=True)
    started = datetime.now(UTC).isoformat(timespec="seconds")
    results = []
    for system in s.systems:
        say(f"{system}:")
        if system == "mptcp":
            r = _mptcp(s, say)
        elif system == "mpt-tunnels":
            r = _mpt_tunnels(s, outdir, say)
        else:
            r = _mpt(s, outdir, say, system)
        say(
            f"  {system}: aggregate {r['aggregate_mbps']:.1f} Mbit/s over {s.clients} clients, "
            f"Jain {r['jain']:.3f}"
            + (
                f", {sh['drops']} drops at the clients' shapers ({sh['packets']} packets"
                " passed; tbf counts a GSO send it drops whole as one)"
                if (sh := r.get("client_shapers")) and sh["packets"]
                else ""
            )
            + (
                f", {lost} datagrams lost on the clients' links (the server's path gaps)"
                if (lost := (r.get("client_shapers") or {}).get("datagrams_lost")) is not None
                else ""
            )
            + (
                f"; the delay emulator released frames {late[0]:.2f} ms late on average,"
                f" {late[1]:.1f} ms at most"
                if (late := emulator_late(r.get("emulator")))
                else ""
            )
        )
        results.append(r)
    idle = _idle_memory(s, outdir, say) if s.idle_peers else None
    doc = {
        "scenario": "concentrator",
        "command": command,
        "machine": machine(),
        "started": started,
        "finished": datetime.now(UTC).isoformat(timespec="seconds"),
        "settings": s.__dict__,
        "results": results,
        "idle": idle,
    }
    (outdir / "raw.json").write_text(json.dumps(doc, indent=1))
    md = table(doc)
    (outdir / "concentrator.md").write_text(md)
    say("")
    say(md)
    return 0


def table(doc: dict[str, Any]) -> str:
    s = doc["settings"]
    capacity = s["clients"] * s["links"] * s["rate_mbit"]
    links = (
        f"{s['links']} links of {s['rate_mbit']:g} Mbit/s ({capacity:g} Mbit/s in all)"
        if capacity
        else f"{s['links']} links, not shaped"
    )
    out = [
        f"{s['clients']} clients x {links}, one TCP flow per client for {s['seconds']:g} s. "
        "`mpt`: a thread per core, each a shard of the peers; `mpt-1w`: one thread; "
        "`mpt-tunnels`: a single tunnel per client on the server instead.",
        "",
        "| system | aggregate Mbit/s | of the links | Jain's index | connect all (s) "
        "| server RSS | server CPU | server cycles/byte |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in doc["results"]:
        conn = f"{r['connect_s']:.2f}" if "connect_s" in r else "-"
        rss = (
            f"{r['server_rss_kib_connected'] / 1024:.1f} MiB connected, "
            f"{r['server_rss_kib_loaded'] / 1024:.1f} MiB loaded"
            if "server_rss_kib_connected" in r
            else f"{r['server_rss_kib_loaded'] / 1024:.1f} MiB loaded"
            if "server_rss_kib_loaded" in r
            else "-"
        )
        cpb = r.get("server_cycles_per_byte")
        cycles = f"{cpb:.2f}" if cpb else "-"
        cpu = f"{r['server_cpu']:.2f} cores" if "server_cpu" in r else "-"
        share = f"{r['aggregate_mbps'] / capacity:.0%}" if capacity else "-"
        out.append(
            f"| {r['system']} | {r['aggregate_mbps']:.1f} | {share} "
            f"| {r['jain']:.3f} | {conn} | {rss} | {cpu} | {cycles} |"
        )
    if doc.get("idle"):
        i = doc["idle"]
        out += [
            "",
            f"Memory per idle peer: {i['bytes_per_idle_peer']:.0f} bytes of RSS "
            f"({i['idle_peers']} configured peers, no client).",
        ]
    return "\n".join(out) + "\n"
