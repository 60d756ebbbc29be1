"""A sender's paths over time: `mpt status --json` polled during a transfer.

With `run.timeline = true` (or the override `run.timeline=true`) every mpt
transfer records, every `interval` seconds, each path of the sending daemon:
its state, the rate its controller paces at, the controller's state and
queueing estimate, its target and the jitter the peer reports (`t` and
`j` on the printed line) (and, once learned, the queue it takes for the link's
own: `own` on the printed line), what its last rate sample delivered
beside what was sent while that sample's packets left (`over R` on the
printed line when that is at least 1.1 times the delivery), the one-way
delay the peer reports, and the Mbit/s the path sent over the interval
(from its byte counter). It lands in raw.json under
`details.paths_timeline`, and `mptlab timeline RESULTS` prints it beside
what each trace offered, so that a shortfall can be placed: a path paced
below what its link offered, a queue that the controller drains, a path
that was down. Each row also names the counters that grew over its interval
(`COUNTERS`: the reorder buffer's losses and late arrivals, recovery's
give-ups and resends, the send queue's drops), which places the losses the
inner TCP saw.

Invariants: the sampler only reads (one `mpt status` per interval, through
the daemon's control socket); a status that fails is skipped, never
raised; `stop` joins the thread, so no poll outlives the transfer.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Protocol


class _Peer(Protocol):
    def status(self) -> dict[str, Any]: ...


def path_row(p: dict[str, Any]) -> dict[str, Any]:
    """The fields of one path of a status document that the timeline keeps."""
    s = p.get("sending") or {}
    return {
        "name": p.get("name"),
        "state": p.get("state"),
        "tx_bytes": p.get("tx_bytes", 0),
        "pacing_mbps": s.get("pacing_mbps"),
        "control": s.get("control"),
        "queueing_ms": s.get("queueing_ms"),
        "link_queue_ms": s.get("link_queue_ms"),
        "target_ms": s.get("target_ms"),
        "jitter_ms": s.get("jitter_ms"),
        "queue_ahead_ms": s.get("queue_ahead_ms"),
        "delivered_mbps": s.get("delivered_mbps"),
        "sent_then_mbps": s.get("sent_then_mbps"),
        "rtt_ms": p.get("rtt_ms"),
        "stalls": p.get("stalls", 0),
    }


#: Counters of a status document that a timeline keeps per sample: the
#: reorder buffer's and recovery's losses (each one reaches the inner TCP)
#: and the send queue's drops, so that a row shows when they happened.
COUNTERS = {
    "reorder": ("lost", "late_delivered"),
    "recovery": ("gave_up", "retransmitted"),
}


#: The drop reasons of the sender's queues (`mpt status` `drops`).
QUEUE_DROPS = ("queue_full", "class_rate", "class_full", "flow_share", "aqm")


def counters(doc: dict[str, Any]) -> dict[str, int]:
    """`COUNTERS` of one status document, flattened (`reorder.lost`, ...),
    plus `queue_drops`: the drops at the sender's input and class queues."""
    out = {}
    for section, keys in COUNTERS.items():
        sec = doc.get(section) or {}
        for k in keys:
            if isinstance(sec.get(k), int):
                out[f"{section}.{k}"] = sec[k]
    drops = doc.get("drops") or {}
    out["queue_drops"] = sum(v for k, v in drops.items() if isinstance(v, int) and k in QUEUE_DROPS)
    return out


