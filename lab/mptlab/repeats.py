"""Repeats on fresh tunnels: each repeat of a measurement brings the
system up afresh (a user's transfer meets a tunnel that has learned
nothing), and the repeats are merged into one point.

Invariants: the merged point's rate and share are the medians of the
repeats that measured, with their range and every repeat's figure in its
details; a point whose every repeat failed keeps the last error.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict
from typing import Any


def merge_repeats(parts: list[Any]) -> Any:
    """One point from repeats measured on fresh tunnels: the median rate
    and share, their range, each repeat's figure in `repeat_mbps`."""
    ok = [p for p in parts if p.error is None and p.mbps is not None]
    if not ok:
        return parts[-1]
    out = type(ok[-1])(**{**asdict(ok[-1])})
    rates = [p.mbps for p in ok if p.mbps is not None]
    out.mbps = statistics.median(rates)
    out.mbps_min, out.mbps_max = min(rates), max(rates)
    shares = [p.efficiency for p in ok if p.efficiency is not None]
    out.efficiency = statistics.median(shares) if shares else None
    out.details = {
        **ok[-1].details,
        "repeat_mbps": rates,
        "repeat_share": shares,
        "fresh_tunnel_per_repeat": True,
    }
    offered = [o for p in ok for o in p.details.get("offered_mbit", [])]
    if offered:
        out.details["offered_mbit"] = offered
    if len(ok) < len(parts):
        out.details["failed_repeats"] = [p.error for p in parts if p.error]
    return out
