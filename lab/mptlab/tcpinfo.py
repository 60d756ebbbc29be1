"""The inner TCP over time: `ss -tin` polled in the sender's namespace.

A tunnel's share of its links is what the inner TCP makes of them: a flow
that left slow start early (HyStart takes a round trip that grew by an
eighth for a queue), that waited on the receiver's window, or that met a
loss the tunnel gave up, carries less whatever the paths offered. With
`run.timeline = true`, every TCP transfer (mpt, MPTCP, the plain link)
records every `interval` seconds the sender's sockets to the iperf3
server's port: congestion window in bytes, smoothed round trip, the bytes
in flight, retransmissions so far, and the time the socket spent limited
by the receiver's window and by its own send buffer (Linux's chronograph
counters, `tcp_info`'s `rwnd_limited` and `sndbuf_limited`). An MPTCP
connection's subflows are summed (windows, flight, retransmissions; the
round trip is the flight-weighted mean). It lands in raw.json under
`details.tcp_timeline`, and `mptlab timeline RESULTS` prints it under
each transfer's paths.

Invariants: the sampler only reads (one `ss` per interval, one more at
its start: sockets already established then are an earlier transfer's
and are left out); a poll that
fails or finds no socket is a gap, never raised; `stop` joins the thread,
so no poll outlives the transfer; iperf3's control connection (a few
hundred bytes) is left out once a data socket has sent more.
"""

from __future__ import annotations

import re
import statistics
from typing import Any

from .timeline import Poller
from .util import run

#: Fields of one socket in `ss -tin` output that the timeline keeps.
_NUM = {
    "cwnd": re.compile(r"\bcwnd:(\d+)"),
    "mss": re.compile(r"\bmss:(\d+)"),
    "unacked": re.compile(r"\bunacked:(\d+)"),
    "bytes_sent": re.compile(r"\bbytes_sent:(\d+)"),
    "bytes_retrans": re.compile(r"\bbytes_retrans:(\d+)"),
    "rwnd_limited_ms": re.compile(r"\brwnd_limited:(\d+)ms"),
    "sndbuf_limited_ms": re.compile(r"\bsndbuf_limited:(\d+)ms"),
}
_RTT = re.compile(r"\brtt:([\d.]+)/([\d.]+)")
_RETRANS = re.compile(r"\bretrans:\d+/(\d+)")
#: A socket's address line: its local port, then the peer's address.
_ADDRS = re.compile(r":(\d+)\s+\S+:\d+\s*$")
#: Sockets that sent less are iperf3's control connection.
CONTROL_BYTES_MAX = 64 * 1024


def parse_ss(text: str) -> list[dict[str, float]]:
    """The sockets of `ss -tinH` output: one dict per socket (its info
    line is the one after its address line, or the same line)."""
    out: list[dict[str, float]] = []
    port: float | None = None
    for line in text.splitlines():
        a = _ADDRS.search(line)
        if a:
            port = float(a.group(1))
        if "cwnd:" not in line:
            continue
        s: dict[str, float] = {} if port is None else {"local_port": port}
        port = None
        for k, rx in _NUM.items():
            m = rx.search(line)
            if m:
                s[k] = float(m.group(1))
        m = _RTT.search(line)
        if m:
            s["rtt_ms"] = float(m.group(1))
        m = _RETRANS.search(line)
        s["retrans"] = float(m.group(1)) if m else 0.0
        out.append(s)
    return out


def combine(sockets: list[dict[str, float]]) -> dict[str, Any] | None:
    """One row for the data sockets of a transfer (subflows summed), or
    None when there is none."""
    data = [s for s in sockets if s.get("bytes_sent", 0) > CONTROL_BYTES_MAX]
    if not data:
        data = sorted(sockets, key=lambda s: s.get("bytes_sent", 0))[-1:]
    if not data:
        return None
    flight = [s.get("unacked", 0) * s.get("mss", 0) for s in data]
    total = sum(flight)
    rtts = [(s.get("rtt_ms"), f) for s, f in zip(data, flight, strict=True)]
    known = [(r, f) for r, f in rtts if r is not None]
    if total > 0 and known:
        rtt = sum(r * f for r, f in known) / max(sum(f for _, f in known), 1)
    else:
        rtt = min((r for r, _ in known), default=None)
    return {
        "sockets": len(data),
        "cwnd_bytes": int(sum(s.get("cwnd", 0) * s.get("mss", 0) for s in data)),
        "inflight_bytes": int(total),
        "rtt_ms": None if rtt is None else round(rtt, 2),
        "retrans": int(sum(s.get("retrans", 0) for s in data)),
        "rwnd_limited_ms": int(max((s.get("rwnd_limited_ms", 0) for s in data), default=0)),
        "sndbuf_limited_ms": int(max((s.get("sndbuf_limited_ms", 0) for s in data), default=0)),
    }


