"""`mptlab sweep-merge`: several sweeps of the same seed as one, each
case's share the median of every transfer any of them made.

One transfer per case moves a case by up to 14 points between two sweeps
of the same build (docs/results-notes.md), so a verdict per case needs
several transfers. `mptlab sweep --repeats N` runs them in one go; this
joins sweeps run at different times (a whole sweep, then more transfers
of some cases with `--cases`), so that every transfer counts, those of
the cases mpt won as much as those of the cases it lost: re-running only
the losers and keeping their better figure would favour mpt.

Invariants: only sweeps of one seed and one transfer length merge (their
case numbers then name the same link sets); a case's row lists every
transfer per system (`runs`) and how many (`transfers`, the fewest over
its systems); the summary is the one `mptlab sweep` writes, so
`mptlab report` shows a merged sweep like any other.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from .sweep import markdown, summarize

# The share keys of a sweep's row, per system (`mptlab sweep`).
SHARE_KEYS = {"mpt": "mpt_share", "mptcp": "mptcp_share", "mpt-base": "base_share"}


class MergeError(Exception):
    """Sweeps that cannot be joined, or a file that is not a sweep."""


def load(folder: Path) -> dict[str, Any]:
    """A sweep's summary (`sweep.json` in `folder`), checked for the keys
    the merge reads."""
    f = folder / "sweep.json"
    try:
        s = json.loads(f.read_text())
    except (OSError, ValueError) as e:
        raise MergeError(f"{f}: {e}") from e
    if not isinstance(s, dict) or not isinstance(s.get("cases"), list):
        raise MergeError(f"{f}: not a sweep summary (no list of cases)")
    for k in ("seed", "seconds"):
        if k not in s:
            raise MergeError(f"{f}: not a sweep summary (no {k!r})")
    if not isinstance(s["seed"], int) or not isinstance(s["seconds"], (int, float)):
        raise MergeError(f"{f}: seed must be a whole number and seconds a number")
    for n, row in enumerate(s["cases"]):
        try:
            _check_row(row)
        except (TypeError, ValueError) as e:
            raise MergeError(f"{f}: case entry {n}: {e}") from e
    return s


def _check_row(row: Any) -> None:
    """Raise if `row` is not a sweep's case row as `transfers` reads it."""
    if not isinstance(row, dict):
        raise TypeError("not an object")
    if not isinstance(row.get("case"), int) or row["case"] < 0:
        raise ValueError("no case number")
    shares = [row.get(k) for k in SHARE_KEYS.values()]
    runs = row.get("runs")
    if isinstance(runs, dict):
        shares += [x for v in runs.values() for x in (v if isinstance(v, list) else [v])]
    elif runs is not None:
        raise TypeError("runs is not an object of lists")
    for x in shares:
        if x is not None and (isinstance(x, bool) or not isinstance(x, (int, float))):
            raise TypeError(f"share {x!r} is not a number")


def transfers(row: dict[str, Any]) -> dict[str, list[float]]:
    """Every transfer's share per system in one sweep's row: its `runs`
    when it ran several (`--repeats`), else its one share."""
    runs = row.get("runs")
    if isinstance(runs, dict):
        return {k: [float(x) for x in v] for k, v in runs.items() if v}
    out = {}
    for system, key in SHARE_KEYS.items():
        if row.get(key) is not None:
            out[system] = [float(row[key])]
    return out


def merge(sweeps: list[dict[str, Any]], sources: list[str]) -> dict[str, Any]:
    """One summary of `sweeps` (as `load` gives them, from `sources`)."""
    if not sweeps:
        raise MergeError("no sweep to merge")
    seeds = {s["seed"] for s in sweeps}
    lengths = {float(s["seconds"]) for s in sweeps}
    if len(seeds) > 1 or len(lengths) > 1:
        raise MergeError(
            f"sweeps of different seeds or transfer lengths do not merge: seeds "
            f"{sorted(seeds)}, seconds {sorted(lengths)}"
        )
    where = {s.get("bottleneck", "host") for s in sweeps}
    if len(where) > 1:
        raise MergeError(
            "sweeps with the bottleneck on the hosts and in the middle "
            "(--remote-bottleneck) do not merge"
        )
    by_case: dict[int, dict[str, Any]] = {}
    for s in sweeps:
        for row in s["cases"]:
            i = int(row["case"])
            m = by_case.setdefault(
                i,
                {
                    "case": i,
                    "links": row.get("links", ""),
                    "notes": row.get("notes", []),
                    "runs": {},
                },
            )
            for system, xs in transfers(row).items():
                m["runs"].setdefault(system, []).extend(xs)
    base = any("mpt-base" in m["runs"] for m in by_case.values())
    rows = []
    for i in sorted(by_case):
        m = by_case[i]
        share = {k: statistics.median(v) for k, v in m["runs"].items()}
        mp, c, b = share.get("mpt"), share.get("mptcp"), share.get("mpt-base")
        m["mpt_share"], m["mptcp_share"] = mp, c
        m["ratio"] = mp / c if mp is not None and c else None
        m["transfers"] = min((len(v) for v in m["runs"].values()), default=0)
        if base:
            m["base_share"] = b
            m["base_ratio"] = mp / b if mp is not None and b else None
        rows.append(m)
    counts = [r["transfers"] for r in rows]
    s = summarize(
        seeds.pop(), lengths.pop(), min(counts, default=1), [r["case"] for r in rows], rows, base
    )
    if where == {"remote"}:
        s["bottleneck"] = "remote"
    s["merged_from"] = sources
    s["transfers_max"] = max(counts, default=0)
    return s


def write(s: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "sweep.json").write_text(json.dumps(s, indent=1))
    (out / "sweep.md").write_text(markdown(s))
