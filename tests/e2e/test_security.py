"""End-to-end security: wrong keys, tampering, replays, NAT rebinding."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import pytest
from mptlab.daemon import TUNNEL_V4, PathOpts, TunnelOpts, start_pair
from mptlab.netns import Shape, Topology
from mptlab.probe import stream
from mptlab.traffic import ping
from mptlab.util import mpt_binary, run, wait_for


def _other_key() -> str:
    import subprocess

    key = run([str(mpt_binary()), "genkey"]).stdout
    return subprocess.run(
        [str(mpt_binary()), "pubkey"], input=key, capture_output=True, text=True, check=True
    ).stdout.strip()


def _replace_peer_key(text: str, key: str) -> str:
    return re.sub(r'peer_public_key = ".*"', f'peer_public_key = "{key}"', text)


def _start_with_stranger_key(topo: Topology, workdir: Path, side: str) -> tuple:
    """Start both peers, `side` believing in a key the other does not hold;
    wait until the server refused two initiations: by mac1 when the client
    believes in another server key (no cryptography spent), after the
    Diffie-Hellman work when the server does not know the client's key."""
    wrong = _other_key()
    a, b = start_pair(
        topo,
        TunnelOpts(paths=[PathOpts(1)]),
        workdir,
        wait=False,
        edit=lambda s, t: _replace_peer_key(t, wrong) if s == side else t,
    )
    drop = "handshake_bad_mac" if side == "b" else "handshake_failed"
    wait_for("refused initiations", lambda: a.status()["drops"][drop] >= 2, timeout=10)
    return a, b


def test_wrong_server_key_never_gets_a_session(workdir: Path) -> None:
    with Topology(1) as topo:
        a, b = _start_with_stranger_key(topo, workdir, "b")
        sb, sa = b.status(), a.status()
        assert sb["security"]["cipher"] is None and sb["paths_up"] == 0
        assert sa["security"]["cipher"] is None
        assert sa["drops"]["handshake_bad_mac"] >= 2
        assert sa["security"]["handshake_failures"] == 0, "no Diffie-Hellman work for them"
        assert ping(topo, "b", TUNNEL_V4["a"], count=2).received == 0
        wait_for("client log", lambda: "no handshake response" in b.log_text(), timeout=10)
        assert "not addressed to our public key" in a.log_text()


def test_unknown_client_key_is_refused_and_logged(workdir: Path) -> None:
    with Topology(1) as topo:
        a, b = _start_with_stranger_key(topo, workdir, "a")
        assert b.status()["paths_up"] == 0
        assert "initiation from an unknown static key" in a.log_text()
        # The log names the offending public key, to compare with the
        # client's `mpt pubkey`.
        client_pub = run([str(mpt_binary()), "pubkey", "-i", str(workdir / "b.key")]).stdout.strip()
        assert f"public key {client_pub} is not this tunnel's peer_public_key" in a.log_text()
        # Private keys never appear in logs or status.
        key = (workdir / "b.key").read_text().strip()
        assert key not in a.log_text() + b.log_text()
        assert (
            key
            not in run(
                [str(mpt_binary()), "status", "-s", str(a.control), "--json"], ns=topo.a
            ).stdout
        )


def test_flipped_bits_are_dropped_and_counted(workdir: Path) -> None:
    with Topology(1, shape=Shape(corrupt=0.05)) as topo:
        a, b = start_pair(topo, TunnelOpts(paths=[PathOpts(1)], tunnel_v6=False), workdir)
        got = stream(topo, TUNNEL_V4["b"], count=2000, pps=2000, size=200)
        bad_tag = b.status()["drops"]["bad_tag"]
        corrupted = topo.emulator_stats()
        print(
            f"\ncorrupt 5%: receiver dropped {bad_tag} bad tags; stream lost {got['lost']}, "
            f"invalid {got['invalid']}; emulator {corrupted}"
        )
        assert bad_tag > 20
        assert got["invalid"] == 0 and got["duplicates"] == 0
        # Loss recovery (on by default) asks for and gets back most of
        # what the receiver dropped; none of it arrives corrupted.
        assert b.status()["recovery"]["recovered"] > 0
        assert got["lost"] < bad_tag


