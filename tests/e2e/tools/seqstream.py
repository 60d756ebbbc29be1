"""Sequence-numbered UDP stream for the restart tests.

usage: seqstream.py send DST PORT PPS SECONDS
       seqstream.py recv BIND PORT SECONDS
The sender ignores send errors (the tunnel may be down while a daemon
restarts); at the end it prints one JSON line: {"start": monotonic_s, "sent":
n}, so seq k left no earlier than start + k / PPS. The receiver prints one
JSON line: [[seq, arrival_s], ...]. Both read CLOCK_MONOTONIC, which network
namespaces share.
"""

import json
import socket
import sys
import time

mode = sys.argv[1]
if mode == "send":
    dst, port, pps, seconds = sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
    fam = socket.AF_INET6 if ":" in dst else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_DGRAM)
    start = time.monotonic()
    seq = 0
    while True:
        due = start + seq / pps
        now = time.monotonic()
        if now - start >= seconds:
            break
        if due > now:
            time.sleep(due - now)
        try:
            s.sendto(seq.to_bytes(8, "big") + b"x" * 92, (dst, port))
        except OSError:
            pass
        seq += 1
    print(json.dumps({"start": start, "sent": seq}), flush=True)
else:
    bind, port, seconds = sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    fam = socket.AF_INET6 if ":" in bind else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_DGRAM)
    s.bind((bind, port))
    s.settimeout(0.2)
    end = time.monotonic() + seconds
    got = []
    while time.monotonic() < end:
        try:
            d = s.recv(2048)
        except (TimeoutError, OSError):
            continue
        got.append([int.from_bytes(d[:8], "big"), time.monotonic()])
    print(json.dumps(got), flush=True)
