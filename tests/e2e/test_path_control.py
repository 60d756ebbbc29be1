"""Runtime path control: `mpt path list` and `mpt path NAME down|up`.

A path taken down carries no data (the traffic moves to the other path,
the TCP transfer goes on) but stays probed and up; `up` brings it back.
An unknown name is refused with the names there are; a bare name is a
usage error. Every change is in the daemon's log.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path

from mptlab.daemon import TUNNEL_V4, PathOpts, TunnelOpts, start_pair
from mptlab.netns import Shape, Topology
from mptlab.traffic import iperf3
from mptlab.util import mpt_binary


def _path(peer, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["ip", "netns", "exec", peer.topo.ns(peer.side), str(mpt_binary()), "path"]
        + ["-s", str(peer.control), *args],
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    )


def _tx(peer, name: str) -> int:
    return next(p["tx_bytes"] for p in peer.status()["paths"] if p["name"] == name)


def test_a_path_taken_down_and_up_under_traffic(workdir: Path) -> None:
    # Shaped links: the transfer needs both, so the path taken up again
    # must carry data (on unshaped links one path carries the whole
    # transfer without a queue, and earliest-arrival scheduling may leave
    # the other idle).
    with Topology(2, shape=Shape(rate_mbit=100)) as topo:
        a, _b = start_pair(topo, TunnelOpts(paths=[PathOpts(1), PathOpts(2)]), workdir)
        listed = json.loads(_path(a, "list", "--json").stdout)
        assert [p["name"] for p in listed] == ["link1v4", "link2v4"]
        assert not any(p["admin_down"] for p in listed)
        result = {}
        t = threading.Thread(
            target=lambda: result.setdefault("r", iperf3(topo, TUNNEL_V4["b"], seconds=4))
        )
        t.start()
        time.sleep(1.0)
        r = _path(a, "link1v4", "down")
        assert r.returncode == 0 and "administratively down" in r.stdout, r.stderr
        time.sleep(0.3)
        before = _tx(a, "link1v4")
        time.sleep(1.0)
        during = _tx(a, "link1v4")
        text = _path(a, "list").stdout
        assert "admin down" in text, text
        # Control only: probes, and a receiver report every 10 ms for the
        # ACKs the peer still sends on it (about 100 bytes each); no data.
        assert during - before < 30_000, (before, during)
        assert _path(a, "link1v4", "up").returncode == 0
        t.join(timeout=30)
        r = result.get("r")
        assert r is not None and r.mbps > 1, r
        assert _tx(a, "link1v4") > during + 1_000_000
        st = a.status()
        assert not any(p["admin_down"] for p in st["paths"])
        assert st["paths_up"] == 2
        bad = _path(a, "nosuch", "down")
        assert bad.returncode == 1 and "link1v4, link2v4" in bad.stderr, bad.stderr
        bare = _path(a, "link1v4")
        assert bare.returncode == 2 and "down" in bare.stderr
        log = a.log.read_text()
        assert "path set administratively down" in log and "link1v4" in log
        sent = during - before
        print(f"\niperf3 {r.mbps:.0f} Mbit/s; link1v4 sent {sent} bytes in 1 s while down")


def test_rate_cap_and_backup_change_at_runtime(workdir: Path) -> None:
    with Topology(2) as topo:
        a, _b = start_pair(topo, TunnelOpts(paths=[PathOpts(1), PathOpts(2)]), workdir)
        r = _path(a, "link2v4", "set", "rate_mbit", "5")
        assert r.returncode == 0 and "rate_mbit set to 5" in r.stdout, r.stderr
        link2 = next(p for p in a.status()["paths"] if p["name"] == "link2v4")
        assert link2["sending"]["cap_mbps"] == 5.0, link2["sending"]
        # Under a transfer, the capped path carries about its cap.
        before = _tx(a, "link2v4")
        iperf3(topo, TUNNEL_V4["b"], seconds=2)
        carried = (_tx(a, "link2v4") - before) * 8 / 2 / 1e6
        assert carried < 7.5, carried
        assert _path(a, "link2v4", "set", "rate_mbit", "none").returncode == 0
        link2 = next(p for p in a.status()["paths"] if p["name"] == "link2v4")
        assert link2["sending"]["cap_mbps"] is None
        # A backup path carries no data while the other is up.
        assert _path(a, "link2v4", "set", "backup", "true").returncode == 0
        assert "backup" in _path(a, "list").stdout
        only = _path(a, "link1v4", "set", "backup", "true")
        assert only.returncode == 1 and "only primary path" in only.stderr, only.stderr
        assert _path(a, "link2v4", "set", "backup", "false").returncode == 0
        bad = _path(a, "link2v4", "set", "rate_mbit", "fast")
        assert bad.returncode == 2 and "rate_mbit must be" in bad.stderr, bad.stderr
        missing = _path(a, "link2v4", "set", "backup")
        assert missing.returncode == 2, missing.stderr
        log = a.log.read_text()
        assert "path setting changed" in log and "rate_mbit" in log
        print(f"\nlink2v4 capped at 5 Mbit/s carried {carried:.1f} Mbit/s under TCP")
