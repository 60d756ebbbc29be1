"""Two concentrators behind BGP with a real routing daemon (BIRD 2, the
files of docs/deploy.md): the client's concentrator dies, the core
router's route moves to the other, and traffic from a host behind the core
to the client's LAN resumes within 2 s."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from mptlab.bgp import ANNOUNCE_TABLE, HOST_NET, LAN_HOST, LAN_NET, UPLINK, Bgp, bird_binary
from mptlab.star import Star, start
from mptlab.util import run, wait_for

pytestmark = pytest.mark.skipif(bird_binary() is None, reason="BIRD 2 is not installed")


def _established(bgp: Bgp) -> bool:
    out = bgp.birdc("core", "show", "protocols")
    return out.count("Established") == 2


def test_a_site_moves_to_the_other_concentrator_and_bgp_follows(tmp_path: Path) -> None:
    with Star(1, links=2, servers=2) as star:
        bgp = Bgp(star, tmp_path)
        bgp.start_birds()
        server, clients = start(
            star,
            tmp_path,
            announce_table=ANNOUNCE_TABLE,
            failover="after_ms = 500",
            lans={0: LAN_NET},
            client_routes=[HOST_NET],
        )
        clients[0].wait_ready(paths_up=2, timeout=15)
        wait_for("both BGP sessions of the core", lambda: _established(bgp), 20)
        first, second = f"{UPLINK}.1", f"{UPLINK}.2"
        wait_for(
            "the core routes the client's LAN to concentrator 1",
            lambda: bgp.core_route() == first,
            15,
        )
        # The client's tunnel address is announced too.
        assert bgp.core_route("10.201.1.2") == first
        # From the host behind the core to the LAN host behind the client.
        probe = run(["ping", "-c", "3", "-i", "0.1", "-W", "2", LAN_HOST], ns=bgp.ns("host"))
        assert " 0% packet loss" in probe.stdout, probe.stdout
        pinger = subprocess.Popen(
            ["ip", "netns", "exec", bgp.ns("host")]
            + ["ping", "-D", "-i", "0.02", "-W", "1", "-c", "450", LAN_HOST],
            stdout=subprocess.PIPE,
            text=True,
        )
        star.procs.append(pinger)
        time.sleep(1.5)
        assert server.proc is not None
        killed = time.time()
        server.proc.kill()
        moved = wait_for(
            "the core's route moves to concentrator 2",
            lambda: time.time() if bgp.core_route() == second else None,
            10,
            interval=0.01,
        )
        out, _ = pinger.communicate(timeout=20)
        replies = [float(ln[1 : ln.index("]")]) for ln in out.splitlines() if ln.startswith("[")]
        before = [t for t in replies if t <= killed]
        after = [t for t in replies if t > killed]
        assert before and after, out[-2000:]
        # The outage: the longest time without a reply from the last one
        # before the kill on.
        seen = [before[-1], *after]
        gaps = [b - a for a, b in zip(seen, seen[1:], strict=False)]
        outage = max(gaps)
        print(
            f"\nBGP failover: core route moved {moved - killed:.2f} s after the kill; "
            f"end-to-end outage (host behind the core -> LAN behind the client) {outage:.2f} s; "
            f"{len(after)} replies after it"
        )
        # Every gap over 80 ms, as (seconds after the kill, length).
        long_gaps = [
            (round(a - killed, 3), round(b - a, 3))
            for a, b in zip(seen, seen[1:], strict=False)
            if b - a > 0.08
        ]
        print(f"gaps over 80 ms after the kill: {long_gaps}")
        assert outage <= 2.0, out[-2000:]
        # Traffic runs on through concentrator 2 (ping -c 450: 9 s or more),
        # with one outage only. A second outage (a route that flaps back, a
        # second failover) would last the failover's 500 ms or more; a
        # shorter gap is the host's scheduling (a CI run once saw 0.30 s on a
        # machine the hypervisor stole 38 s from), so 0.5 s is the bound.
        assert after[-1] - killed > 6.0, out[-2000:]
        assert sorted(gaps)[-2] < 0.5, long_gaps
        log = clients[0].log_text()
        assert "moving to another server" in log, log[-2000:]
        assert bgp.core_route() == second
        routes = bgp.birdc("core", "show", "route", "for", LAN_HOST)
        assert "65002" in routes, routes
