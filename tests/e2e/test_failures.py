"""End-to-end: failover, all paths down, start-up failures, bad configs."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from pathlib import Path

from mptlab.daemon import TUNNEL_V4, PathOpts, TunnelOpts, config_text, start_pair
from mptlab.netns import Shape, Topology
from mptlab.traffic import iperf3, ping
from mptlab.util import mpt_binary, run, wait_for


def _path_state(peer, idx: int) -> str:
    return peer.status()["paths"][idx]["state"]


def test_tcp_survives_path_cut_and_recovers_rate(workdir: Path) -> None:
    with Topology(2, shape=Shape(rate_mbit=50)) as topo:
        a, _b = start_pair(topo, TunnelOpts(paths=[PathOpts(1), PathOpts(2)]), workdir)
        result: dict = {}

        def transfer() -> None:
            try:
                result["r"] = iperf3(topo, TUNNEL_V4["b"], seconds=10)
            except Exception as e:  # noqa: BLE001 - reported below
                result["err"] = e

        t = threading.Thread(target=transfer)
        t.start()
        time.sleep(3)
        cut = time.monotonic()
        topo.set_link(2, up=False)
        wait_for("path 2 down", lambda: _path_state(a, 1) == "down", timeout=3)
        detected = time.monotonic() - cut
        t.join(timeout=40)
        assert "err" not in result, result.get("err")
        r = result["r"]
        intervals = [iv["sum"]["bits_per_second"] / 1e6 for iv in r.raw["intervals"]]
        before = sum(intervals[1:3]) / 2
        after = sum(intervals[-3:]) / 3
        print(
            f"\nfailover: before cut {before:.0f} Mbit/s, last 3 s after {after:.0f} Mbit/s, "
            f"path down after {detected * 1000:.0f} ms; intervals {[round(x) for x in intervals]}"
        )
        assert detected < 1.0
        assert before > 70, intervals
        # One 50 Mbit/s path is left: the transfer recovers most of it.
        assert after > 35, intervals
        # The path comes back when its link returns.
        topo.set_link(2, up=True)
        wait_for("path 2 up", lambda: _path_state(a, 1) == "up", timeout=5)
        # It came back once, without an up/down/up flap, on both sides.
        time.sleep(1)
        for side in (a, _b):
            p = side.status()["paths"][1]
            assert (p["ups"], p["downs"]) == (2, 1), (side.side, p["ups"], p["downs"])


def test_all_paths_down_drops_counted_and_recovers(workdir: Path) -> None:
    with Topology(1) as topo:
        a, _b = start_pair(topo, TunnelOpts(paths=[PathOpts(1)]), workdir)
        topo.set_link(1, up=False)
        wait_for("path down", lambda: a.status()["paths_up"] == 0, timeout=3)
        assert ping(topo, "a", TUNNEL_V4["b"], count=3).received == 0
        assert a.status()["drops"]["no_path"] >= 3
        assert a.proc.poll() is None, "daemon must keep running"
        topo.set_link(1, up=True)
        a.wait_ready(1, timeout=5)
        assert ping(topo, "a", TUNNEL_V4["b"], count=3).received == 3


def _up_fails(topo: Topology, cfg: Path) -> str:
    p = run([str(mpt_binary()), "up", "-c", str(cfg)], ns=topo.a, check=False, timeout=10)
    assert p.returncode == 1, (p.returncode, p.stderr)
    return p.stderr


def test_start_failures_are_explained(workdir: Path) -> None:
    with Topology(1) as topo:
        opts = TunnelOpts(paths=[PathOpts(1)])
        cfg = workdir / "a.toml"
        text = config_text(topo, "a", opts, workdir / "a.sock")
        # TUN name taken.
        run(["ip", "link", "add", "mpt0", "type", "veth", "peer", "name", "mpt0p"], ns=topo.a)
        cfg.write_text(text)
        assert "an interface named 'mpt0' already exists" in _up_fails(topo, cfg)
        run(["ip", "link", "del", "mpt0"], ns=topo.a)
        # Address not local.
        cfg.write_text(text.replace('local = "10.77.1.1:', 'local = "10.77.1.9:'))
        assert "10.77.1.9 is not an address of this host" in _up_fails(topo, cfg)
        # Port in use.
        holder = topo.spawn(
            "a",
            [
                "python3",
                "-c",
                (
                    "import socket,time;s=socket.socket(socket.AF_INET,"
                    "socket.SOCK_DGRAM);s.bind(('10.77.1.1',6000));time.sleep(30)"
                ),
            ],
        )
        wait_for(
            "port held",
            lambda: run(["ss", "-Hlun", "sport = :6000"], ns=topo.a).stdout.strip(),  # noqa: PLW0108
            timeout=5,
        )
        cfg.write_text(text)
        assert "port 6000 is already in use" in _up_fails(topo, cfg)
        holder.kill()
        holder.wait()
        # A route that already exists: named with its configuration line.
        run(["ip", "route", "add", "10.123.0.0/16", "dev", "lo"], ns=topo.a)
        cfg.write_text(text + '\n[[route]]\nnetwork = "10.123.0.0/16"\n')
        line = cfg.read_text().splitlines().index('network = "10.123.0.0/16"') + 1
        err = _up_fails(topo, cfg)
        assert f"{cfg}:{line}: route[1]: a route to 10.123.0.0/16 already exists" in err, err
        assert "RTNETLINK" not in err, err
        # Nothing was left behind by the failed starts.
        assert "mpt0" not in run(["ip", "link"], ns=topo.a).stdout
        assert not (workdir / "a.sock").exists()
        # Control socket of a running daemon is not stolen.
        a, _ = start_pair(topo, opts, workdir / "run", wait=False)
        a.wait_ready(0)
        cfg2 = workdir / "second.toml"
        cfg2.write_text(
            text.replace('"mpt0"', '"mpt1"')
            .replace(str(workdir / "a.sock"), str(a.control))
            .replace(":6000", ":6100")
        )
        assert "in use by another running mpt" in _up_fails(topo, cfg2)


def test_bad_configurations_rejected_with_messages(workdir: Path) -> None:
    cases = {
        "typo": (
            (
                '[tunnel]\nname = "t"\naddresses = ["10.0.0.1/24"]\n[peer]\nrole = "client"\n'
                '[[path]]\nlocal = "10.1.0.1:1"\nremote = "10.1.0.2:1"\nwieght = 2\n'
            ),
            ":9: path[1].wieght: unknown key; did you mean 'weight'?",
        ),
        "syntax": ("[tunnel\n", ":1: TOML syntax error"),
        "role": (
            (
                '[tunnel]\nname = "t"\naddresses = ["10.0.0.1/24"]\n[peer]\nrole = "boss"\n'
                '[[path]]\nlocal = "10.1.0.1:1"\nremote = "10.1.0.2:1"\n'
            ),
            ":5: peer.role: 'boss' is not one of server, client",
        ),
        "nopath": (
            '[tunnel]\nname = "t"\naddresses = ["10.0.0.1/24"]\n[peer]\nrole = "client"\n',
            "no [[path]] configured",
        ),
    }
    for name, (text, expected) in cases.items():
        f = workdir / f"{name}.toml"
        f.write_text(text)
        for sub in ("check", "up"):
            p = subprocess.run(
                [str(mpt_binary()), sub, "-c", str(f)],
                capture_output=True,
                text=True,
                timeout=10,
                check=False,
            )
            assert p.returncode == 2, (name, sub, p.stderr)
            assert f"{f}{expected}" in p.stderr or expected in p.stderr, (name, p.stderr)
    p = subprocess.run(
        [str(mpt_binary()), "check", "-c", str(workdir / "missing.toml")],
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    )
    assert p.returncode == 2 and "cannot read" in p.stderr
    p = subprocess.run(
        [str(mpt_binary()), "frobnicate"], capture_output=True, text=True, check=False
    )
    assert p.returncode == 2 and "unrecognized subcommand" in p.stderr
    p = subprocess.run(
        [str(mpt_binary()), "status", "-s", str(workdir / "none.sock")],
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    )
    assert p.returncode == 1 and "is the daemon running" in p.stderr


def test_status_json_and_human(workdir: Path) -> None:
    with Topology(2) as topo:
        a, _ = start_pair(topo, TunnelOpts(paths=[PathOpts(1), PathOpts(2, 6)]), workdir)
        ping(topo, "a", TUNNEL_V4["b"], count=3)
        p = run([str(mpt_binary()), "status", "-s", str(a.control), "--json"], ns=topo.a)
        doc = json.loads(p.stdout)
        for key in ("paths", "counters", "reorder", "drops", "paths_up", "pid"):
            assert key in doc
        # Who and what: schema, version, the peer's key, the last handshake.
        assert doc["schema"] == 1 and doc["version"]
        assert doc["peer_public_key"] and len(doc["peer_public_key"]) == 44
        assert abs(doc["last_handshake_unix_s"] - time.time()) < 60
        # The log names the peer by its key and its address on each path.
        log = a.log_text()
        assert "session established with the peer holding this key" in log, log
        assert doc["peer_public_key"] in log and "link1v4=" in log
        # SIGHUP does not end the daemon: it reloads an unchanged file.
        a.proc.send_signal(signal.SIGHUP)
        wait_for("SIGHUP reload", lambda: "nothing changed" in a.log_text(), timeout=5)
        assert a.proc.poll() is None and a.status()["pid"] == doc["pid"]
        path = doc["paths"][0]
        for key in (
            "state",
            "tx_packets",
            "tx_bytes",
            "rx_packets",
            "rx_bytes",
            "rtt_ms",
            "tx_loss",
            "rx_loss",
            "last_heard_ms",
        ):
            assert key in path
        assert path["rtt_ms"] is not None and path["rtt_ms"] > 0
        # The default view is one screen: state, one line per path, the
        # total, and only what needs attention (nothing, on a healthy start).
        brief = run([str(mpt_binary()), "status", "-c", str(a.cfg)], ns=topo.a).stdout
        assert "working" in brief and "2/2 paths up" in brief, brief
        assert "link1v4" in brief and "link2v6" in brief and "\ntotal" in brief, brief
        assert "drops:" not in brief and "warning" not in brief, brief
        assert len(brief.splitlines()) <= 8, brief
        human = run([str(mpt_binary()), "status", "-v", "-c", str(a.cfg)], ns=topo.a).stdout
        assert "link1v4" in human and "link2v6" in human and "drops:" in human
        assert "2/2 paths up" in human and "reorder:" in human
        # The full drops line lists only counters that counted; --json has all.
        drops_line = next(ln for ln in human.splitlines() if ln.startswith("drops:"))
        nonzero = {k for k, v in doc["drops"].items() if v}
        # A healthy start drops nothing: what the TUN sent before the first
        # session waited for it.
        assert not nonzero, doc["drops"]
        assert len(doc["drops"]) > len(nonzero)
        shown = {w.split("=")[0] for w in drops_line.split()[1:] if "=" in w}
        assert shown == nonzero, drops_line
        assert all(not w.endswith("=0") for w in drops_line.split()), drops_line
        # status -c still finds the daemon after its file became invalid.
        text = a.cfg.read_text()
        a.cfg.write_text(text + "\nbogus_key = 1\n")
        p = run([str(mpt_binary()), "status", "-c", str(a.cfg)], ns=topo.a, check=False)
        assert p.returncode == 0 and "2/2 paths up" in p.stdout, p.stderr
        assert "error(s) now" in p.stderr and "mpt check" in p.stderr, p.stderr
        a.cfg.write_text("[tunnel\n")
        p = run([str(mpt_binary()), "status", "-c", str(a.cfg)], ns=topo.a, check=False)
        assert p.returncode == 2 and "is not valid TOML" in p.stderr and "-s" in p.stderr
        a.cfg.write_text(text)


def test_paths_pair_by_name_whatever_their_order(workdir: Path) -> None:
    """Peers pair their paths by name (probes and echoes carry it): the
    client lists its two paths in the other order and the tunnel comes up
    on both without a drop; each side's status names the peer's id of each
    path."""

    def swap(text: str) -> str:
        head, first, second = text.split("[[path]]")
        return head + "[[path]]" + second.rstrip() + "\n\n[[path]]" + first.rstrip() + "\n"

    with Topology(2) as topo:
        a, b = start_pair(
            topo,
            TunnelOpts(paths=[PathOpts(1), PathOpts(2)]),
            workdir,
            edit=lambda side, t: swap(t) if side == "b" else t,
        )
        wait_for("both paths up", lambda: a.status()["paths_up"] == 2, timeout=10)
        wait_for("both paths up", lambda: b.status()["paths_up"] == 2, timeout=10)
        assert ping(topo, "a", TUNNEL_V4["b"], count=5).received == 5
        for peer in (a, b):
            doc = peer.status()
            assert not {k: v for k, v in doc["drops"].items() if v}, doc["drops"]
            assert doc["unmatched_peer_paths"] == []
            ids = {p["name"]: p["peer_path_id"] for p in doc["paths"]}
            other = b if peer is a else a
            theirs = [p["name"] for p in other.status()["paths"]]
            assert {n: theirs[i] for n, i in ids.items()} == {n: n for n in ids}, ids
        assert "path paired with the peer's path of the same name" in a.log_text()


def test_a_path_named_otherwise_pairs_by_the_socket_it_reaches(workdir: Path) -> None:
    """A path named differently on the two peers ("lte" against "link2v4")
    pairs by the socket it reaches, where one path listens on each side;
    both sides log it once, nothing is left unmatched, and both paths
    carry traffic. (Where a socket cannot tell the path, the name stays
    unmatched and its packets count as unknown_path: `tunnel/pairing.rs`
    and `tests/sim_pairing.rs`.)"""
    with Topology(2) as topo:
        a, b = start_pair(
            topo,
            TunnelOpts(paths=[PathOpts(1), PathOpts(2)]),
            workdir,
            wait=False,
            edit=lambda side, t: (
                t.replace('name = "link2v4"', 'name = "lte"') if side == "b" else t
            ),
        )
        a.wait_ready(2)
        b.wait_ready(2)
        hint = "by the socket and address it arrives at"
        wait_for("server logs the pairing", lambda: hint in a.log_text(), timeout=10)
        wait_for("client logs the pairing", lambda: hint in b.log_text(), timeout=10)
        assert "the peer's path 'lte'" in a.log_text()
        assert "the peer's path 'link2v4'" in b.log_text()
        assert ping(topo, "a", TUNNEL_V4["b"], count=20, interval=0.02).received == 20
        for peer in (a, b):
            doc = peer.status()
            assert doc["unmatched_peer_paths"] == [], doc
            assert doc["paths_up"] == 2
            assert all(p["tx_packets"] > 0 and p["rx_packets"] > 0 for p in doc["paths"]), doc
        # Told once, not per packet.
        time.sleep(1)
        assert a.log_text().count(hint) == 1


def test_status_shows_rates_and_watch_redraws(workdir: Path) -> None:
    with Topology(2, shape=Shape(rate_mbit=50)) as topo:
        a, _ = start_pair(topo, TunnelOpts(paths=[PathOpts(1), PathOpts(2)]), workdir)
        result: dict = {}
        t = threading.Thread(
            target=lambda: result.setdefault("r", iperf3(topo, TUNNEL_V4["b"], seconds=4))
        )
        t.start()
        time.sleep(2.5)
        doc = a.status()
        total = doc["rates"]["tx_bps"]
        per_path = [p["rates"]["tx_bps"] for p in doc["paths"]]
        assert total > 20e6, doc["rates"]
        assert abs(sum(per_path) - total) < 1e3, (per_path, total)
        assert all(p["rates"]["tx_pps"] > 0 for p in doc["paths"]), per_path
        p = run(
            [
                str(mpt_binary()),
                *("status", "-s", str(a.control), "--watch", "--interval", "0.2", "--count", "2"),
            ],
            ns=topo.a,
            timeout=10,
        )
        assert p.stdout.count("\x1b[H\x1b[2J") == 2, p.stdout[:200]
        assert "TX Mbit/s" in p.stdout and "\ntotal" in p.stdout
        t.join(timeout=30)
        assert result["r"].mbps > 20
