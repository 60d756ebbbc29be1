"""`mptlab ab`: an A/B comparison of two systems on one scenario, the
order alternated run by run (A,B then B,A, …: ABBA), with the spread and
the slot bias reported beside the medians.

Each run measures both systems on one topology, one after the other; the
system measured first in a run meets the freshly built links. So a fair
comparison lists each system first in half of the runs, and the report
says how much the slot itself moved the figures: the mean share of the
first slot minus the second's, over both systems. Run an A/A (the same
binary as `mpt` and `mpt-base`, `MPT_BASE_BIN=target/release/mpt`) to
measure that bias alone.

Each point's line names the CPU the hypervisor stole during it when that
is notable (`system_steal`, raw.json's `cpu_pct`), and the report its mean.

Invariants: run k lists A first when k is even (A,B / B,A / A,B / …); a
run that fails is reported and the others still count.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .cpu import stolen_note
from .runner import Runner
from .scenario import load


def run(
    scenario: str,
    a: str,
    b: str,
    runs: int,
    overrides: list[str],
    outdir: Path,
    say: Callable[[str], None] = print,
) -> dict[str, Any]:
    outdir.mkdir(parents=True, exist_ok=True)
    figures: dict[str, list[tuple[int, float]]] = {a: [], b: []}
    errors = []
    stolen: list[float] = []
    for k in range(runs):
        order = [a, b] if k % 2 == 0 else [b, a]
        sc = load(scenario, [*overrides, f"systems={','.join(order)}"])
        try:
            points = Runner(sc, outdir / f"run{k}", progress=lambda m: None).run()
        except Exception as e:  # noqa: BLE001 - the other runs still count
            errors.append(f"run {k}: {type(e).__name__}: {e}")
            continue
        for p in points:
            if p.system in figures and p.efficiency is not None and p.traffic == sc.traffic[0]:
                figures[p.system].append((order.index(p.system), p.efficiency))
            if p.error:
                errors.append(f"run {k} {p.system}: {p.error}")
        line = ", ".join(
            f"{p.system} {p.efficiency:.1%}{stolen_note(p.cpu_pct)}"
            for p in points
            if p.efficiency is not None
        )
        stolen += [p.cpu_pct.get("system_steal", 0.0) for p in points if p.cpu_pct]
        say(f"run {k} ({','.join(order)}): {line}")
    out = summarize(a, b, figures)
    out["stolen_pct_mean"] = statistics.mean(stolen) if stolen else None
    out["errors"] = errors
    out["scenario"] = scenario
    (outdir / "ab.json").write_text(json.dumps(out, indent=1))
    for line in report(out):
        say(line)
    return out


def summarize(a: str, b: str, figures: dict[str, list[tuple[int, float]]]) -> dict[str, Any]:
    """Medians, ranges, and the slot bias (first slot minus second)."""
    per = {}
    for s in (a, b):
        xs = [x for _, x in figures[s]]
        per[s] = {
            "runs": len(xs),
            "median": statistics.median(xs) if xs else None,
            "min": min(xs, default=None),
            "max": max(xs, default=None),
            "shares": xs,
        }
    first = [x for s in (a, b) for slot, x in figures[s] if slot == 0]
    second = [x for s in (a, b) for slot, x in figures[s] if slot == 1]
    bias = statistics.mean(first) - statistics.mean(second) if first and second else None
    ma, mb = per[a]["median"], per[b]["median"]
    return {
        "a": a,
        "b": b,
        "systems": per,
        "a_minus_b": None if ma is None or mb is None else ma - mb,
        "slot_bias": bias,
    }


def report(s: dict[str, Any]) -> list[str]:
    def f(v: float | None) -> str:
        return "–" if v is None else f"{v:.1%}"

    lines = []
    for name, p in s["systems"].items():
        lines.append(
            f"{name}: median {f(p['median'])} over {p['runs']} runs "
            f"(range {f(p['min'])}–{f(p['max'])})"
        )

    def pts(v: float | None) -> str:
        return "–" if v is None else f"{v * 100:+.1f} points"

    lines.append(
        f"{s['a']} − {s['b']}: {pts(s['a_minus_b'])}; "
        f"slot bias (first slot − second): {pts(s['slot_bias'])}"
    )
    if s.get("stolen_pct_mean") is not None:
        lines.append(
            f"CPU stolen by the hypervisor: {s['stolen_pct_mean']:.1f} % of a core, "
            "mean over the points (a shared VM's figures fall with it)"
        )
    return lines


def default_out(scenario: str) -> Path:
    return Path(f"results/ab-{Path(scenario).stem}-{time.strftime('%Y%m%d-%H%M%S')}")
