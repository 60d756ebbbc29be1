"""Two hosts in network namespaces joined by N links.

Topology (link i = 1..N, each a veth pair)::

    +-----------+  l1a ---- l1b  +-----------+
    |  ns  A    |  l2a ---- l2b  |   ns  B   |
    |           |      ...       |           |
    +-----------+  lNa ---- lNb  +-----------+

Link i carries 10.77.i.1/24 (A) and 10.77.i.2/24 (B), and
fd77:0:i::1/64 and fd77:0:i::2/64. Rates are shaped with tbf on the egress
of both ends.

Invariants: namespace names are unique per instance (prefix, PID and a
counter); every Topology is registered for teardown at exit and on
SIGINT/SIGTERM, and teardown kills the processes it started (by PID) before
deleting the namespaces, so nothing outlives a run.
"""

from __future__ import annotations

import atexit
import itertools
import os
import signal
import subprocess
from dataclasses import dataclass
from typing import Any

from .util import CommandError, run

_counter = itertools.count()
_live: list[Topology] = []


def _cleanup_all(*_: Any) -> None:
    for t in list(_live):
        t.close()


def _on_signal(signum: int, frame: Any) -> None:
    _cleanup_all()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


atexit.register(_cleanup_all)
for _s in (signal.SIGTERM,):
    try:
        signal.signal(_s, _on_signal)
    except ValueError:  # not the main thread
        pass


@dataclass
class Shape:
    """Egress shaping of one link direction."""

    rate_mbit: float | None = None
    queue_ms: float = 20.0

    def tbf_args(self) -> list[str]:
        assert self.rate_mbit is not None
        rate_bps = self.rate_mbit * 1e6
        # Bucket must hold at least one timer tick of traffic (HZ >= 100).
        burst = max(int(rate_bps / 8 / 100), 16_000)
        limit = int(rate_bps / 8 * self.queue_ms / 1000) + burst
        return ["tbf", "rate", f"{self.rate_mbit}mbit", "burst", str(burst), "limit", str(limit)]


def link_addr(i: int, side: str, v: int) -> str:
    """Address of side 'a' or 'b' on link i for IP version v (no prefix)."""
    host = 1 if side == "a" else 2
    return f"10.77.{i}.{host}" if v == 4 else f"fd77:0:{i}::{host}"


class Topology:
    """Namespaces A and B joined by `n` links. Use as a context manager."""

    def __init__(self, n: int, shape: Shape | list[Shape] | None = None, prefix: str = "mpt"):
        if not 1 <= n <= 64:
            raise ValueError("1 to 64 links")
        uid = f"{os.getpid()}x{next(_counter)}"
        self.n = n
        self.a = f"{prefix}{uid}a"
        self.b = f"{prefix}{uid}b"
        self.procs: list[subprocess.Popen[Any]] = []
        self._closed = False
        _live.append(self)
        try:
            self._build(shape)
        except BaseException:
            self.close()
            raise

    def _build(self, shape: Shape | list[Shape] | None) -> None:
        run(["ip", "netns", "add", self.a])
        run(["ip", "netns", "add", self.b])
        for ns in (self.a, self.b):
            run(["ip", "link", "set", "lo", "up"], ns=ns)
            run(["sysctl", "-qw", "net.ipv6.conf.all.accept_dad=0"], ns=ns)
            run(["sysctl", "-qw", "net.ipv6.conf.default.accept_dad=0"], ns=ns)
        shapes = shape if isinstance(shape, list) else [shape or Shape()] * self.n
        for i in range(1, self.n + 1):
            la, lb = self.dev(i, "a"), self.dev(i, "b")
            run(
                [
                    "ip",
                    "link",
                    "add",
                    la,
                    "netns",
                    self.a,
                    "type",
                    "veth",
                    "peer",
                    "name",
                    lb,
                    "netns",
                    self.b,
                ]
            )
            for ns, dev, side in ((self.a, la, "a"), (self.b, lb, "b")):
                run(["ip", "addr", "add", f"{link_addr(i, side, 4)}/24", "dev", dev], ns=ns)
                run(
                    ["ip", "addr", "add", f"{link_addr(i, side, 6)}/64", "dev", dev, "nodad"], ns=ns
                )
                run(["ip", "link", "set", dev, "up"], ns=ns)
                s = shapes[i - 1]
                if s.rate_mbit:
                    run(["tc", "qdisc", "replace", "dev", dev, "root", *s.tbf_args()], ns=ns)

    @staticmethod
    def dev(i: int, side: str) -> str:
        return f"l{i}{side}"

    def ns(self, side: str) -> str:
        return self.a if side == "a" else self.b

    def set_link(self, i: int, up: bool) -> None:
        """Cut or restore link i (both ends)."""
        state = "up" if up else "down"
        run(["ip", "link", "set", self.dev(i, "a"), state], ns=self.a)
        run(["ip", "link", "set", self.dev(i, "b"), state], ns=self.b)

    def spawn(self, side: str, args: list[str], **kw: Any) -> subprocess.Popen[Any]:
        """Start a process in namespace `side`; it is killed at teardown."""
        p = subprocess.Popen(["ip", "netns", "exec", self.ns(side), *args], **kw)
        self.procs.append(p)
        return p

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=5)
        for ns in (self.a, self.b):
            # Kill anything else still running inside, then delete.
            pids = run(["ip", "netns", "pids", ns], check=False).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            try:
                run(["ip", "netns", "del", ns], check=False)
            except CommandError:
                pass
        if self in _live:
            _live.remove(self)

    def __enter__(self) -> Topology:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
