"""UDP offloads on the TUN: an application that sends with UDP_SEGMENT
hands the TUN one UDP super-packet (USO); mpt cuts it into datagrams, and
the receiving mpt merges consecutive datagrams of the flow into one
super-packet for its TUN, which the kernel cuts again for the socket.

The receiver must get every datagram, each with its own content and size,
in order; the status must show the super-packets on both sides. Skipped
where the kernel has no USO on TUN (before Linux 6.2).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from mptlab.daemon import TUNNEL_V4, PathOpts, TunnelOpts, start_pair
from mptlab.netns import Topology

SIZE = 1000
PER_SEND = 10  # datagrams per sendmsg: 9 of SIZE bytes and a short last one
SENDS = 20
PORT = 9999

RECEIVER = f"""
import json, socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
s.bind(("{TUNNEL_V4["b"]}", {PORT}))
s.settimeout(5)
print("ready", flush=True)
got = []
try:
    while len(got) < {PER_SEND * SENDS}:
        got.append(s.recv(65535).hex())
except socket.timeout:
    pass
print(json.dumps(got), flush=True)
"""

SENDER = f"""
import socket, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_UDP, 103, {SIZE})  # UDP_SEGMENT
for k in range({SENDS}):
    buf = b"".join(bytes([k, j]) * ({SIZE} // 2) for j in range({PER_SEND - 1}))
    buf += bytes([k, 255]) * 100
    s.sendto(buf, ("{TUNNEL_V4["b"]}", {PORT}))
    time.sleep(0.005)  # correctness, not load: no queue may overflow
"""


def expected() -> list[bytes]:
    out = []
    for k in range(SENDS):
        out += [bytes([k, j]) * (SIZE // 2) for j in range(PER_SEND - 1)]
        out.append(bytes([k, 255]) * 100)
    return out


def test_uso_super_packets_arrive_as_the_datagrams_sent(workdir: Path) -> None:
    with Topology(2) as topo:
        a, b = start_pair(topo, TunnelOpts(paths=[PathOpts(1), PathOpts(2)]), workdir)
        if not a.status()["io"].get("tun_uso"):
            pytest.skip("kernel without USO on TUN (Linux < 6.2)")
        rx = subprocess.Popen(
            ["ip", "netns", "exec", topo.b, sys.executable, "-c", RECEIVER],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert rx.stdout is not None
            assert rx.stdout.readline().strip() == "ready"
            subprocess.run(
                ["ip", "netns", "exec", topo.a, sys.executable, "-c", SENDER],
                check=True,
                timeout=10,
            )
            got = [bytes.fromhex(h) for h in json.loads(rx.stdout.readline())]
        finally:
            rx.kill()
            rx.wait()
        assert got == expected()
        io_a, io_b = a.status()["io"], b.status()["io"]
        print(f"\nsender io: {io_a}\nreceiver io: {io_b}")
        assert io_a["uso_super_packets"] == SENDS
        assert io_a["uso_segments"] == SENDS * PER_SEND
        assert io_a["offload_errors"] == 0
        assert io_b["udp_gro_super_packets"] >= 1
