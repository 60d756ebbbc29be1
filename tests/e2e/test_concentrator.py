"""A concentrator: one mpt server for several clients, each with two
paths, in namespaces (issue: the concentrator)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from mptlab.star import SERVER_TUNNEL, Star, client_tunnel, peer_add_args, start
from mptlab.traffic import ping
from mptlab.util import mpt_binary, run, wait_for

CLIENTS = 3


def status(star: Star, workdir: Path, *args: str) -> str:
    return run(
        [str(mpt_binary()), "status", "-s", str(workdir / "server.sock"), *args],
        ns=star.ns("s"),
        timeout=10,
    ).stdout


def connected(star: Star, workdir: Path) -> int:
    return json.loads(status(star, workdir, "--json"))["peers_connected"]


def test_one_server_many_clients_each_in_its_own_tunnel(tmp_path: Path) -> None:
    """The server runs two shards (threads): clients 0 and 2 belong to
    shard 0, client 1 to shard 1; all the checks hold across them. The
    clients name their paths as they like (wifi, lte): each pairs with the
    server's path by the socket it reaches."""
    with Star(CLIENTS, links=2) as star:
        server, clients = start(star, tmp_path, server_shards=2, client_paths=["wifi", "lte"])
        wait_for("every client connected", lambda: connected(star, tmp_path) == CLIENTS, 15)
        for i, c in enumerate(clients):
            c.wait_ready(paths_up=2, timeout=15)
            r = ping(star, i, SERVER_TUNNEL, count=3, interval=0.1)  # type: ignore[arg-type]
            assert r.received == 3, f"client {i}"
        # The server reaches each client at its own address.
        for i in range(CLIENTS):
            r = ping(star, "s", client_tunnel(i), count=2, interval=0.1)  # type: ignore[arg-type]
            assert r.received == 2, f"server to client {i}"
        doc = json.loads(status(star, tmp_path, "--json"))
        assert doc["role"] == "concentrator"
        assert [p["paths_up"] for p in doc["peers"]] == [2] * CLIENTS
        assert [p["shard"] for p in doc["peers"]] == [0, 1, 0]
        assert [s["shard"] for s in doc["shards"]] == [0, 1]
        # The kernel steers each datagram to its peer's shard (a BPF program
        # on the sockets): only a handshake initiation, which names no peer
        # yet, may reach the other shard first.
        handed = sum(s["handoffs"]["datagrams_out"] for s in doc["shards"])
        assert handed <= 2 * CLIENTS, doc["shards"]
        assert all(p["rx_packets"] > 0 and p["tx_packets"] > 0 for p in doc["peers"])
        text = status(star, tmp_path)
        assert f"{CLIENTS} of {CLIENTS} peers connected" in text
        assert "shards: 2 threads" in text, text
        assert "peer client1 [10.201.1.3/32]: connected, paths 2/2 up" in text
        # One peer's tunnel in the view of a single tunnel's status.
        detail = status(star, tmp_path, "--peer", "client1")
        assert "tunnel client1 (peer of this concentrator)" in detail, detail
        assert "link0" in detail and "link1" in detail and "scheduler" in detail, detail
        log = (tmp_path / "server.log").read_text()
        assert "paired with the peer's path 'lte' by the socket" in log

        # A reload caps one path toward client 1 on its running tunnel;
        # the session stays.
        conf = tmp_path / "server.toml"
        block = f'allowed_ips = ["{client_tunnel(1)}/32"]\n'
        conf.write_text(conf.read_text().replace(block, block + "path_rate_mbit = { link1 = 3 }\n"))
        sock = ["-s", str(tmp_path / "server.sock")]
        out = run([str(mpt_binary()), "reload", *sock], ns=star.ns("s")).stdout
        assert "peer changed: client1: limits" in out, out
        peer1 = json.loads(status(star, tmp_path, "--peer", "client1", "--json"))
        caps = [p["sending"]["cap_mbps"] for p in peer1["tunnel"]["paths"]]
        assert caps == [None, 3.0], caps
        assert ping(star, 1, SERVER_TUNNEL, count=2, interval=0.1).received == 2  # type: ignore[arg-type]

        # An operator takes one of client 1's paths out of use at the
        # server (client 1 is the other shard's) and back: `mpt path
        # --peer`, as on a single tunnel.
        path_cmd = [str(mpt_binary()), "path", *sock, "--peer", "client1"]
        out = run([*path_cmd, "link1", "down"], ns=star.ns("s")).stdout
        assert "peer client1: path link1 is administratively down" in out, out
        peer1 = json.loads(status(star, tmp_path, "--peer", "client1", "--json"))
        assert [p["admin_down"] for p in peer1["tunnel"]["paths"]] == [False, True]
        listed = run([*path_cmd, "list"], ns=star.ns("s")).stdout
        assert "admin down" in listed, listed
        assert ping(star, 1, SERVER_TUNNEL, count=2, interval=0.1).received == 2  # type: ignore[arg-type]
        run([*path_cmd, "link1", "up"], ns=star.ns("s"))
        peer1 = json.loads(status(star, tmp_path, "--peer", "client1", "--json"))
        assert [p["admin_down"] for p in peer1["tunnel"]["paths"]] == [False, False]
        bare = [str(mpt_binary()), "path", *sock, "link1", "down"]
        refused = run(bare, ns=star.ns("s"), check=False)
        assert refused.returncode == 1 and "name the peer" in refused.stderr, refused.stderr
        unknown = run([*path_cmd, "nosuch", "down"], ns=star.ns("s"), check=False)
        assert unknown.returncode == 1 and "link0" in unknown.stderr, unknown.stderr
        log = (tmp_path / "server.log").read_text()
        assert "path set administratively down over the control socket" in log
        assert "peer=client1" in log

        # Client 0 speaks with client 1's address: dropped, counted.
        run(["ip", "addr", "add", f"{client_tunnel(1)}/32", "dev", "mpc0"], ns=star.ns(0))
        spoof = run(
            ["ping", "-c", "3", "-i", "0.1", "-W", "1", "-I", client_tunnel(1), SERVER_TUNNEL],
            ns=star.ns(0),
            check=False,
            timeout=15,
        )
        assert " 0 received" in spoof.stdout, spoof.stdout
        doc = json.loads(status(star, tmp_path, "--json"))
        assert doc["peers"][0]["source_not_allowed"] >= 3

        # Peers leave and come back at runtime; the others do not notice.
        run([str(mpt_binary()), "peer", *sock, "remove", "client2"], ns=star.ns("s"))
        assert ping(star, 2, SERVER_TUNNEL, count=2, interval=0.1).received == 0  # type: ignore[arg-type]
        assert ping(star, 1, SERVER_TUNNEL, count=2, interval=0.1).received == 2  # type: ignore[arg-type]
        run([str(mpt_binary()), *peer_add_args(tmp_path, 2)], ns=star.ns("s"))
        wait_for(
            "client 2 back",
            lambda: ping(star, 2, SERVER_TUNNEL, count=1).received == 1,  # type: ignore[arg-type]
            20,
        )
        assert server.stop() == 0
        for c in clients:
            assert c.stop() == 0