def test_replayed_packets_are_dropped_and_never_delivered_twice(workdir: Path) -> None:
    with Topology(1, shape=Shape(duplicate=0.1)) as topo:
        a, b = start_pair(topo, TunnelOpts(paths=[PathOpts(1)], tunnel_v6=False), workdir)
        got = stream(topo, TUNNEL_V4["b"], count=2000, pps=2000, size=200)
        replay = b.status()["drops"]["replay"]
        print(
            f"\nduplicate 10%: receiver dropped {replay} replays; stream duplicates "
            f"{got['duplicates']}, lost {got['lost']}"
        )
        assert got["duplicates"] == 0
        assert got["lost"] == 0
        assert replay > 100


def _listening(n: str, port: int) -> bool:
    return bool(run(["ss", "-Hltn", f"sport = :{port}"], ns=n).stdout.strip())


def _nat_topology(tag: str) -> tuple[list[str], dict[str, str]]:
    """client C -- router R (SNAT) -- server S; returns namespaces."""
    ns = {k: f"mptnat{tag}{k}" for k in ("c", "r", "s")}
    for n in ns.values():
        run(["ip", "netns", "add", n])
        run(["ip", "link", "set", "lo", "up"], ns=n)
    run(
        [
            "ip",
            "link",
            "add",
            "c0",
            "netns",
            ns["c"],
            "type",
            "veth",
            "peer",
            "name",
            "r0",
            "netns",
            ns["r"],
        ]
    )
    run(
        [
            "ip",
            "link",
            "add",
            "r1",
            "netns",
            ns["r"],
            "type",
            "veth",
            "peer",
            "name",
            "s0",
            "netns",
            ns["s"],
        ]
    )
    for n, dev, addr in (
        (ns["c"], "c0", "10.88.1.2/24"),
        (ns["r"], "r0", "10.88.1.1/24"),
        (ns["r"], "r1", "10.88.2.1/24"),
        (ns["s"], "s0", "10.88.2.2/24"),
    ):
        run(["ip", "addr", "add", addr, "dev", dev], ns=n)
        run(["ip", "link", "set", dev, "up"], ns=n)
    run(["ip", "route", "add", "default", "via", "10.88.1.1"], ns=ns["c"])
    run(["sysctl", "-qw", "net.ipv4.ip_forward=1"], ns=ns["r"])
    return list(ns.values()), ns


def _snat(r: str, port: int) -> None:
    run(["nft", "flush", "ruleset"], ns=r)
    run(["nft", "add", "table", "ip", "nat"], ns=r)
    run(
        [
            "nft",
            "add",
            "chain",
            "ip",
            "nat",
            "post",
            "{ type nat hook postrouting priority 100 ; }",
        ],
        ns=r,
    )
    run(
        [
            "nft",
            "add",
            "rule",
            "ip",
            "nat",
            "post",
            "oifname",
            "r1",
            "meta",
            "l4proto",
            "udp",
            "snat",
            "to",
            f"10.88.2.1:{port}",
        ],
        ns=r,
    )
    run(["conntrack", "-D", "-p", "udp"], ns=r, check=False)


