"""Hostile sender for the flood test: runs inside the client's namespace,
captures genuine packets leaving on the path, then floods the server's path
ports with random bytes, truncated headers, bit-flipped (bad-tag) packets,
replays (old counters), forged plaintext packets with an inner datagram,
and handshake initiations. Prints one JSON line of what it sent.

usage: flood.py IFACE TARGETS SECONDS INNER_DST
  TARGETS: comma-separated addr:port of the server's path sockets; packets
  captured on IFACE towards the first target serve as genuine samples.
"""

import json
import os
import random
import socket
import struct
import sys
import time

from wireversion import wire_version

iface, targets, seconds, inner_dst = sys.argv[1:5]
targets = [(t.rsplit(":", 1)[0], int(t.rsplit(":", 1)[1])) for t in targets.split(",")]
server, port0 = targets[0]
seconds = float(seconds)

# 1. Capture genuine mpt packets leaving on the path (UDP to the server).
cap = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
cap.bind((iface, 0))
cap.settimeout(0.5)
genuine = []
deadline = time.monotonic() + 5
while len(genuine) < 200 and time.monotonic() < deadline:
    try:
        frame = cap.recv(65535)
    except TimeoutError:
        continue
    if frame[12:14] != b"\x08\x00" or frame[23] != 17:
        continue
    ihl = (frame[14] & 0x0F) * 4
    dport = struct.unpack("!H", frame[14 + ihl + 2 : 14 + ihl + 4])[0]
    dst = socket.inet_ntoa(frame[30:34])
    if dst == server and dport == port0:
        genuine.append(frame[14 + ihl + 8 :])
cap.close()
if not genuine:
    print(json.dumps({"error": "captured nothing"}))
    sys.exit(1)


# An inner IPv4/UDP packet to INNER_DST:9999 that must never arrive.
def inner_packet():
    payload = b"FLOOD" * 10
    udp = struct.pack("!HHHH", 4444, 9999, 8 + len(payload), 0) + payload
    hdr = struct.pack(
        "!BBHHHBBH4s4s",
        0x45,
        0,
        20 + len(udp),
        0,
        0,
        64,
        17,
        0,
        socket.inet_aton("10.99.0.2"),
        socket.inet_aton(inner_dst),
    )
    return hdr + udp


# Wire version of the daemon and its header (crates/mpt-core/src/wire/mod.rs):
# version, type, path, class, session, counter (48 bits: high 16, low 32),
# path seq (16), timestamp (us mod 2^32), tunnel seq (32).
VERSION = wire_version()
HEADER = "!BBBBIHIHII"
HEADER_LEN = struct.calcsize(HEADER)


def header(ty, path, session=0, counter=0, tseq=0):
    ts_us = (time.time_ns() // 1000) & 0xFFFFFFFF
    c_hi, c_lo = counter >> 32, counter & 0xFFFFFFFF
    return struct.pack(HEADER, VERSION, ty, path, 0, session, c_hi, c_lo, 0, ts_us, tseq)


def forged_plain(path):
    h = header(1, path, counter=random.getrandbits(32), tseq=random.getrandbits(32))
    return h + inner_packet()


def bad_tag(g):
    # A fresh counter (so the replay window lets it through to the AEAD)
    # and a flipped body bit: only the tag check can refuse it.
    b = bytearray(g)
    b[8:14] = struct.pack("!Q", (1 << 40) + random.getrandbits(32))[2:]
    i = random.randrange(HEADER_LEN, len(b))
    b[i] ^= 1 << random.randrange(8)
    return bytes(b)


def handshake_init(path):
    return header(4, path) + os.urandom(161)  # Noise part and the two MACs


kinds = {
    "random": lambda p: os.urandom(random.randrange(0, 1400)),
    "truncated": lambda p: random.choice(genuine)[: random.randrange(0, HEADER_LEN)],
    "bad_tag": lambda p: bad_tag(random.choice(genuine)),
    "replay": lambda p: random.choice(genuine),
    "forged_plaintext": forged_plain,
    "handshake_init": handshake_init,
}
socks = []
for _ in range(8):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setblocking(False)
    socks.append(s)
sent = {k: 0 for k in kinds}
end = time.monotonic() + seconds
names = list(kinds)
i = 0
while time.monotonic() < end:
    k = names[i % len(names)]
    path = (i // len(names)) % len(targets)
    try:
        socks[i % len(socks)].sendto(kinds[k](path), targets[path])
        sent[k] += 1
    except (BlockingIOError, OSError):
        time.sleep(0.0005)
    i += 1
print(json.dumps({"sent": sent, "total": sum(sent.values()), "captured": len(genuine)}))
