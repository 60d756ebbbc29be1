"""Paths added, removed and re-weighted at runtime (`mpt reload`, `mpt
path NAME set weight`), under a TCP transfer: the session stays, the
transfer goes on, the new path carries traffic and the removed one stops.
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
from mptlab.util import mpt_binary, wait_for


def _mpt(peer, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["ip", "netns", "exec", peer.topo.ns(peer.side), str(mpt_binary()), *args]
        + ["-s", str(peer.control)],
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )


def _blocks(text: str) -> list[str]:
    return text.split("\n[[path]]\n")


def _join(blocks: list[str]) -> str:
    return "\n[[path]]\n".join(blocks)


def _tx(peer, name: str) -> int:
    return next((p["tx_bytes"] for p in peer.status()["paths"] if p["name"] == name), -1)


def _sessions(peer) -> int:
    return peer.log_text().count("session established with the peer")


def test_paths_added_and_removed_by_reload_under_tcp(workdir: Path) -> None:
    full: dict[str, str] = {}

    def first_two(side: str, text: str) -> str:
        full[side] = text
        head, one, two, _three = _blocks(text)
        return _join([head, one, two])

    with Topology(3, shape=Shape(rate_mbit=40)) as topo:
        a, b = start_pair(
            topo,
            TunnelOpts(paths=[PathOpts(1), PathOpts(2), PathOpts(3)]),
            workdir,
            wait=False,
            edit=first_two,
        )
        a.wait_ready(2)
        b.wait_ready(2)
        sessions = (_sessions(a), _sessions(b))
        result: dict = {}
        t = threading.Thread(
            target=lambda: result.setdefault("r", iperf3(topo, TUNNEL_V4["b"], seconds=9))
        )
        t.start()
        time.sleep(1.5)
        # Add link3v4 on both sides.
        for peer in (a, b):
            peer.cfg.write_text(full[peer.side])
            r = _mpt(peer, "reload")
            assert r.returncode == 0, r.stdout + r.stderr
            assert "applied: path link3v4: added" in r.stdout, r.stdout
        wait_for("link3v4 up", lambda: a.status()["paths_up"] == 3, timeout=5)
        time.sleep(1.0)
        added = _tx(a, "link3v4")
        # Remove link1v4 on both sides (the sender first: its traffic moves).
        for peer in (a, b):
            head, _one, two, three = _blocks(full[peer.side])
            peer.cfg.write_text(_join([head, two, three]))
            r = _mpt(peer, "reload")
            assert r.returncode == 0, r.stdout + r.stderr
            assert "applied: path link1v4: removed" in r.stdout, r.stdout
        time.sleep(0.5)
        names = [p["name"] for p in a.status()["paths"]]
        assert names == ["link2v4", "link3v4"], names
        time.sleep(1.5)
        moved = _tx(a, "link3v4")
        t.join(timeout=30)
        r = result.get("r")
        assert r is not None and r.mbps > 20, r
        # The new path carried the transfer; no new session was needed.
        assert added > 200_000 and moved > added + 1_000_000, (added, moved)
        assert (_sessions(a), _sessions(b)) == sessions
        assert b.status()["paths_up"] == 2 and a.status()["paths_up"] == 2
        log = a.log_text()
        assert "configuration reloaded: applied" in log and "by=pid" in log, log[-2000:]
        listed = json.loads(_mpt(a, "path", "list", "--json").stdout)
        assert [p["name"] for p in listed] == ["link2v4", "link3v4"]
        print(f"\niperf3 {r.mbps:.1f} Mbit/s through an added and a removed path")


def test_weights_change_by_reload_and_by_command_under_tcp(workdir: Path) -> None:
    with Topology(2, shape=Shape(rate_mbit=40)) as topo:
        a, b = start_pair(
            topo,
            TunnelOpts(paths=[PathOpts(1, weight=1), PathOpts(2, weight=1)]),
            workdir,
        )
        sessions = _sessions(a)
        result: dict = {}
        t = threading.Thread(
            target=lambda: result.setdefault("r", iperf3(topo, TUNNEL_V4["b"], seconds=6))
        )
        t.start()
        time.sleep(1.0)
        # By reload: link2v4 gets a quarter of the share.
        a.cfg.write_text(a.cfg.read_text().replace("weight = 1", "weight = 3", 1))
        r = _mpt(a, "reload")
        assert r.returncode == 0 and "path link1v4: weight: 1 -> 3" in r.stdout, r.stdout
        time.sleep(0.5)
        x1, x2 = _tx(a, "link1v4"), _tx(a, "link2v4")
        time.sleep(1.5)
        d1, d2 = _tx(a, "link1v4") - x1, _tx(a, "link2v4") - x2
        share = d1 / (d1 + d2)
        assert 0.65 < share < 0.85, share
        # By command, back to equal.
        c = _mpt(a, "path", "link1v4", "set", "weight", "1")
        assert c.returncode == 0, c.stderr
        bad = _mpt(a, "path", "link1v4", "set", "weight", "0")
        assert bad.returncode == 2 and "1 to 1000" in bad.stderr, bad.stderr
        t.join(timeout=30)
        res = result.get("r")
        assert res is not None and res.mbps > 20, res
        assert _sessions(a) == sessions
        log = a.log_text()
        assert "path setting changed over the control socket" in log and "by=pid" in log
        print(f"\nlink1v4 share at weight 3:1 {share:.2f}; iperf3 {res.mbps:.1f} Mbit/s")


def test_routes_added_and_removed_by_reload(workdir: Path) -> None:
    from mptlab.util import run

    with Topology(1) as topo:
        a, _b = start_pair(topo, TunnelOpts(paths=[PathOpts(1)]), workdir)
        text = a.cfg.read_text()
        a.cfg.write_text(text + '\n[[route]]\nnetwork = "10.124.0.0/16"\nmetric = 7\n')
        r = _mpt(a, "reload")
        assert r.returncode == 0 and "route: added 10.124.0.0/16 metric 7" in r.stdout, r.stdout
        assert "10.124.0.0/16 dev mpt0" in run(["ip", "route"], ns=topo.a).stdout
        # A route that exists already: the change fails, named; exit 1.
        run(["ip", "route", "add", "10.125.0.0/16", "dev", "lo"], ns=topo.a)
        a.cfg.write_text(text + '\n[[route]]\nnetwork = "10.125.0.0/16"\n')
        r = _mpt(a, "reload")
        assert r.returncode == 1, r.stdout
        assert "route: removed 10.124.0.0/16 metric 7" in r.stdout, r.stdout
        assert "a route to 10.125.0.0/16 already exists" in r.stdout, r.stdout
        routes = run(["ip", "route"], ns=topo.a).stdout
        assert "10.124.0.0" not in routes and "10.125.0.0/16 dev lo" in routes
        assert a.stop() == 0
        assert "could not remove route" not in a.log_text()


def test_a_path_moved_onto_a_port_in_use_stays_where_it_was(workdir: Path) -> None:
    """The new socket is bound before the path leaves the old one: a move
    that cannot bind fails (exit 1) and the path keeps running, on both
    sides, as it was."""
    with Topology(2) as topo:
        a, b = start_pair(topo, TunnelOpts(paths=[PathOpts(1), PathOpts(2)]), workdir)
        busy_addr = a.cfg.read_text().split('name = "link2v4"')[1].split('local = "')[1]
        busy_addr = busy_addr.split('"')[0].rsplit(":", 1)[0]
        # Another program holds the port the file now names.
        holder = topo.spawn(
            "a",
            [
                "python3",
                "-c",
                "import socket,sys,time;s=socket.socket(2,2);"
                f"s.bind(('{busy_addr}',7777));print('bound',flush=True);time.sleep(60)",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert holder.stdout is not None and holder.stdout.readline().strip() == "bound"
        try:
            text = a.cfg.read_text()
            head, two = text.split('name = "link2v4"')
            old_local = two.split('local = "')[1].split('"')[0]
            a.cfg.write_text(
                head + 'name = "link2v4"' + two.replace(old_local, f"{busy_addr}:7777", 1)
            )
            r = _mpt(a, "reload")
            assert r.returncode == 1, r.stdout + r.stderr
            assert "failed (still running the old value): path link2v4" in r.stdout, r.stdout
            assert f"the path stays on {old_local}" in r.stdout, r.stdout
            time.sleep(1.5)
            for peer in (a, b):
                st = peer.status()
                assert [p["name"] for p in st["paths"]] == ["link1v4", "link2v4"], st["paths"]
                assert st["paths_up"] == 2, (peer.side, st["paths"])
            # Still carrying: traffic on link2v4 grows.
            before = _tx(a, "link2v4")
            r2 = subprocess.run(
                ["ip", "netns", "exec", topo.a, "ping", "-c", "20", "-i", "0.01", TUNNEL_V4["b"]],
                capture_output=True,
                text=True,
                timeout=20,
                check=False,
            )
            assert " 0% packet loss" in r2.stdout, r2.stdout
            time.sleep(0.3)
            assert _tx(a, "link2v4") > before
            # The same reload once the port is free moves the path.
            holder.kill()
            holder.wait(timeout=5)
            r = _mpt(a, "reload")
            assert r.returncode == 0, r.stdout + r.stderr
            assert "applied: path link2v4: moved" in r.stdout, r.stdout
        finally:
            if holder.poll() is None:
                holder.kill()