def test_client_address_change_behind_nat(workdir: Path) -> None:
    import os
    import subprocess

    names, ns = _nat_topology(str(os.getpid()))
    procs: list[subprocess.Popen] = []
    try:
        _snat(ns["r"], 40000)
        keys = {}
        for side in ("c", "s"):
            k = workdir / f"{side}.key"
            run([str(mpt_binary()), "genkey", "-o", str(k)])
            keys[side] = run([str(mpt_binary()), "pubkey", "-i", str(k)]).stdout.strip()
        conf = {
            "s": ("server", "10.99.0.1/24", "10.88.2.2:6000", None, "c"),
            "c": ("client", "10.99.0.2/24", "10.88.1.2:6000", "10.88.2.2:6000", "s"),
        }
        socks = {}
        for side, (role, addr, local, remote, other) in conf.items():
            socks[side] = workdir / f"{side}.sock"
            text = (
                f'[tunnel]\nname = "mpt0"\naddresses = ["{addr}"]\n'
                f'control_socket = "{socks[side]}"\n[peer]\nrole = "{role}"\n'
                f'[security]\nprivate_key_file = "{workdir / (side + ".key")}"\n'
                f'peer_public_key = "{keys[other]}"\n[[path]]\nname = "nat"\n'
                f'local = "{local}"\n' + (f'remote = "{remote}"\n' if remote else "")
            )
            (workdir / f"{side}.toml").write_text(text)
            log = open(workdir / f"{side}.log", "w")  # noqa: SIM115
            procs.append(
                subprocess.Popen(
                    [
                        "ip",
                        "netns",
                        "exec",
                        ns[side],
                        str(mpt_binary()),
                        "up",
                        "-c",
                        str(workdir / f"{side}.toml"),
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )

        def status(side: str) -> dict:
            import json

            out = run(
                [str(mpt_binary()), "status", "-s", str(socks[side]), "--json"], ns=ns[side]
            ).stdout
            return json.loads(out)

        wait_for(
            "tunnel up",
            lambda: status("c")["paths_up"] == 1 and status("s")["paths_up"],
            timeout=10,
        )
        assert status("s")["paths"][0]["remote"] == "10.88.2.1:40000"
        srv = subprocess.Popen(
            ["ip", "netns", "exec", ns["s"], "iperf3", "-s", "-1"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        procs.append(srv)
        wait_for(
            "iperf3 server",
            lambda: _listening(ns["s"], 5201),
            timeout=10,
        )
        result: dict = {}

        def client() -> None:
            result["p"] = run(
                ["iperf3", "-c", "10.99.0.1", "-t", "6", "-i", "1"],
                ns=ns["c"],
                check=False,
                timeout=40,
            )

        t = threading.Thread(target=client)
        t.start()
        time.sleep(2.5)
        _snat(ns["r"], 40001)  # the client's public address:port changes
        t.join(timeout=60)
        out = result["p"].stdout
        print("\n" + out[-600:])
        assert result["p"].returncode == 0, result["p"].stderr
        assert status("s")["paths"][0]["remote"] == "10.88.2.1:40001"
        assert "peer address changed" in (workdir / "s.log").read_text()
        rates = [float(m) for m in re.findall(r"sec\s+[\d.]+ \w+\s+([\d.]+) [MG]bits/sec", out)]
        assert rates and min(rates[3:6]) > 0, rates
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    p.kill()
        for n in names:
            run(["ip", "netns", "del", n], check=False)


@pytest.mark.parametrize("parallel", [None, "always"])
def test_rekey_under_load_does_not_interrupt_traffic(workdir: Path, parallel: str | None) -> None:
    """Also with two workers sealing and opening every batch in parallel:
    nonces and the replay window must survive session changes mid-flow."""
    from mptlab.traffic import iperf3, reference_mbps

    with Topology(2) as topo:
        ref = reference_mbps(topo)
        opts = TunnelOpts(
            paths=[PathOpts(1), PathOpts(2)],
            tunnel_v6=False,
            security_extra="rekey_after_packets = 20000",
            workers=2 if parallel else None,
            parallel=parallel,
        )
        a, b = start_pair(topo, opts, workdir)
        # The client (b) sends: it starts a rekey every 20,000 packets.
        r = iperf3(topo, TUNNEL_V4["b"], seconds=4, reverse=True)
        sa = a.status()["security"]
        print(
            f"\nrekeys during transfer: {sa['rekeys']}, {r.mbps:.0f} Mbit/s, "
            f"retransmits {r.retransmits}; drops {a.status()['drops']}"
        )
        assert sa["rekeys"] >= 3
        # A floor against plain TCP on this machine, not a benchmark.
        assert r.mbps > 0.01 * ref, (r.mbps, ref)
        assert a.status()["drops"]["bad_tag"] == 0
