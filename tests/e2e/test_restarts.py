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
        tx = topo.spawn(
            send_side,
            [sys.executable, str(TOOL), "send", dst, "7300", str(PPS), "7"],
            stdout=subprocess.PIPE,
            text=True,
        )
        time.sleep(2.5)
        p = peers[restart]
        stopped = time.monotonic()
        assert p.stop() == 0
        gone = time.monotonic()
        p.start()
        p.wait_ready(2, timeout=10)
        print(f"\nrestart of side {restart}: up again after {time.monotonic() - stopped:.2f} s")
        sent, _ = tx.communicate(timeout=20)
        start = json.loads(sent.strip().splitlines()[-1])["start"]
        out, _ = rx.communicate(timeout=20)
        got = json.loads(out.strip().splitlines()[-1])
        return _outage_and_missing(got, stopped, first_new=int((gone - start) * PPS) + 1)


def _outage_and_missing(
    got: list[list[float]], stopped: float, first_new: int
) -> tuple[float, int, int]:
    """Every sequence number from `first_new` on left the sender after the
    restarted daemon's old process had exited, so only the new session can
    carry it. The outage runs from the stop to the first arrival of such a
    packet; missing counts the holes among them. (Counting from the widest
    silence between arrivals miscounted when a straggler of the old session,
    say a packet the peer's reorder buffer held for a hole the stop left,
    arrived inside the outage and split it.)"""
    new = [(int(s), t) for s, t in got if s >= first_new]
    if not new:
        return float("inf"), 0, len(got)
    arrived_first, t_new = min(new, key=lambda st: st[1])
    seqs = sorted({s for s, _ in new})
    after = [s for s in seqs if s >= arrived_first]
    missing = after[-1] - after[0] + 1 - len(after)
    if missing:
        holes = [(b - a - 1, a) for a, b in zip(after, after[1:], strict=False) if b - a > 1]
        print(f"holes after seq {arrived_first} (count, after seq): {holes[:8]}")
    return t_new - stopped, missing, len(got)


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