def rows_with_rates(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each sample after the first with every path's `sent_mbps` over the
    interval before it (from the byte counters; a counter that went back,
    as after a restart, gives none)."""
    out = []
    for prev, cur in zip(samples, samples[1:], strict=False):
        dt = cur["t"] - prev["t"]
        paths = []
        for i, p in enumerate(cur["paths"]):
            q = prev["paths"][i] if i < len(prev["paths"]) else None
            sent = None
            if q is not None and dt > 0 and p["tx_bytes"] >= q["tx_bytes"]:
                sent = round((p["tx_bytes"] - q["tx_bytes"]) * 8 / dt / 1e6, 3)
            stalled = q is not None and (p.get("stalls") or 0) > (q.get("stalls") or 0)
            paths.append({**p, "sent_mbps": sent, "stalled_now": stalled})
        grew = {
            k: v - prev.get("counters", {}).get(k, 0)
            for k, v in cur.get("counters", {}).items()
            if v > prev.get("counters", {}).get(k, 0)
        }
        out.append(
            {
                "t": cur["t"],
                "from_ns": prev["t_ns"],
                "to_ns": cur["t_ns"],
                "paths": paths,
                "counters_grew": grew,
            }
        )
    return out


class Poller:
    """Calls `poll()` every `interval` s on a thread of its own and keeps
    each row it returns, stamped (`t`: seconds since the start, `t_ns`:
    the monotonic clock); a poll that raises or returns None is a gap.
    `stop` joins the thread, so no poll outlives it."""

    def __init__(self, interval: float = 0.2):
        self.interval = interval
        self.samples: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def poll(self) -> dict[str, Any] | None:
        raise NotImplementedError

    def start(self) -> Poller:
        self._thread.start()
        return self

    def _loop(self) -> None:
        t0 = time.monotonic()
        while True:
            try:
                row = self.poll()
            except Exception:  # noqa: BLE001 - a failed poll is a gap, not an error
                row = None
            if row is not None:
                stamp = {"t": round(time.monotonic() - t0, 3), "t_ns": time.monotonic_ns()}
                self.samples.append({**stamp, **row})
            if self._stop.wait(self.interval):
                return

    def halt(self) -> list[dict[str, Any]]:
        """Stop polling; the samples as taken."""
        self._stop.set()
        self._thread.join(timeout=10)
        return self.samples


class StatusSampler(Poller):
    """Polls `peer.status()` every `interval` s on a thread of its own."""

    def __init__(self, peer: _Peer, interval: float = 0.2):
        super().__init__(interval)
        self.peer = peer

    def poll(self) -> dict[str, Any] | None:
        doc = self.peer.status()
        if doc is None:
            return None
        return {
            "paths": [path_row(p) for p in doc.get("paths", [])],
            "counters": counters(doc),
        }

    def stop(self) -> list[dict[str, Any]]:
        """Stop polling; the samples with each path's rate over its interval."""
        return rows_with_rates(self.halt())


def add_offered(
    timeline: list[dict[str, Any]], offered: Callable[[int, int, int], float | None]
) -> list[dict[str, Any]]:
    """Each path of each row with `offered_mbps`: what its link offered
    over the row's interval (`offered(link, from_ns, to_ns)`; None for a
    link of fixed rate, or beyond the links)."""
    for row in timeline:
        for i, p in enumerate(row["paths"]):
            v = offered(i, row["from_ns"], row["to_ns"])
            p["offered_mbps"] = None if v is None else round(v, 3)
    return timeline


def render(timeline: list[dict[str, Any]]) -> str:
    """One line per sample: per path its state, controller state, pacing
    rate, queueing, what it sent and what its link offered (a trace's)."""
    lines = []
    for row in timeline:
        cells = [f"{row['t']:6.2f}s"]
        for p in row["paths"]:
            sent = p.get("sent_mbps")
            cell = (
                f"{(p.get('state') or '?')[:4]:4} {(p.get('control') or '-')[:7]:7}"
                f" paced {_f(p.get('pacing_mbps'))} q {_f(p.get('queueing_ms'))}"
                f" sent {_f(sent)}"
            )
            if p.get("target_ms") is not None:
                cell += f" t {_f(p['target_ms'])}"
            if p.get("jitter_ms"):
                cell += f" j {_f(p['jitter_ms'])}"
            if p.get("link_queue_ms"):
                cell += f" own {_f(p['link_queue_ms'])}"
            if p.get("queue_ahead_ms"):
                cell += f" ahead {_f(p['queue_ahead_ms'])}"
            over = _over(p)
            if over is not None:
                cell += f" over {over:4.2f}"
            if p.get("offered_mbps") is not None:
                cell += f" offered {_f(p['offered_mbps'])}"
            if p.get("stalled_now"):
                cell += " STALL"
            cells.append(cell)
        grew = row.get("counters_grew") or {}
        if grew:
            cells.append(" ".join(f"+{v} {k}" for k, v in sorted(grew.items())))
        lines.append(" | ".join(cells))
    return "\n".join(lines)


def _over(p: dict[str, Any]) -> float | None:
    """What was sent while the last sample's packets left, over what it
    delivered, when at least 1.1 (the path was sent more than it carried)."""
    sent, got = p.get("sent_then_mbps"), p.get("delivered_mbps")
    if not sent or not got:
        return None
    return sent / got if sent >= 1.1 * got else None


def _f(v: float | None) -> str:
    return "    -" if v is None else f"{v:5.1f}"
