"""End-to-end: restarts while traffic flows. A stream of 1,000 packets/s
runs through the tunnel while the server (or the client) is stopped and
started again. The outage is the longest gap between arrivals; after the
first packet of the new session arrives, no packet may be missing."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from mptlab.daemon import TUNNEL_V4, PathOpts, TunnelOpts, start_pair
from mptlab.netns import Topology

TOOL = Path(__file__).resolve().parent / "tools" / "seqstream.py"
PPS = 1000


def _restart_outage(workdir: Path, restart: str) -> tuple[float, int, int]:
    """The restarted side sends, its peer receives. Returns (outage in s,
    packets missing after the first arrival of the new session, received)."""
    with Topology(2) as topo:
        a, b = start_pair(
            topo, TunnelOpts(paths=[PathOpts(1), PathOpts(2)], tunnel_v6=False), workdir
        )
        peers = {"a": a, "b": b}
        recv_side = "b" if restart == "a" else "a"
        send_side = restart
        dst = TUNNEL_V4[recv_side]
        rx = topo.spawn(
            recv_side,
            [sys.executable, str(TOOL), "recv", dst, "7300", "9"],
            stdout=subprocess.PIPE,
            text=True,
        )
        time.sleep(0.5)
        tx = topo.spawn(send_side, [sys.executable, str(TOOL), "send", dst, "7300", str(PPS), "7"])
        time.sleep(2.5)
        p = peers[restart]
        stopped = time.monotonic()
        assert p.stop() == 0
        p.start()
        p.wait_ready(2, timeout=10)
        print(f"\nrestart of side {restart}: up again after {time.monotonic() - stopped:.2f} s")
        tx.wait(timeout=20)
        out, _ = rx.communicate(timeout=20)
        got = json.loads(out.strip().splitlines()[-1])
        times = [t for _, t in got]
        gaps = [(t2 - t1, i) for i, (t1, t2) in enumerate(zip(times, times[1:], strict=False))]
        outage, at = max(gaps)
        after = [s for s, _ in got[at + 1 :]]
        missing = (max(after) - min(after) + 1 - len(set(after))) if after else 0
        return outage, missing, len(got)


def test_server_restart_outage(workdir: Path) -> None:
    outage, missing, n = _restart_outage(workdir, "a")
    print(f"server restart: outage {outage * 1000:.0f} ms, {missing} missing after, {n} received")
    assert outage <= 2.0
    assert missing == 0


def test_client_restart_outage(workdir: Path) -> None:
    outage, missing, n = _restart_outage(workdir, "b")
    print(f"client restart: outage {outage * 1000:.0f} ms, {missing} missing after, {n} received")
    assert outage <= 1.0
    assert missing == 0
