"""Two hosts in network namespaces joined by N links.

Topology (link i = 1..N, each a veth pair)::

    +-----------+  l1a ---- l1b  +-----------+
    |  ns  A    |  l2a ---- l2b  |   ns  B   |
    |           |      ...       |           |
    +-----------+  lNa ---- lNb  +-----------+

With delay, jitter or loss on any link and no netem in the kernel, a router
namespace R running `mpt-netem` sits in the middle of every link, bridging
frames between its two interfaces::

    A: lia ---- ria [R: mpt-netem] rib ---- lib :B

Link i carries 10.77.i.1/24 (A) and 10.77.i.2/24 (B), and
fd77:0:i::1/64 and fd77:0:i::2/64. Rates are shaped with tbf on the egress
of both hosts' ends; delay/jitter/loss by netem there when the kernel has
it, else by mpt-netem.

Invariants: namespace names are unique per instance (prefix, PID and a
counter); every Topology is registered for teardown at exit and on
SIGINT/SIGTERM, and teardown kills the processes it started (by PID) before
deleting the namespaces, so nothing outlives a run.
"""

from __future__ import annotations

import atexit
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from .shape import WMM_VOICE_TOS, Shape
from .util import CommandError, need_tool, netem_binary, run

__all__ = ["WMM_VOICE_TOS", "Shape", "Topology", "link_addr", "teardown"]

_counter = itertools.count()
_live: list[Topology] = []


def _cleanup_all(*_: Any) -> None:
    for t in list(_live):
        t.close()


# The emulator's real-time priority (SCHED_FIFO, chrt): the links are the
# network, which the systems under test must not slow down by loading the
# CPU (on this 2-core machine mpt-netem released frames up to 21 ms late
# under a flood, and a call's delay read it as mpt's). The kernel's RT
# throttling (sched_rt_runtime_us) leaves the rest of each second to
# others. Opt-in for now (MPTLAB_EMULATOR_RT=1): four ABBA runs of a
# 30+30 qos-matrix cell read VoIP +0.12/+0.18 ms over idle with it and
# +0.19/+0.27 without, too few to change every figure's conditions.
EMULATOR_RT_PRIORITY = 10

# The entry of `Topology.shaper_counters` that holds what a device's
# deleted qdiscs counted (a rate event replaces them), and its keys.
RETIRED = "retired"
SHAPER_KEYS = ("packets", "drops", "overlimits", "backlog")


def emulator_priority(spins: bool) -> list[str]:
    """The command prefix that runs mpt-netem at real-time priority, or
    nothing (turned off, no `chrt`, or an emulator that busy-polls and
    would hold a core at that priority)."""
    if spins or os.environ.get("MPTLAB_EMULATOR_RT", "0") != "1" or not shutil.which("chrt"):
        return []
    return ["chrt", "-f", str(EMULATOR_RT_PRIORITY)]


def stop_emulator(p: subprocess.Popen[Any]) -> dict[str, Any] | None:
    """Stop a running mpt-netem and return the counters it prints on
    exit (its last JSON line; None if it printed none). Raises
    `subprocess.TimeoutExpired` if it does not exit within 10 s."""
    p.terminate()
    out, _ = p.communicate(timeout=10)
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    return json.loads(lines[-1]) if lines else None


def emulator_config_path(ns: str) -> Path:
    """Where the mpt-netem of namespace `ns` reads its links; `teardown`
    removes it with the namespace."""
    return Path(tempfile.gettempdir()) / f"{ns}-netem.json"


