"""End-to-end: a server without `remote` on its paths learns every path of
its client, also the slower ones, within a probe interval plus the path's
delay, while traffic on the fast path keeps every slower path's packets
from being the newest of the session."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from mptlab.daemon import TUNNEL_V4, PathOpts, TunnelOpts, start_pair
from mptlab.netns import Shape, Topology

# One-way delays of the three links: the second 20 ms and the third 40 ms
# slower than the first.
DELAYS_MS = (2.0, 22.0, 42.0)
# The paths' probe interval (the configuration's default keepalive_ms).
PROBE_INTERVAL_S = 0.1


def test_a_learning_server_learns_the_slower_paths_at_once(workdir: Path) -> None:
    shapes = [Shape(delay_ms=d) for d in DELAYS_MS]
    with Topology(3, shape=shapes) as topo:
        opts = TunnelOpts(
            paths=[PathOpts(1), PathOpts(2), PathOpts(3)], tunnel_v6=False, server_learns=True
        )
        a, b = start_pair(topo, opts, workdir, wait=False)
        # Traffic from the client from the first moment: a ping every 5 ms.
        ping = topo.spawn(
            "b",
            ["ping", "-q", "-i", "0.005", "-w", "8", TUNNEL_V4["a"]],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        learned: dict[str, float] = {}
        deadline = time.monotonic() + 8
        try:
            while len(learned) < 3 and time.monotonic() < deadline:
                try:
                    paths = a.status()["paths"]
                except Exception:  # the daemon is still starting
                    paths = []
                now = time.monotonic()
                for p in paths:
                    # "(learning)" until an address is known.
                    known = not str(p.get("remote", "(")).startswith("(")
                    if known and p["name"] not in learned:
                        learned[p["name"]] = now
                time.sleep(0.01)
            st = a.status()
        finally:
            ping.terminate()
            ping.wait(timeout=5)
        first = min(learned.values(), default=0.0)
        after = {n: round((t - first) * 1000) for n, t in sorted(learned.items())}
        print(f"\npaths learned, ms after the first: {after}")
        assert len(learned) == 3, (learned, st["paths"], a.log_text()[-3000:])
        # The first path learned carried the handshake; the client's session
        # starts one round trip of it later, then each other path's next
        # probe arrives within a probe interval plus its delay (plus the
        # resolution of this poll, a status request every ~25 ms).
        names = [p["name"] for p in st["paths"]]
        first_path = min(learned, key=lambda n: learned[n])
        rtt_s = 2 * DELAYS_MS[names.index(first_path)] / 1000
        for name, t in learned.items():
            bound_s = rtt_s + PROBE_INTERVAL_S + DELAYS_MS[names.index(name)] / 1000 + 0.06
            assert t - first <= bound_s, (name, after, bound_s)
        # The log names every path's address once it is known.
        assert "link3v4 peer=(not yet known)" not in a.log_text(), a.log_text()[-3000:]
        b.wait_ready(3)
