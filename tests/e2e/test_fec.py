"""Forward error correction end to end (`[reorder] fec`, docs/protocol.md,
"Repair"): on a link that loses 2 % of its packets at random the sender
measures the loss and sends repair packets after each block of its data,
and the receiver rebuilds lost packets from them instead of asking for
them; with `fec = "off"` no repair is sent and the status has no `fec`."""

from __future__ import annotations

from pathlib import Path

from mptlab.daemon import TUNNEL_V4, PathOpts, TunnelOpts, start_pair
from mptlab.netns import Shape, Topology
from mptlab.traffic import iperf3

LOSSY = Shape(rate_mbit=50, delay_ms=20, loss=0.02)


def test_a_lossy_path_s_losses_are_rebuilt_from_repairs(workdir: Path) -> None:
    with Topology(1, shape=[LOSSY]) as topo:
        opts = TunnelOpts(paths=[PathOpts(1)], tunnel_v6=False)
        a, b = start_pair(topo, opts, workdir)
        r = iperf3(topo, TUNNEL_V4["b"], seconds=5)
        assert r.mbps > 10, r
        sent, got = a.status()["fec"], b.status()["fec"]
        assert sent["repairs_sent"] > 0 and sent["blocks"] > 0, sent
        assert got["repairs_received"] > 0, got
        assert got["rebuilt"] > 0, got
        # Losses waited for their block's repairs, and most of those the
        # repairs rebuilt, so that no NACK went out for them.
        assert got["nacks_saved"] > 0, got
        assert got["inconsistent"] == 0, got
        assert "fec: sent" in a.status_text(verbose=True)


def test_fec_off_sends_no_repairs(workdir: Path) -> None:
    with Topology(1, shape=[LOSSY]) as topo:
        opts = TunnelOpts(paths=[PathOpts(1)], tunnel_v6=False, extra='[reorder]\nfec = "off"')
        a, b = start_pair(topo, opts, workdir)
        r = iperf3(topo, TUNNEL_V4["b"], seconds=3)
        assert r.mbps > 5, r
        for d in (a, b):
            st = d.status()
            assert "fec" not in st, st.get("fec")
            assert st["drops"].get("bad_type", 0) == 0