def teardown(procs: list[subprocess.Popen[Any]], namespaces: list[str]) -> None:
    """Stop `procs` by PID (SIGTERM, SIGKILL after 5 s), kill anything
    else left inside `namespaces`, and delete them with the emulator
    configurations written for them."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=5)
    for ns in namespaces:
        for pid in run(["ip", "netns", "pids", ns], check=False).stdout.split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        try:
            run(["ip", "netns", "del", ns], check=False)
        except CommandError:
            pass
        emulator_config_path(ns).unlink(missing_ok=True)


def _on_signal(signum: int, frame: Any) -> None:
    # A second SIGTERM during the cleanup (`timeout` and a shell both
    # passing one on) once ended the process halfway, its namespaces left.
    signal.signal(signum, signal.SIG_IGN)
    _cleanup_all()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


atexit.register(_cleanup_all)
for _s in (signal.SIGTERM,):
    try:
        signal.signal(_s, _on_signal)
    except ValueError:  # not the main thread
        pass


_netem_cache: dict[str, bool] = {}


def kernel_has_netem() -> bool:
    """Whether the kernel has sch_netem (checked once, in a scratch namespace).
    MPTLAB_FORCE_EMULATOR=1 makes the lab use mpt-netem regardless."""
    if os.environ.get("MPTLAB_FORCE_EMULATOR"):
        return False
    if "netem" not in _netem_cache:
        ns = f"mptprobe{os.getpid()}"
        run(["ip", "netns", "add", ns])
        try:
            args = ["tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"]
            _netem_cache["netem"] = run(args, ns=ns, check=False).returncode == 0
        finally:
            run(["ip", "netns", "del", ns], check=False)
    return _netem_cache["netem"]


def allow_congestion_control(cc: str) -> None:
    """Namespaces may only choose congestion controls that the host allows;
    add `cc` to the host's allowed list if it is missing (a no-op when
    already allowed)."""
    key = "/proc/sys/net/ipv4/tcp_allowed_congestion_control"
    try:
        allowed = Path(key).read_text().split()
        if cc not in allowed:
            Path(key).write_text(" ".join([*allowed, cc]))
    except OSError:
        pass


def link_addr(i: int, side: str, v: int) -> str:
    """Address of side 'a' or 'b' on link i for IP version v (no prefix)."""
    host = 1 if side == "a" else 2
    return f"10.77.{i}.{host}" if v == 4 else f"fd77:0:{i}::{host}"


def _veth(a: str, ns_a: str, b: str, ns_b: str, mtu: int = 1500) -> None:
    run(
        [
            *["ip", "link", "add", a, "netns", ns_a, "mtu", str(mtu), "type", "veth"],
            *["peer", "name", b, "netns", ns_b, "mtu", str(mtu)],
        ]
    )


def _no_offloads(ns: str, dev: str) -> None:
    """Frames must be real frames for the emulator: no TSO/GSO/GRO, and
    checksums computed in software. Without ethtool the emulator forwards
    UDP frames whose checksum the veth left to a NIC, and the far end
    drops every one: tunnels never come up, with no other sign (found on
    a fresh machine), so its absence is an error. Offloads a veth does not
    have may fail to change; checksums must."""
    need_tool("ethtool", "to turn the veths' offloads off for the emulator")
    p = run(
        ["ethtool", "-K", dev, "tx", "off", "tso", "off", "gso", "off", "gro", "off"],
        ns=ns,
        check=False,
    )
    if p.returncode != 0:
        run(["ethtool", "-K", dev, "tx", "off"], ns=ns)


def _qdisc(ns: str, dev: str, s: Shape, netem: bool) -> None:
    """Install tbf for the rate and, if `netem`, netem for impairments."""
    use_netem = netem and s.impaired()
    if use_netem:
        args = [
            "tc",
            "qdisc",
            "replace",
            "dev",
            dev,
            "root",
            "handle",
            "1:",
            "netem",
            "limit",
            str(s.limit),
        ]
        if s.delay_ms or s.jitter_ms:
            args += ["delay", f"{s.delay_ms}ms", f"{s.jitter_ms}ms", "distribution", "normal"]
        if s.loss and s.loss_burst > 1:
            r = 1 / s.loss_burst
            p = s.loss * r / (1 - s.loss)
            args += ["loss", "gemodel", f"{p * 100}%", f"{r * 100}%", "100%", "0%"]
        elif s.loss:
            args += ["loss", "random", f"{s.loss * 100}%"]
        if s.duplicate:
            args += ["duplicate", f"{s.duplicate * 100}%"]
        if s.corrupt:
            args += ["corrupt", f"{s.corrupt * 100}%"]
        run(args, ns=ns)
        if s.rate_mbit:
            run(
                ["tc", "qdisc", "add", "dev", dev, "parent", "1:", "handle", "2:", *s.tbf_args()],
                ns=ns,
            )
    elif s.rate_mbit and not (s.serialize and not netem):
        s.rate_qdisc(ns, dev)


class Topology:
    """Namespaces A and B joined by `n` links. Use as a context manager."""

    def __init__(
        self,
        n: int,
        shape: Shape | list[Shape] | None = None,
        prefix: str = "mpt",
        cc: str = "cubic",
        spin_us: int = 0,
        mtu: int = 1500,
        emulator_cpu: int | None = None,
        busy_poll: bool = False,
    ):
        """`spin_us`: mpt-netem busy-polls when a release is due within that
        many µs, so frames leave on time to about a microsecond (measurement
        scenarios; it costs a core while traffic flows). `mtu`: of every
        link (9000 for jumbo frames). `emulator_cpu`: pin mpt-netem to
        that CPU (a measurement keeps the sender off it, so that the
        sender's bursts do not delay the emulator's releases). `busy_poll`:
        mpt-netem never sleeps, so a frame reaching it idle is read at once
        (a whole core for the topology's lifetime)."""
        self.emulator_cpu = emulator_cpu
        self.busy_poll = busy_poll
        if not 576 <= mtu <= 65_535:
            raise ValueError("mtu must be within 576..65535")
        self.mtu = mtu
        if not 1 <= n <= 64:
            raise ValueError("1 to 64 links")
        uid = f"{os.getpid()}x{next(_counter)}"
        self.n = n
        self.cc = cc
        self.spin_us = spin_us
        self.a = f"{prefix}{uid}a"
        self.b = f"{prefix}{uid}b"
        self.r: str | None = None
        self.emulator: subprocess.Popen[Any] | None = None
        self.emulator_t0_ns: int | None = None
        # Namespaces others add to this topology (LAN hosts, site.py),
        # torn down with it.
        self.extra_ns: list[str] = []
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
            # The same TCP congestion control everywhere, whatever the host's
            # default (new namespaces inherit it), so runs are comparable.
            allow_congestion_control(self.cc)
            run(["sysctl", "-qw", f"net.ipv4.tcp_congestion_control={self.cc}"], ns=ns)
            # No TCP metrics cached from one connection for the next to the
            # same address: systems measured one after another on one
            # topology reuse the tunnel's addresses, and a cached ssthresh
            # and RTT gave the second one a different start (wifi-lte, the
            # same binary twice: the first read 2-4 % lower).
            run(["sysctl", "-qw", "net.ipv4.tcp_no_metrics_save=1"], ns=ns)
        shapes = shape if isinstance(shape, list) else [shape or Shape()] * self.n
        if len(shapes) != self.n:
            raise ValueError(f"{len(shapes)} link shapes for {self.n} links")
        self.shapes = shapes
        # What deleted qdiscs counted, per device (`_retire_shaper`).
        self.retired_shapers: dict[str, dict[str, int]] = {}
        emulate = any(s.impaired() for s in shapes) and not kernel_has_netem()
        emulate = emulate or any(s.serialize or s.wmm for s in shapes)
        if emulate:
            self.r = self.a[:-1] + "r"
            run(["ip", "netns", "add", self.r])
            run(["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"], ns=self.r)
            run(["sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1"], ns=self.r)
        for i in range(1, self.n + 1):
            la, lb = self.dev(i, "a"), self.dev(i, "b")
            if emulate:
                assert self.r is not None
                ra, rb = f"r{i}a", f"r{i}b"
                _veth(la, self.a, ra, self.r, self.mtu)
                _veth(lb, self.b, rb, self.r, self.mtu)
                for dev in (ra, rb):
                    run(["ip", "link", "set", dev, "up"], ns=self.r)
                    _no_offloads(self.r, dev)
            else:
                _veth(la, self.a, lb, self.b, self.mtu)
            s = shapes[i - 1]
            for ns, dev, side, d in ((self.a, la, "a", s), (self.b, lb, "b", s.back())):
                run(["ip", "addr", "add", f"{link_addr(i, side, 4)}/24", "dev", dev], ns=ns)
                v6 = f"{link_addr(i, side, 6)}/64"
                run(["ip", "addr", "add", v6, "dev", dev, "nodad"], ns=ns)
                run(["ip", "link", "set", dev, "up"], ns=ns)
                if emulate:
                    _no_offloads(ns, dev)
                _qdisc(ns, dev, d, netem=not emulate)
        if emulate:
            self._start_emulator(shapes)

    def _emulator_config(self, shapes: list[Shape]) -> Path:
        links = []
        for i, s in enumerate(shapes, start=1):
            links.append(
                {
                    "a": f"r{i}a",
                    "b": f"r{i}b",
                    "a_to_b": s.netem_dir(),
                    "b_to_a": s.back().netem_dir(),
                }
            )
        path = emulator_config_path(self.r)
        tmp = path.with_suffix(".tmp")
        cfg = {"links": links, "spin_us": self.spin_us, "busy_poll": self.busy_poll}
        tmp.write_text(json.dumps(cfg))
        tmp.replace(path)
        return path

    def _start_emulator(self, shapes: list[Shape]) -> None:
        assert self.r is not None
        path = self._emulator_config(shapes)
        cpu = self.emulator_cpu
        pin = ["taskset", "-c", str(cpu)] if cpu is not None else []
        self.emulator = subprocess.Popen(
            [
                *["ip", "netns", "exec", self.r],
                *pin,
                *emulator_priority(self.busy_poll or self.spin_us > 0),
                *[str(netem_binary()), str(path)],
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.procs.append(self.emulator)
        assert self.emulator.stdout is not None
        line = self.emulator.stdout.readline().strip()
        # "ready T0": forwarding, and its start on the monotonic clock (ns),
        # where trace-driven links start their replay.
        if not line.startswith("ready"):
            err = self.emulator.stderr.read() if self.emulator.stderr else ""
            raise RuntimeError(f"mpt-netem did not start: {line} {err}")
        parts = line.split()
        self.emulator_t0_ns = int(parts[1]) if len(parts) > 1 else time.monotonic_ns()

    def restart_traces(self) -> None:
        """Replay every trace-driven link from its start offset, now (each
        system and repeat then sees the same window of the trace)."""
        if self.emulator is None or self.emulator.stdout is None:
            return
        if not any(s.trace or s.back().trace for s in self.shapes):
            return
        self.emulator.send_signal(signal.SIGUSR1)
        line = self.emulator.stdout.readline().split()
        if len(line) == 2 and line[0] == "restart":
            self.emulator_t0_ns = int(line[1])

    def emulator_stats(self) -> dict[str, Any] | None:
        """Stop the emulator and return its counters (None if not used)."""
        return None if self.emulator is None else stop_emulator(self.emulator)

    def shaper_counters(self) -> dict[str, dict[str, dict[str, int]]]:
        """Each link end's queueing disciplines (the rate shaper: the
        bottleneck) and their counters so far: per device, per qdisc
        (`kind` and handle), packets sent and dropped, `overlimits`, and
        the backlog in bytes now. A GSO send counts as one packet there.
        Devices that cannot be read are left out (a torn-down topology)."""
        out: dict[str, dict[str, dict[str, int]]] = {}
        for i, side in itertools.product(range(1, self.n + 1), ("a", "b")):
            dev = self.dev(i, side)
            read = self._device_counters(self.ns(side), dev)
            if read is None:
                continue
            out[dev] = read
            if dev in self.retired_shapers:
                out[dev][RETIRED] = dict(self.retired_shapers[dev])
        return out

    def _device_counters(self, ns: str, dev: str) -> dict[str, dict[str, int]] | None:
        """One device's qdisc counters (`shaper_counters`); None if it
        cannot be read."""
        p = run(["tc", "-s", "-j", "qdisc", "show", "dev", dev], ns=ns, check=False)
        try:
            qdiscs = json.loads(p.stdout) if p.returncode == 0 else []
        except json.JSONDecodeError:
            return None
        return {
            f"{q.get('kind')} {q.get('handle')}": {
                k: int(q.get(k, 0)) for k in ("packets", "drops", "overlimits", "backlog")
            }
            for q in qdiscs
            if q.get("kind") not in ("noqueue", "pfifo_fast", "mq", "fq_codel")
        }

    def _retire_shaper(self, ns: str, dev: str) -> None:
        """Keep what `dev`'s qdiscs counted before they are deleted (a
        rate event replaces them, and the new ones count from zero), so
        that a run's shaper counts hold the whole transfer: a step's drops
        were missing from `bottleneck` before."""
        read = self._device_counters(ns, dev) or {}
        kept = self.retired_shapers.setdefault(dev, {k: 0 for k in SHAPER_KEYS})
        for k in ("packets", "drops", "overlimits"):
            # A parent counts its children's: the most of them, as in
            # `shapers.shaper_delta`.
            kept[k] += max((c[k] for c in read.values()), default=0)

    @staticmethod
    def dev(i: int, side: str) -> str:
        return f"l{i}{side}"

    def ns(self, side: str) -> str:
        return self.a if side == "a" else self.b

    def shape_link(self, i: int, **changes: float) -> None:
        """Change link i's rate_mbit, delay_ms, jitter_ms or loss now, in
        both directions (a lab event: a radio link's capacity drops)."""
        old = self.shapes[i - 1]
        back = replace(old.reverse, **changes) if old.reverse else None
        new = replace(old, **changes, reverse=back)
        self.shapes = [*self.shapes[: i - 1], new, *self.shapes[i:]]
        impairs = {"delay_ms", "jitter_ms", "loss"} & set(changes)
        if new.serialize:
            impairs |= {"rate_mbit"} & set(changes)
        ends = ((self.a, self.dev(i, "a"), new), (self.b, self.dev(i, "b"), new.back()))
        if self.emulator is not None:
            if "rate_mbit" in changes and not new.serialize:
                # A new tbf, not `tc qdisc replace` of the old one: that
                # keeps the queued packets, and a GSO packet queued under
                # the old, larger bucket that exceeds the new one blocks
                # the queue's head forever (kernel 6.x tbf_change keeps the
                # child FIFO). What waited is dropped, as when a radio link
                # resets.
                for ns, dev, s in ends:
                    self._retire_shaper(ns, dev)
                    run(["tc", "qdisc", "del", "dev", dev, "root"], ns=ns, check=False)
                    s.rate_qdisc(ns, dev)
            if impairs:
                self._emulator_config(self.shapes)
                self.emulator.send_signal(signal.SIGHUP)
            return
        if impairs and not kernel_has_netem():
            raise RuntimeError(
                f"link {i}: {', '.join(sorted(impairs))} can change only on an emulated link"
            )
        for ns, dev, s in ends:
            self._retire_shaper(ns, dev)
            run(["tc", "qdisc", "del", "dev", dev, "root"], ns=ns, check=False)
            _qdisc(ns, dev, s, netem=True)

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

    def namespaces(self) -> list[str]:
        return [ns for ns in (self.a, self.b, self.r, *self.extra_ns) if ns]

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        teardown(self.procs, self.namespaces())
        if self in _live:
            _live.remove(self)

    def __enter__(self) -> Topology:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
