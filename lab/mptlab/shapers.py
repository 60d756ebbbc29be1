"""What a link's shapers (the bottleneck's qdiscs) counted during one
transfer, from two readings of `Topology.shaper_counters`.

Invariants: counts never come from a qdisc's absolute totals alone, only
from differences of two readings (or, for qdiscs a rate event deleted,
of their kept totals, `netns.RETIRED`); an end that sent and dropped
nothing meanwhile is left out.
"""

from __future__ import annotations

from .netns import RETIRED


def shaper_delta(
    before: dict[str, dict[str, dict[str, int]]], after: dict[str, dict[str, dict[str, int]]]
) -> dict[str, dict[str, int]]:
    """What each link end's shapers sent and dropped between two readings
    of `Topology.shaper_counters` (the most over the device's qdiscs, as a
    parent counts its children's), and the backlog in bytes at the end.
    What qdiscs deleted meanwhile counted (a rate event replaces them,
    `netns.RETIRED`, whose totals include what they had counted at the
    first reading) is added: a replaced qdisc of the same handle, counting
    from zero again, then adds its new count less its old one to that.
    Ends that sent nothing are left out."""
    out: dict[str, dict[str, int]] = {}
    for dev, qdiscs in after.items():
        old = before.get(dev, {})
        live = [(c, old.get(name, {})) for name, c in qdiscs.items() if name != RETIRED]
        tot = {
            k: max((c[k] - o.get(k, 0) for c, o in live), default=0) for k in ("packets", "drops")
        }
        tot["backlog"] = max((c["backlog"] for c, _ in live), default=0)
        if RETIRED in qdiscs:
            gone, was = qdiscs[RETIRED], old.get(RETIRED, {})
            tot["packets"] += gone["packets"] - was.get("packets", 0)
            tot["drops"] += gone["drops"] - was.get("drops", 0)
        if tot["packets"] or tot["drops"]:
            out[dev] = tot
    return out
