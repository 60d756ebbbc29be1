"""The `qos-matrix` scenario: flow fairness and real-time delay on link
pairs, jitter, flow counts and flood rates the `qos` scenario does not
cover, QoS on against off in the same run.

A cell is (link pair, jitter, TCP flows, flood factor). Each repeat of a
cell runs, on a fresh topology and tunnel, VoIP alone (the idle
reference), then the mix of `qosmix.run_mix` (VoIP, M2M, `flows` TCP
flows in one class, a UDP flood at `flood` times the links' sum in the
same class as the TCP flows) with QoS on, and the mix with QoS off. Per
cell and repeat it reports Jain's index of the TCP flows, their share of
the fair split beside the flood, VoIP's one-way delay over idle, VoIP and
M2M loss, and the same with QoS off; and whether the issue's targets hold
(Jain >= 0.98, share >= 95 %, VoIP within 1 ms of idle on links without
jitter, 0 VoIP and M2M loss).

Link pairs: A + B Mbit/s, the first 5 ms one way, the second 30 ms (the
jitter `wifi` adds ±1.5 ms on the first and ±5 ms on the second, Wi-Fi-
and LTE-like). The classes are the `[mpt] extra` of the scenario file
(by default a real-time class on EF and CS5, a telemetry class on port
7200 with a guaranteed rate, and one class for the rest).

With `matrix.base=true` each repeat also runs the mix on `mpt-base` (the
build in $MPT_BASE_BIN, with its own idle reference): an A/B against an
earlier build in the same run, reported per cell beside QoS on and off.

Invariants: every cell and repeat is run whatever the others did (a
failure is recorded, not raised); the order of QoS on and off (and the
base) alternates by repeat (on first in even repeats, last in odd ones),
so neither has the first slot.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .netns import Shape
from .runner import Runner
from .scenario import Scenario

JITTER = {"none": (0.0, 0.0), "wifi": (1.5, 5.0)}
DELAYS_MS = (5.0, 30.0)
# The issue's targets.
JAIN_MIN = 0.98
SHARE_MIN = 0.95
VOIP_OVER_IDLE_MS_MAX = 1.0


@dataclass
class Settings:
    pairs: list[str] = field(default_factory=lambda: ["100+20", "60+15", "30+30", "200+10"])
    jitter: list[str] = field(default_factory=lambda: ["none", "wifi"])
    flows: list[int] = field(default_factory=lambda: [2, 4, 8, 16])
    floods: list[float] = field(default_factory=lambda: [1.0, 3.0, 5.0])
    repeats: int = 3
    # The first repeat's number: a matrix run over several sessions
    # continues the alternation of the order (`matrix.repeat_from=1`).
    repeat_from: int = 0
    seconds: float = 10.0
    base: bool = False
    extra: str = ""

    @staticmethod
    def from_dict(d: dict[str, Any], extra: str) -> Settings:
        s = Settings(extra=extra)
        for k, v in d.items():
            if not hasattr(s, k) or k == "extra":
                raise ValueError(f"[matrix]: unknown key '{k}'")
            cur = getattr(s, k)
            if isinstance(cur, bool):
                if str(v).lower() not in ("true", "false"):
                    raise ValueError(f"[matrix] {k}: true or false")
                setattr(s, k, str(v).lower() == "true")
            elif isinstance(cur, list):
                items = v if isinstance(v, list) else str(v).split(",")
                setattr(s, k, [type(cur[0])(x) for x in items])
            else:
                setattr(s, k, type(cur)(v))
        for p in s.pairs:
            rates(p)
        if any(j not in JITTER for j in s.jitter):
            raise ValueError(f"[matrix] jitter: each of {sorted(JITTER)}")
        if (
            s.repeats < 1
            or s.repeat_from < 0
            or any(f < 1 for f in s.flows)
            or any(x <= 0 for x in s.floods)
        ):
            raise ValueError("[matrix]: repeats and flows at least 1, floods above 0")
        return s


def rates(pair: str) -> tuple[float, float]:
    try:
        a, b = (float(x) for x in pair.split("+"))
    except ValueError:
        raise ValueError(f"[matrix] pairs: '{pair}' is not A+B (Mbit/s)") from None
    if a <= 0 or b <= 0:
        raise ValueError(f"[matrix] pairs: '{pair}': rates above 0")
    return a, b


def _scenario(s: Settings, pair: str, jitter: str, flows: int, flood: float, order: list[str]):
    a, b = rates(pair)
    ja, jb = JITTER[jitter]
    shapes = [
        Shape(rate_mbit=a, delay_ms=DELAYS_MS[0], jitter_ms=ja),
        Shape(rate_mbit=b, delay_ms=DELAYS_MS[1], jitter_ms=jb, queue_ms=50),
    ]
    return Scenario(
        name=f"qos-matrix-{pair}-{jitter}-{flows}f-{flood:g}x",
        description="",
        link_counts=[2],
        shapes=shapes,
        shape=Shape(),
        systems=order,
        ip=["4in4"],
        traffic=["voip", "qos-mix"],
        # QoS off is judged against mpt's idle reference: no idle run of its own.
        traffic_by_system={"mpt-noqos": ["qos-mix"]},
        seconds=s.seconds,
        flood_factor=flood,
        mix_streams=flows,
        mpt_extra=s.extra,
    )


def _cell_row(points: list[Any], jitter: str, base: bool = False) -> dict[str, Any]:
    by = {(p.system, p.traffic): p for p in points}

    def idle_of(system: str) -> float | None:
        idle = by.get((system, "voip"))
        return (idle.details or {}).get("owd_mean_ms") if idle else None

    idle_ms = idle_of("mpt")
    row: dict[str, Any] = {"idle_voip_owd_ms": idle_ms}
    systems = [("mpt", "on"), ("mpt-noqos", "off")] + ([("mpt-base", "base")] if base else [])
    for system, tag in systems:
        p = by.get((system, "qos-mix"))
        if system == "mpt-base":
            idle_ms = idle_of("mpt-base")
            row["idle_voip_owd_ms_base"] = idle_ms
        d = p.details if p else {}
        owd = d.get("voip_owd_mean_ms")
        row[tag] = {
            "jain": d.get("bulk_jain"),
            "share": d.get("bulk_share_of_fair"),
            "streams_mbps": d.get("bulk_streams_mbps"),
            "flood_mbps": d.get("flood_mbps"),
            "voip_over_idle_ms": None if owd is None or idle_ms is None else owd - idle_ms,
            "voip_loss": d.get("voip_loss"),
            "m2m_loss": d.get("m2m_loss"),
            "error": p.error if p else "missing",
        }
    on = row["on"]
    checks = {
        "jain": on["jain"] is not None and on["jain"] >= JAIN_MIN,
        "share": on["share"] is not None and on["share"] >= SHARE_MIN,
        "voip_loss": on["voip_loss"] == 0,
        "m2m_loss": on["m2m_loss"] == 0,
    }
    if jitter == "none":
        v = on["voip_over_idle_ms"]
        checks["voip_delay"] = v is not None and v <= VOIP_OVER_IDLE_MS_MAX
    row["checks"] = checks
    row["met"] = all(checks.values())
    return row


def run(s: Settings, outdir: Path, say: Callable[[str], None] = print) -> dict[str, Any]:
    outdir.mkdir(parents=True, exist_ok=True)
    rows = []
    cells = list(itertools.product(s.pairs, s.jitter, s.flows, s.floods))
    say(f"qos-matrix: {len(cells)} cells x {s.repeats} repeats, {s.seconds:g} s each")
    for n, (pair, jitter, flows, flood) in enumerate(cells):
        for rep in range(s.repeat_from, s.repeat_from + s.repeats):
            order = ["mpt", "mpt-base", "mpt-noqos"] if s.base else ["mpt", "mpt-noqos"]
            if rep % 2 == 1:
                order.reverse()
            sc = _scenario(s, pair, jitter, flows, flood, order)
            tag = f"{pair} {jitter} {flows} flows {flood:g}x #{rep + 1}"
            try:
                # Short directory names: control sockets live inside them
                # (a Unix socket's path has at most 107 bytes).
                cell_dir = outdir / f"c{n}r{rep}"
                points = Runner(sc, cell_dir, progress=lambda m: None).run()
                # Every point's details (delays, rates, losses, the daemons'
                # status at the end), for a cell that missed to be read.
                (cell_dir / "points.json").write_text(
                    json.dumps([asdict(p) for p in points], indent=1, default=str)
                )
                row = _cell_row(points, jitter, s.base)
            except Exception as e:  # noqa: BLE001 - the next cell runs all the same
                row = {"error": f"{type(e).__name__}: {e}", "met": False, "checks": {}}
            row.update(
                {"pair": pair, "jitter": jitter, "flows": flows, "flood": flood, "repeat": rep}
            )
            row["dir"] = f"c{n}r{rep}"
            rows.append(row)
            say(f"{tag}: {line(row)}")
            # Written after every cell: a run stopped half way keeps what
            # it measured (`mptlab matrix-report` merges runs).
            doc = _write(s, rows, outdir)
    doc = _write(s, rows, outdir)
    say(f"qos-matrix: targets met in {doc['met']} of {doc['total']} runs")
    return doc


def _write(s: Settings, rows: list[dict[str, Any]], outdir: Path) -> dict[str, Any]:
    doc = {"settings": {k: v for k, v in vars(s).items()}, "rows": rows}
    doc["met"] = sum(1 for r in rows if r["met"])
    doc["total"] = len(rows)
    tmp = outdir / "qos-matrix.json.tmp"
    tmp.write_text(json.dumps(doc, indent=1))
    tmp.replace(outdir / "qos-matrix.json")
    (outdir / "qos-matrix.md").write_text(markdown(doc))
    return doc


def _f(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def _jain(side: dict[str, Any]) -> str:
    """Jain's index of a run's TCP flows, or "starved" when none of them
    delivered anything (QoS off beside a flood: the index is undefined)."""
    streams = side.get("streams_mbps")
    if side.get("jain") is None and streams and not any(streams):
        return "starved"
    return _f(side.get("jain"), ".3f")


def line(row: dict[str, Any]) -> str:
    if "on" not in row:
        return f"error {row.get('error')}"
    on, off = row["on"], row["off"]
    failed = [k for k, ok in row["checks"].items() if not ok]
    return (
        f"Jain {_f(on['jain'], '.3f')}, share {_f(on['share'], '.1%')}, "
        f"VoIP {_f(on['voip_over_idle_ms'], '+.2f')} ms loss {_f(on['voip_loss'], '.3f')}, "
        f"M2M loss {_f(on['m2m_loss'], '.3f')}; QoS off: Jain {_jain(off)}, "
        f"VoIP {_f(off['voip_over_idle_ms'], '+.1f')} ms"
        + ("" if row["met"] else f"  MISSED: {', '.join(failed) or row.get('error')}")
        + _base_line(row.get("base"))
    )


def _base_line(base: dict[str, Any] | None) -> str:
    if not base:
        return ""
    return (
        f"; base: Jain {_f(base['jain'], '.3f')}, share {_f(base['share'], '.1%')}, "
        f"VoIP {_f(base['voip_over_idle_ms'], '+.2f')} ms loss {_f(base['voip_loss'], '.3f')}"
    )


def markdown(doc: dict[str, Any]) -> str:
    base = bool(doc.get("settings", {}).get("base"))
    out = [
        f"Targets met in {doc['met']} of {doc['total']} runs (Jain >= {JAIN_MIN}, share >= "
        f"{SHARE_MIN:.0%}, VoIP within {VOIP_OVER_IDLE_MS_MAX:g} ms of idle without jitter, "
        "0 VoIP and M2M loss).",
        "",
        "| links | jitter | flows | flood | run | Jain | share of fair | VoIP over idle ms "
        "| VoIP loss | M2M loss | QoS off: Jain | QoS off: VoIP over idle ms | met |"
        + (" base: Jain | base: VoIP over idle ms |" if base else ""),
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|" + ("---|---|" if base else ""),
    ]
    for r in doc["rows"]:
        on, off = r.get("on", {}), r.get("off", {})
        b = r.get("base", {})
        tail = (
            f" {_f(b.get('jain'), '.3f')} | {_f(b.get('voip_over_idle_ms'), '.2f')} |"
            if base
            else ""
        )
        out.append(
            f"| {r['pair']} | {r['jitter']} | {r['flows']} | {r['flood']:g}x | {r['repeat'] + 1} "
            f"| {_f(on.get('jain'), '.3f')} | {_f(on.get('share'), '.1%')} "
            f"| {_f(on.get('voip_over_idle_ms'), '.2f')} | {_f(on.get('voip_loss'), '.3f')} "
            f"| {_f(on.get('m2m_loss'), '.3f')} | {_jain(off)} "
            f"| {_f(off.get('voip_over_idle_ms'), '.1f')} | {'yes' if r['met'] else '**no**'} |"
            + tail
        )
    return "\n".join(out) + "\n"


def merge(docs: list[dict[str, Any]], repeats_min: int = 3) -> dict[str, Any]:
    """Cells of several runs' qos-matrix.json together: per cell its runs,
    how many met the targets, and the worst of each figure over them.
    `complete` counts the cells with at least `repeats_min` runs, all met."""
    cells: dict[tuple, list[dict[str, Any]]] = {}
    for doc in docs:
        for r in doc.get("rows", []):
            if "pair" in r:
                cells.setdefault((r["pair"], r["jitter"], r["flows"], r["flood"]), []).append(r)

    def worst(rows: list[dict[str, Any]], side: str, key: str, pick: Callable) -> Any:
        vals = [r.get(side, {}).get(key) for r in rows]
        vals = [v for v in vals if v is not None]
        return pick(vals) if vals else None

    out = []
    for (pair, jitter, flows, flood), rows in sorted(
        cells.items(), key=lambda kv: (rates(kv[0][0]), kv[0][1], kv[0][2], kv[0][3])
    ):
        out.append(
            {
                "pair": pair,
                "jitter": jitter,
                "flows": flows,
                "flood": flood,
                "runs": len(rows),
                "met": sum(1 for r in rows if r.get("met")),
                "jain_min": worst(rows, "on", "jain", min),
                "share_min": worst(rows, "on", "share", min),
                "voip_over_idle_ms_max": worst(rows, "on", "voip_over_idle_ms", max),
                "voip_loss_max": worst(rows, "on", "voip_loss", max),
                "m2m_loss_max": worst(rows, "on", "m2m_loss", max),
                "off_voip_over_idle_ms_min": worst(rows, "off", "voip_over_idle_ms", min),
                "off_jain_min": worst(rows, "off", "jain", min),
            }
        )
    complete = sum(1 for c in out if c["runs"] >= repeats_min and c["met"] == c["runs"])
    return {
        "cells": out,
        "repeats_min": repeats_min,
        "complete": complete,
        "runs": sum(c["runs"] for c in out),
        "met": sum(c["met"] for c in out),
    }


def merged_markdown(m: dict[str, Any]) -> str:
    out = [
        f"{len(m['cells'])} cells, {m['runs']} runs: "
        f"targets met in {m['met']} of {m['runs']} runs; "
        f"{m['complete']} cells with at least {m['repeats_min']} runs, all met.",
        "",
        "| links | jitter | flows | flood | runs | met | Jain min | share min "
        "| VoIP over idle ms, max | VoIP loss max | M2M loss max "
        "| QoS off: Jain min | QoS off: VoIP over idle ms, min |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in m["cells"]:
        out.append(
            f"| {c['pair']} | {c['jitter']} | {c['flows']} | {c['flood']:g}x | {c['runs']} "
            f"| {c['met']} | {_f(c['jain_min'], '.3f')} | {_f(c['share_min'], '.1%')} "
            f"| {_f(c['voip_over_idle_ms_max'], '+.2f')} | {_f(c['voip_loss_max'], '.3f')} "
            f"| {_f(c['m2m_loss_max'], '.3f')} | {_f(c['off_jain_min'], '.3f')} "
            f"| {_f(c['off_voip_over_idle_ms_min'], '.1f')} |"
        )
    return "\n".join(out) + "\n"
