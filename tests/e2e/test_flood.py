"""End-to-end: a hostile sender floods every path port of the server with
garbage, replays, forgeries and handshake initiations while a TCP transfer
runs. The transfer continues, nothing from the flood reaches the TUN, the
daemon's memory stays bounded, and the drop counters account for the flood."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

from mptlab.daemon import TUNNEL_V4, PathOpts, TunnelOpts, start_pair
from mptlab.netns import Topology, link_addr
from mptlab.traffic import iperf3
from mptlab.util import run

FLOOD = Path(__file__).resolve().parent / "tools" / "flood.py"
DROPS = (
    "truncated",
    "bad_version",
    "bad_type",
    "unknown_path",
    "bad_tag",
    "replay",
    "no_session",
    "handshake_failed",
    "handshake_rate_limited",
    "handshake_bad_mac",
    "unknown_source",
)


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _rcvbuf_errors(ns: str) -> int:
    out = run(["nstat", "-az", "UdpRcvbufErrors"], ns=ns).stdout
    for line in out.splitlines():
        if line.startswith("UdpRcvbufErrors"):
            return int(line.split()[1])
    return 0


def test_flood_of_hostile_packets(workdir: Path) -> None:
    with Topology(2) as topo:
        a, b = start_pair(
            # The server learns its client's addresses, so the flood from another
            # address reaches the session checks instead of `unknown_source`.
            topo,
            TunnelOpts(paths=[PathOpts(1), PathOpts(2)], tunnel_v6=False, server_learns=True),
            workdir,
        )
        # A listener on the server's tunnel address that must hear nothing.
        listener = topo.spawn(
            "a",
            [
                sys.executable,
                "-c",
                "import socket,sys;s=socket.socket(2,2);"
                "s.bind(('10.99.0.1',9999));s.settimeout(30);"
                "print(len(s.recv(9999)),flush=True)",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        rss_before = _rss_kb(a.proc.pid)
        drops_before = sum(a.status()["drops"][k] for k in DROPS)
        kernel_before = _rcvbuf_errors(topo.a)
        result: dict = {}

        def transfer() -> None:
            result["r"] = iperf3(topo, TUNNEL_V4["b"], seconds=10, reverse=True)

        t = threading.Thread(target=transfer)
        t.start()
        time.sleep(1)
        targets = f"{link_addr(1, 'a', 4)}:6000,{link_addr(2, 'a', 4)}:6001"
        flood = run(
            [sys.executable, str(FLOOD), "l1b", targets, "5", TUNNEL_V4["a"]],
            ns=topo.b,
            timeout=60,
        )
        sent = json.loads(flood.stdout.strip().splitlines()[-1])
        t.join(timeout=60)
        time.sleep(0.5)
        st = a.status()
        drops = sum(st["drops"][k] for k in DROPS) - drops_before
        kernel = _rcvbuf_errors(topo.a) - kernel_before
        rss_after = _rss_kb(a.proc.pid)
        r = result.get("r")
        listener.terminate()
        out, _ = listener.communicate(timeout=5)
        print(
            f"\nflood sent {sent['total']} ({sent['sent']}); daemon drops +{drops}, kernel "
            f"receive-buffer drops +{kernel}; RSS {rss_before} -> {rss_after} kB; transfer "
            f"{r.mbps if r else 0:.0f} Mbit/s; drops {st['drops']}"
        )
        assert r is not None and r.mbps > 50
        assert out.strip() == "", "a flood packet reached the TUN"
        assert a.proc.poll() is None and b.proc.poll() is None
        assert rss_after - rss_before < 32 * 1024
        assert drops + kernel >= 0.9 * sent["total"], (drops, kernel, sent["total"])
        assert st["drops"]["replay"] > 0 and st["drops"]["bad_tag"] > 0
        # Random initiations fail mac1: refused without any cryptography.
        assert st["drops"]["handshake_bad_mac"] > 0
        assert st["security"]["handshake_failures"] == 0