def test_a_key_that_is_no_peer_gets_nothing(tmp_path: Path) -> None:
    with Star(2, links=1) as star:
        _, clients = start(star, tmp_path, peers=[0])
        clients[0].wait_ready(paths_up=1, timeout=15)
        assert ping(star, 1, SERVER_TUNNEL, count=2, interval=0.2).received == 0  # type: ignore[arg-type]
        doc = json.loads(status(star, tmp_path, "--json"))
        assert doc["peers_configured"] == 1
        assert doc["drops"].get("unknown_peer", 0) > 0


def test_the_concentrator_scenario_reports_both_systems(tmp_path: Path) -> None:
    """The lab scenario, small (the 50-client figures are in
    docs/results.md): every figure is there for mpt and MPTCP."""
    import subprocess
    import sys

    out = tmp_path / "conc"
    p = subprocess.run(
        [
            *[sys.executable, "-m", "mptlab.cli", "run", "concentrator"],
            *["concentrator.clients=6", "concentrator.seconds=3", "concentrator.idle_peers=200"],
            "concentrator.systems=mpt,mpt-tunnels,mptcp",
            *["--out", str(out)],
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    print(p.stdout[-3000:], p.stderr[-2000:])
    assert p.returncode == 0
    doc = json.loads((out / "raw.json").read_text())
    by = {r["system"]: r for r in doc["results"]}
    assert set(by) == {"mpt", "mpt-tunnels", "mptcp"}
    for r in by.values():
        assert len(r["mbps"]) == 6 and all(x > 0 for x in r["mbps"]), r
        assert 0.5 < r["jain"] <= 1.0
    # The server's CPU per byte, for a concentrator and for single tunnels.
    for system in ("mpt", "mpt-tunnels"):
        assert by[system]["server_cycles_per_byte"] > 0, by[system]
    assert by["mpt"]["connect_s"] < 10
    # The datagrams lost on the clients' links, from the server's view of
    # each client (kept beside the client's own).
    assert by["mpt"]["client_shapers"]["datagrams_lost"] >= 0
    assert (out / "mpt" / "client0" / "server-view.status.json").exists()
    # The delay emulator's counters, both ways on both links: a figure
    # from a run whose network fell behind says so.
    for system in ("mpt", "mptcp"):
        dirs = by[system]["emulator"]["directions"]
        assert len(dirs) == 4 and all(d["stats"]["passed"] > 0 for d in dirs), dirs
    assert "the delay emulator released frames" in p.stdout
    assert 0 < doc["idle"]["bytes_per_idle_peer"] < 64_000
    assert "| mpt |" in (out / "concentrator.md").read_text()


def test_a_client_moves_to_the_second_concentrator_within_two_seconds(tmp_path: Path) -> None:
    """Two concentrators serve the same clients; the first is killed while
    a client pings through it every 20 ms: replies come back through the
    second within 2 s. Each concentrator announces the clients it holds
    (a route in table 201), those of either of its two shards."""
    import subprocess
    import time

    with Star(2, links=2, servers=2) as star:
        server, clients = start(star, tmp_path, announce_table=201, server_shards=2)
        for c in clients:
            c.wait_ready(paths_up=2, timeout=15)

        def announced(side: str, client: int = 0) -> bool:
            out = run(["ip", "route", "show", "table", "201"], ns=star.ns(side), check=False).stdout
            return client_tunnel(client) in out

        # The first concentrator holds the clients: only it announces them,
        # client 1 through its second shard (a follower tells the leader).
        wait_for("the first concentrator announces the client", lambda: announced("s"), 10)
        wait_for("and client 1, of shard 1", lambda: announced("s", 1), 10)
        assert not announced("s1")
        assert ping(star, 0, SERVER_TUNNEL, count=2, interval=0.1).received == 2  # type: ignore[arg-type]
        pinger = star.spawn(
            0,
            ["ping", "-D", "-i", "0.02", "-W", "1", "-w", "8", SERVER_TUNNEL],
            stdout=subprocess.PIPE,
            text=True,
        )
        time.sleep(1.0)
        assert server.proc is not None
        killed = time.time()
        server.proc.kill()
        out, _ = pinger.communicate(timeout=20)
        # `ping -D` prefixes each reply with its UNIX time.
        replies = [float(ln[1 : ln.index("]")]) for ln in out.splitlines() if ln.startswith("[")]
        after = [t for t in replies if t > killed]
        assert after, out[-2000:]
        gap = after[0] - killed
        print(f"\nfirst reply through the second concentrator {gap:.2f} s after the kill")
        assert gap < 2.0
        log = clients[0].log_text()
        assert "moving to another server" in log and "server1" in log, log[-2000:]
        # Now the second announces it (for the routing daemon to spread).
        wait_for("the second concentrator announces the client", lambda: announced("s1"), 10)


@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark missing")
def test_a_concentrator_captures_every_peer_into_one_file(tmp_path: Path) -> None:
    """`mpt capture` on a concentrator of two shards: the inner packets of
    both clients (client 1 is the other shard's) and the datagrams of one
    server path, in one pcapng file that tshark reads."""
    with Star(2, links=2) as star:
        _server, clients = start(star, tmp_path, server_shards=2)
        wait_for("every client connected", lambda: connected(star, tmp_path) == 2, 15)
        for c in clients:
            c.wait_ready(paths_up=2, timeout=15)
        out = tmp_path / "cap.pcapng"
        proc = subprocess.Popen(
            ["ip", "netns", "exec", star.ns("s"), str(mpt_binary()), "capture"]
            + ["-s", str(tmp_path / "server.sock"), "--tun", "--path", "link0"]
            + ["-w", str(out), "--seconds", "4", "--json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        wait_for("the capture file", out.exists, 10)
        for i in range(2):
            assert ping(star, i, SERVER_TUNNEL, count=10, interval=0.1).received == 10  # type: ignore[arg-type]
        stdout, stderr = proc.communicate(timeout=30)
        assert proc.returncode == 0, stderr
        done = json.loads(stdout)
        assert done["written"] >= 40 and done["dropped"] == 0, done
        r = subprocess.run(
            ["tshark", "-r", str(out), "-T", "fields", "-E", "separator=|"]
            + ["-e", "frame.interface_id", "-e", "icmp.type", "-e", "frame.comment"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        rows = [line.split("|") for line in r.stdout.splitlines() if line]
        for i in range(2):
            asked = [x for x in rows if x[0] == "0" and x[1] == "8" and f"peer client{i}" in x[2]]
            assert len(asked) >= 9, (i, rows[:20])
        replies = [x for x in rows if x[0] == "0" and x[1] == "0"]
        assert len(replies) >= 18 and all(x[2].startswith("out ") for x in replies), replies
        datagrams = [x for x in rows if x[0] == "1"]
        assert any(x[2].startswith("in ") for x in datagrams), datagrams[:5]
        assert any(x[2].startswith("out ") for x in datagrams), datagrams[:5]


def test_a_concentrator_cuts_and_coalesces_tcp_with_tun_offloads(tmp_path: Path) -> None:
    """With `offload` (on by default) the concentrator reads TCP
    super-packets from its TUN and cuts them for the client they go to,
    and writes what clients send as GRO super-packets: both counted in its
    status, the transfers whole both ways."""
    with Star(2, links=1) as star:
        server, clients = start(star, tmp_path)
        wait_for("both clients connected", lambda: connected(star, tmp_path) == 2, 15)
        for c in clients:
            c.wait_ready(paths_up=1, timeout=15)
        for i, reverse in ((0, False), (1, True)):
            port = 5400 + i
            srv = star.spawn(
                "s",
                ["iperf3", "-s", "-1", "-p", str(port)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            wait_for("iperf3 listening", lambda p=port: _listening(star, p), 10)
            args = ["iperf3", "-c", SERVER_TUNNEL, "-p", str(port), "-t", "2", "-J"]
            out = run([*args, *(["-R"] if reverse else [])], ns=star.ns(i), timeout=30).stdout
            srv.wait(timeout=10)
            got = json.loads(out)["end"]["sum_received"]["bytes"]
            assert got > 1_000_000, f"client {i}: {got} bytes"
        io = json.loads(status(star, tmp_path, "--json"))["io"]
        print(io)
        assert io["tun_offload"] is True, io
        # Its sockets take GSO messages and hand over GRO super-datagrams,
        # reported as the single tunnel reports them.
        assert io["udp_gso"] is True and io["udp_gro"] is True, io
        # Down (client 1, -R): the server's TCP came as super-packets.
        assert io["tso_super_packets"] > 0 and io["tso_segments"] > io["tso_super_packets"], io
        # Up (client 0): its segments went to the TUN coalesced.
        assert io["gro_super_packets"] > 0 and io["gro_segments"] > io["gro_super_packets"], io
        # Datagrams left in batches.
        assert io["udp_datagrams_sent"] > 2 * io["udp_send_calls"], io
        assert "io: tun offload on" in status(star, tmp_path)


def _listening(star: Star, port: int) -> bool:
    out = run(["ss", "-Htln", f"sport = :{port}"], ns=star.ns("s"), check=False).stdout
    return bool(out.strip())
