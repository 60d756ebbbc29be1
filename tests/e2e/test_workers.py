"""Worker threads: batches sealed and opened on two threads keep the data
intact and in order, the status shows what each worker did, and the default
(`parallel = "auto"`) stays on the loop's thread while no core is spare.

Runs a TCP transfer over two unshaped paths (CPU-bound, so batches are
large) and a ping; asserts that both workers of each daemon handled
datagrams, that no packet was dropped for a bad tag or a replay, and that
TCP saw few retransmissions (reordering between workers would cause many).
"""

from __future__ import annotations

from pathlib import Path

from mptlab.daemon import TUNNEL_V4, PathOpts, TunnelOpts, start_pair
from mptlab.netns import Topology
from mptlab.traffic import iperf3, ping, reference_mbps


def _opts(parallel: str | None) -> TunnelOpts:
    return TunnelOpts(paths=[PathOpts(1), PathOpts(2)], workers=2, parallel=parallel)


def test_two_workers_always_share_batches_without_harm(workdir: Path) -> None:
    with Topology(2) as topo:
        a, b = start_pair(topo, _opts("always"), workdir)
        ref = reference_mbps(topo)
        r = iperf3(topo, TUNNEL_V4["b"], seconds=3)
        assert ping(topo, "a", TUNNEL_V4["b"], count=3).received == 3
        for peer in (a, b):
            st = peer.status()
            w = st["workers"]
            assert w["workers"] == 2 and w["engage"] == "always" and w["engaged"]
            per = w["per_worker"]
            assert [x["id"] for x in per] == [0, 1]
            assert all(x["packets"] > 0 for x in per), per
            assert all(0 < x["max_job"] <= 64 for x in per), per
            drops = st["drops"]
            assert drops.get("bad_tag", 0) == 0 and drops.get("replay", 0) == 0, drops
        print(
            f"\n2 workers, parallel=always: TCP {r.mbps:.0f} Mbit/s, retransmits "
            f"{r.retransmits}; sender workers {a.status()['workers']['per_worker']}"
        )
        # A floor against plain TCP on this machine, not a benchmark.
        assert r.mbps > 0.02 * ref, (r.mbps, ref)
        # One TCP flow over two unshaped paths: reordering beyond what the
        # reorder buffer hides would show as thousands of retransmissions.
        assert r.retransmits is not None and r.retransmits < 200


def test_status_text_lists_every_worker(workdir: Path) -> None:
    with Topology(1) as topo:
        a, _b = start_pair(topo, TunnelOpts(paths=[PathOpts(1)], workers=3), workdir)
        out = a.status_text(verbose=True)
        assert "workers: 3 (helpers auto" in out, out
        for i in range(3):
            assert f"  worker {i}: " in out, out
        doc = a.status()
        assert doc["workers"]["workers"] == 3