class TcpSampler(Poller):
    """Polls the sender's TCP sockets to `port` in namespace `ns` every
    `interval` s on a thread of its own."""

    def __init__(self, ns: str, port: int = 5201, interval: float = 0.2):
        super().__init__(interval)
        self.ns = ns
        self.port = port
        # Connections already there belong to an earlier transfer (one
        # whose tunnel went before its FIN was answered, or MPTCP's
        # subflows): summed in, they read as this one's window and
        # retransmissions (seen as "2 subflows" on mpt's transfers).
        self.stale = {s.get("local_port") for s in self._sockets()} - {None}

    def _sockets(self) -> list[dict[str, float]]:
        p = run(
            ["ss", "-tinH", "state", "established", "dport", "=", f":{self.port}"],
            ns=self.ns,
            check=False,
            timeout=5,
        )
        return parse_ss(p.stdout) if p.returncode == 0 else []

    def poll(self) -> dict[str, Any] | None:
        """One sample of the sockets now (None: no socket, or `ss` failed)."""
        return combine([s for s in self._sockets() if s.get("local_port") not in self.stale])

    def stop(self) -> list[dict[str, Any]]:
        """Stop polling; the samples."""
        return self.halt()


def render(rows: list[dict[str, Any]]) -> str:
    """One line per sample: window, flight, round trip, retransmissions
    and the time limited by the receiver's window or the send buffer."""
    lines = []
    for r in rows:
        rtt = r.get("rtt_ms")
        line = (
            f"{r['t']:6.2f}s | cwnd {r.get('cwnd_bytes', 0) / 1e6:6.2f} MB"
            f" flight {r.get('inflight_bytes', 0) / 1e6:6.2f} MB"
            f" rtt {'    -' if rtt is None else f'{rtt:5.1f}'} ms"
            f" retrans {r.get('retrans', 0)}"
        )
        if r.get("rwnd_limited_ms"):
            line += f" rwnd-limited {r['rwnd_limited_ms']} ms"
        if r.get("sndbuf_limited_ms"):
            line += f" sndbuf-limited {r['sndbuf_limited_ms']} ms"
        if r.get("sockets", 1) > 1:
            line += f" ({r['sockets']} subflows)"
        lines.append(line)
    return "\n".join(lines)


def tcp_summary(rows: list[dict[str, Any]] | None) -> dict[str, Any] | None:
    """What held one transfer's inner TCP back, from its timeline
    (`tcpinfo.py`): the median round trip, the largest window, the
    retransmissions and the seconds limited by the send buffer and by the
    receiver's window (None without a timeline)."""
    if not rows:
        return None
    rtts = [r["rtt_ms"] for r in rows if r.get("rtt_ms") is not None]

    # The counters are cumulative per socket, and the last samples may see
    # only iperf3's control connection (the data socket closed first): the
    # highest value read is the transfer's.
    def most(key: str) -> int:
        return max((r.get(key, 0) for r in rows), default=0)

    return {
        "rtt_ms_median": round(statistics.median(rtts), 1) if rtts else None,
        "cwnd_mb_max": round(most("cwnd_bytes") / 1e6, 2),
        "retrans": most("retrans"),
        "sndbuf_limited_s": round(most("sndbuf_limited_ms") / 1000, 2),
        "rwnd_limited_s": round(most("rwnd_limited_ms") / 1000, 2),
    }


def tcp_line(name: str, t: dict[str, Any]) -> str:
    """One system's inner-TCP summary for the progress output of `mptlab
    run` and `mptlab sweep` (a limit under 0.05 s is left out)."""
    rtt = t.get("rtt_ms_median")
    out = (
        f"{name} rtt {'-' if rtt is None else f'{rtt:.0f}'} ms, window up to"
        f" {t['cwnd_mb_max']:.2f} MB, {t['retrans']} retransmitted"
    )
    if t.get("sndbuf_limited_s", 0) >= 0.05:
        out += f", send-buffer limited {t['sndbuf_limited_s']:.1f} s"
    if t.get("rwnd_limited_s", 0) >= 0.05:
        out += f", receive-window limited {t['rwnd_limited_s']:.1f} s"
    return out
