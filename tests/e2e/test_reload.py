"""Reloading a running tunnel's configuration (SIGHUP, `mpt reload`).

What can change at runtime changes at once: a path's rate cap, the QoS
classes. What cannot (the tunnel's addresses) is reported as needing a
restart and keeps running as it was. A file with an error changes nothing
and says why; SIGHUP does the same as `mpt reload` and logs it.
"""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

from mptlab.daemon import PathOpts, TunnelOpts, start_pair
from mptlab.netns import Topology
from mptlab.util import mpt_binary, wait_for


def _reload(peer) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["ip", "netns", "exec", peer.topo.ns(peer.side), str(mpt_binary()), "reload"]
        + ["-s", str(peer.control)],
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    )


def _cap(peer, name: str):
    p = next(p for p in peer.status()["paths"] if p["name"] == name)
    return p["sending"]["cap_mbps"]


QOS = '\n[qos]\n[[qos.class]]\nname = "voip"\ndscp = ["EF"]\nrealtime = true\n'


def test_reload_applies_what_it_can_and_says_what_needs_a_restart(workdir: Path) -> None:
    with Topology(2) as topo:
        a, _b = start_pair(topo, TunnelOpts(paths=[PathOpts(1), PathOpts(2)]), workdir)
        original = a.cfg.read_text()
        first, second = original.split('name = "link2v4"')
        a.cfg.write_text(first + 'name = "link2v4"\nrate_mbit = 5' + second + QOS)
        r = _reload(a)
        assert r.returncode == 0, r.stderr
        assert "applied: path link2v4: rate_mbit: none -> 5" in r.stdout, r.stdout
        assert "applied: qos: realtime, besteffort -> voip, besteffort" in r.stdout, r.stdout
        assert _cap(a, "link2v4") == 5.0
        assert [c["name"] for c in a.status()["qos"]] == ["voip", "besteffort"]
        # Nothing more to do the second time.
        assert "nothing changed" in _reload(a).stdout
        # An error changes nothing.
        a.cfg.write_text(a.cfg.read_text().replace("rate_mbit = 5", "rate_mbit = -1"))
        bad = _reload(a)
        assert bad.returncode == 1 and "path[2].rate_mbit" in bad.stderr, bad.stderr
        assert _cap(a, "link2v4") == 5.0
        # Addresses need a restart: listed, and the old ones keep running.
        text = a.cfg.read_text().replace("rate_mbit = -1", "rate_mbit = 8")
        a.cfg.write_text(text.replace("10.99.0.1/24", "10.98.0.1/24"))
        r = _reload(a)
        # Applied what it could; exit 3 says something waits for a restart.
        assert r.returncode == 3, r.stderr
        assert "needs a restart (still running the old value): tunnel" in r.stdout, r.stdout
        assert "rate_mbit: 5 -> 8" in r.stdout
        # SIGHUP reloads as well, and the log names what happened.
        a.cfg.write_text(a.cfg.read_text().replace("rate_mbit = 8", "rate_mbit = 9"))
        a.proc.send_signal(signal.SIGHUP)
        wait_for("the SIGHUP reload", lambda: _cap(a, "link2v4") == 9.0, timeout=5)
        log = a.log_text()
        assert "SIGHUP received" in log and "configuration reloaded: applied" in log
        assert "needs a restart" in log and "configuration reload refused" in log
        assert a.proc.poll() is None
