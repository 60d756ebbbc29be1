"""`mpt capture`: a running tunnel writes pcapng with nanosecond
timestamps; tshark (the reference reader) reads it back: the TUN's inner
packets with their path, tunnel sequence, send timestamp and one-way delay
as comments, and the path's datagrams with their header's fields.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from mptlab.daemon import TUNNEL_V4, PathOpts, TunnelOpts, start_pair
from mptlab.netns import Shape, Topology
from mptlab.traffic import ping
from mptlab.util import mpt_binary

pytestmark = pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark missing")


def _capture(peer, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["ip", "netns", "exec", peer.topo.ns(peer.side), str(mpt_binary()), "capture"]
        + ["-s", str(peer.control), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _tshark(path: Path, *fields: str) -> list[list[str]]:
    r = subprocess.run(
        ["tshark", "-r", str(path), "-T", "fields", "-E", "separator=|"]
        + [x for f in fields for x in ("-e", f)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return [line.split("|") for line in r.stdout.splitlines() if line]


def test_capture_writes_pcapng_that_tshark_reads(workdir: Path) -> None:
    with Topology(2, shape=Shape(rate_mbit=50, delay_ms=2)) as topo:
        a, _b = start_pair(topo, TunnelOpts(paths=[PathOpts(1), PathOpts(2)]), workdir)
        out = workdir / "cap.pcapng"
        proc = subprocess.Popen(
            ["ip", "netns", "exec", topo.ns("a"), str(mpt_binary()), "capture"]
            + ["-s", str(a.control), "--tun", "--path", "link1v4", "-w", str(out)]
            + ["--seconds", "3", "--json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        # Pings both ways while it runs (echo requests out, replies in).
        assert ping(topo, "a", TUNNEL_V4["b"], count=10, interval=0.1).received == 10
        stdout, stderr = proc.communicate(timeout=30)
        assert proc.returncode == 0, stderr
        done = json.loads(stdout)
        assert done["written"] > 20 and done["dropped"] == 0, done
        assert out.stat().st_mode & 0o777 == 0o600
        # Interfaces: the TUN (raw IP, ns resolution) and the path socket.
        r = subprocess.run(["capinfos", str(out)], capture_output=True, text=True, check=False)
        assert "pcapng" in r.stdout and "nanoseconds" in r.stdout, r.stdout
        ifaces = _tshark(out, "frame.interface_name", "frame.interface_description")
        assert {i[0] for i in ifaces} == {"mpt0 (TUN)", "mpt0 path socket 0"}, ifaces
        # The TUN side: ICMP echo requests out and replies in, each with its
        # path, sequence and timestamp; the replies with a one-way delay.
        rows = _tshark(out, "frame.interface_id", "icmp.type", "frame.comment", "frame.time_epoch")
        tun = [r for r in rows if r[0] == "0" and r[1]]
        requests = [r for r in tun if r[1] == "8"]
        replies = [r for r in tun if r[1] == "0"]
        assert len(requests) >= 9 and len(replies) >= 9, tun
        assert all(r[2].startswith("out path=link") and "tunnel_seq=" in r[2] for r in requests)
        inbound = [r for r in rows if r[0] == "0" and r[2].startswith("in ")]
        assert all("path=link" in r[2] and "owd_ms=" in r[2] for r in inbound), inbound
        owds = [float(r[2].split("owd_ms=")[1].split()[0]) for r in replies]
        assert owds and all(1.5 < o < 50 for o in owds), owds
        # Nanosecond timestamps: not all on whole microseconds.
        assert any(not r[3].endswith("000") for r in tun), [r[3] for r in tun[:5]]
        # The path side: mpt datagrams both ways, the header read out.
        path = [r for r in rows if r[0] == "1"]
        kinds = {r[2].split()[1] for r in path}
        assert {"type=data", "type=probe"} <= kinds or {"type=data", "type=echo"} <= kinds, kinds
        assert {r[2].split()[0] for r in path} == {"out", "in"}


def test_capture_errors_are_clear(workdir: Path) -> None:
    with Topology(1) as topo:
        a, _b = start_pair(topo, TunnelOpts(paths=[PathOpts(1)]), workdir)
        r = _capture(a, "--path", "nosuch", "-w", str(workdir / "x.pcapng"), "--count", "1")
        assert r.returncode == 1 and "no path named 'nosuch'" in r.stderr, r.stderr
        r = _capture(a, "-w", str(workdir / "x.pcapng"))
        assert r.returncode == 2 and "nothing to capture" in r.stderr, r.stderr
        r = _capture(a, "--tun", "-w", "/nonexistent/dir/x.pcapng", "--count", "1")
        assert r.returncode == 1 and "cannot write /nonexistent/dir/x.pcapng" in r.stderr
        # --count ends it; a second capture may start after.
        for n in (1, 2):
            ping_bg = subprocess.Popen(
                ["ip", "netns", "exec", topo.ns("a"), "ping", "-c", "20", "-i", "0.05"]
                + [TUNNEL_V4["b"]],
                stdout=subprocess.DEVNULL,
            )
            r = _capture(a, "--tun", "-w", str(workdir / f"c{n}.pcapng"), "--count", "5")
            ping_bg.wait(timeout=10)
            assert r.returncode == 0 and "5 packets written" in r.stdout, r.stdout + r.stderr
        assert len(_tshark(workdir / "c2.pcapng", "frame.number")) == 5


def test_capture_never_trusts_what_is_at_the_path(workdir: Path) -> None:
    """A planted file is replaced by a fresh one of mode 0600 (its planter
    reads nothing), a planted link is refused and its target untouched,
    and a FIFO nobody reads is refused at once while pings flow on."""
    import os
    import stat
    import time

    with Topology(1) as topo:
        a, _b = start_pair(topo, TunnelOpts(paths=[PathOpts(1)]), workdir)
        spot = workdir / "spot"
        spot.mkdir(mode=0o777)
        os.chmod(spot, 0o1777)  # like /tmp
        planted = spot / "planted.pcapng"
        planted.write_text("")
        os.chmod(planted, 0o666)
        before = planted.stat().st_ino
        with open(planted, "rb") as theirs:
            ping_bg = subprocess.Popen(
                ["ip", "netns", "exec", topo.ns("a"), "ping", "-c", "20", "-i", "0.05"]
                + [TUNNEL_V4["b"]],
                stdout=subprocess.DEVNULL,
            )
            r = _capture(a, "--tun", "-w", str(planted), "--count", "5")
            ping_bg.wait(timeout=10)
            assert r.returncode == 0, r.stdout + r.stderr
            assert theirs.read() == b"", "the planter's handle saw the capture"
        st = planted.stat()
        assert st.st_ino != before and stat.S_IMODE(st.st_mode) == 0o600, oct(st.st_mode)
        assert len(_tshark(planted, "frame.number")) == 5

        victim = spot / "victim"
        victim.write_text("keep")
        link = spot / "link.pcapng"
        link.symlink_to(victim)
        r = _capture(a, "--tun", "-w", str(link), "--count", "1")
        assert r.returncode == 1 and "symbolic link" in r.stderr, r.stderr
        assert victim.read_text() == "keep" and link.is_symlink()

        fifo = spot / "fifo.pcapng"
        os.mkfifo(fifo)
        pinger = subprocess.Popen(
            ["ip", "netns", "exec", topo.ns("a"), "ping", "-c", "40", "-i", "0.05", "-W", "1"]
            + [TUNNEL_V4["b"]],
            stdout=subprocess.PIPE,
            text=True,
        )
        t0 = time.monotonic()
        r = _capture(a, "--tun", "-w", str(fifo), "--seconds", "5", timeout=10)
        took = time.monotonic() - t0
        out, _ = pinger.communicate(timeout=20)
        assert r.returncode == 1 and "a FIFO" in r.stderr, r.stderr
        assert took < 3, took
        assert " 0% packet loss" in out, out
        assert not [p for p in spot.iterdir() if ".mpt-" in p.name]
