"""Handshake flood from spoofed sources, for the handshake-under-flood test.

Sends mpt v2 handshake initiations that carry a *valid* mac1 (the attacker
knows the server's public key, as anyone who has seen a configuration
may), so the server cannot drop them after one hash: it must answer with a
cookie reply or do the Diffie-Hellman work. Each packet comes from one of
SOURCES spoofed IPv4 addresses (raw socket, IP_HDRINCL), so no per-source
limit can stop the flood. Sends as fast as the CPU allows for SECONDS and
prints one JSON line: packets sent, rate, sources.

usage: hsflood.py SERVER_PUBKEY_B64 TARGETS SECONDS SOURCES SRC_PREFIX16
  TARGETS: comma-separated addr:port of the server's path sockets (IPv4);
  SRC_PREFIX16: first two octets of the spoofed sources, e.g. 198.18
"""

import base64
import hashlib
import json
import os
import socket
import struct
import sys
import time

from wireversion import wire_version

# version, type, path, class, session, counter (48 bits: high 16, low 32),
# path seq (16), timestamp (us mod 2^32), tunnel seq (32): 24 bytes.
HEADER = "!BBBBIHIHII"
VERSION, TYPE_INIT = wire_version(), 4
NOISE_LEN, MAC_LEN = 129, 16

pub_b64, targets_arg, seconds, sources, prefix = sys.argv[1:6]
pub = base64.b64decode(pub_b64)
targets = [(t.rsplit(":", 1)[0], int(t.rsplit(":", 1)[1])) for t in targets_arg.split(",")]
seconds, sources = float(seconds), int(sources)
p1, p2 = (int(x) for x in prefix.split("."))
mac1_key = hashlib.blake2s(b"mac1----" + pub).digest()


def initiation(path: int) -> bytes:
    """A well-formed initiation with random Noise content and a valid mac1
    (mac2 zero: the attacker has no cookie for the spoofed source)."""
    ts_us = (time.time_ns() // 1000) & 0xFFFFFFFF
    head = struct.pack(HEADER, VERSION, TYPE_INIT, path, 0, 0, 0, 0, 0, ts_us, 0)
    body = head + os.urandom(NOISE_LEN)
    mac1 = hashlib.blake2s(body, key=mac1_key, digest_size=MAC_LEN).digest()
    return body + mac1 + bytes(MAC_LEN)


def ip_udp(src: bytes, dst: bytes, dport: int, payload: bytes) -> bytes:
    udp = struct.pack("!HHHH", 40000, dport, 8 + len(payload), 0) + payload
    # Checksum and id 0: the kernel fills both in for IP_HDRINCL.
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0, 64, 17, 0, src, dst)
    return ip + udp


# Pre-build every datagram (sources x targets, a few distinct bodies) so
# that the send loop does nothing but system calls.
bodies = {i: [initiation(i) for _ in range(8)] for i in range(len(targets))}
dsts = [socket.inet_aton(a) for a, _ in targets]
packets = []
for s in range(sources):
    src = bytes([p1, p2, (s >> 8) & 0xFF, s & 0xFF])
    path = s % len(targets)
    packets.append(
        (
            ip_udp(src, dsts[path], targets[path][1], bodies[path][s % 8]),
            (targets[path][0], 0),
        )
    )
raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
raw.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
sent = errors = 0
n = len(packets)
start = time.monotonic()
end = start + seconds
while True:
    for _ in range(1000):
        pkt, dst = packets[sent % n]
        try:
            raw.sendto(pkt, dst)
            sent += 1
        except OSError:
            errors += 1
    if time.monotonic() >= end:
        break
took = time.monotonic() - start
print(json.dumps({"sent": sent, "errors": errors, "pps": sent / took, "sources": sources}))
