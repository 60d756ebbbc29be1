"""Result files of a run: raw JSON, summary CSV, the closing JSON line, and
the Markdown report for docs/results.md.

Layout of a results directory::

    raw.json      -- {"scenario", "command", "setup", "machine", "started",
                      "points": [...]}; setup holds the run's seconds and
                      the rate of each link
    summary.csv   -- one row per point, without samples and timelines
    *.png, *.svg  -- plots (see plot.py)

Invariant: raw.json alone is enough to redraw every plot and rebuild the
report (`mptlab plot DIR`, `mptlab report DIR...`).
"""

from __future__ import annotations

import csv
import json
import os
import platform
import subprocess
from collections.abc import Callable
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .cpu import process_pct
from .runner import Point
from .util import mpt_binary, repo_root

CSV_FIELDS = [
    "scenario",
    "system",
    "ip",
    "links",
    "traffic",
    "sum_mbit",
    "mbps",
    "mbps_min",
    "mbps_max",
    "efficiency",
    "cpu_pct",
    "error",
]


def _output(cmd: list[str]) -> str:
    """A command's standard output, or "" if it cannot run."""
    try:
        return subprocess.run(
            cmd, capture_output=True, text=True, check=False, timeout=5
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def machine() -> dict[str, Any]:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    # The commit of the mpt tree the lab belongs to, wherever mptlab runs
    # from, and the version of the binary it measures.
    mpt = _output(["git", "-C", str(repo_root()), "rev-parse", "--short", "HEAD"])
    version = _output([str(mpt_binary()), "--version"])
    return {
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
        "cpu_model": cpu,
        "python": platform.python_version(),
        "commit": mpt,
        "mpt_version": version,
    }


def process_cpu(p: dict[str, Any]) -> float:
    return process_pct(p.get("cpu_pct"))


def write(
    outdir: Path,
    scenario: str,
    command: str,
    points: list[Point],
    started: str,
    setup: dict[str, Any] | None = None,
) -> dict[str, Any]:
    outdir.mkdir(parents=True, exist_ok=True)
    doc = {
        "scenario": scenario,
        "command": command,
        "setup": setup or {},
        "machine": machine(),
        "started": started,
        "finished": datetime.now(UTC).isoformat(timespec="seconds"),
        "points": [asdict(p) for p in points],
    }
    (outdir / "raw.json").write_text(json.dumps(doc, indent=1))
    with open(outdir / "summary.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        w.writeheader()
        for p in doc["points"]:
            row = {k: p.get(k) for k in CSV_FIELDS}
            row["cpu_pct"] = process_cpu(p)
            w.writerow(row)
    return doc


class NotResults(Exception):
    """A folder that holds no readable results."""


def load(outdir: Path) -> dict[str, Any]:
    """raw.json of a scenario run, or bench.json of `mptlab bench`
    ([`NotResults`] if the folder has neither, or they do not parse)."""
    raw = outdir / "raw.json"
    f = raw if raw.exists() else outdir / "bench.json"
    try:
        doc = json.loads(f.read_text())
    except (OSError, ValueError) as e:
        raise NotResults(
            f"{outdir}: not a results folder (no readable raw.json or bench.json: {e})"
        ) from None
    if not isinstance(doc, dict):
        raise NotResults(f"{f}: not a results document (a JSON object)")
    return doc


MIX_FIGURES = (
    "voip_owd_mean_ms",
    "voip_owd_p99_ms",
    "voip_loss",
    "m2m_loss",
    "bulk_jain",
    "bulk_share_of_fair",
    "bulk_streams_mbps",
    "flood_mbps",
    "run_bulk_share_of_fair",
    "run_flood_mbps",
)


def _mix_figures(p: dict[str, Any]) -> dict[str, Any]:
    """The QoS figures of a qos-mix point (none for other traffic)."""
    if p["traffic"] != "qos-mix":
        return {}
    det = p.get("details") or {}
    return {k: det.get(k) for k in MIX_FIGURES}


def _realtime_in_mpt(det: dict[str, Any]) -> str:
    """The sender's real-time class delay inside mpt, if reported."""
    for c in det.get("sender_classes") or []:
        d = c.get("delay") or {}
        if c.get("realtime") and c.get("packets"):
            return f" (in mpt p50 {d.get('p50_ms', 0):.3f} / p99 {d.get('p99_ms', 0):.2f} ms)"
    return ""


def _figure(det: dict[str, Any]) -> Callable[[str, str], str]:
    """A formatter of `det`'s figures: a dash where one is missing."""

    def f(k: str, fmt: str) -> str:
        v = det.get(k)
        return "–" if v is None else format(v, fmt)

    return f


def _mix_notes(det: dict[str, Any]) -> str:
    f = _figure(det)
    return (
        f"VoIP owd {f('voip_owd_mean_ms', '.2f')} ms (p99 {f('voip_owd_p99_ms', '.2f')})"
        f"{_realtime_in_mpt(det)}, "
        f"loss {f('voip_loss', '.3%')}; M2M loss {f('m2m_loss', '.3%')}; "
        f"bulk Jain {f('bulk_jain', '.3f')}, {f('bulk_share_of_fair', '.1%')} of fair share; "
        f"flood {f('flood_mbps', '.1f')} Mbit/s (whole run with the start: "
        f"{f('run_bulk_share_of_fair', '.1%')} of fair share, flood {f('run_flood_mbps', '.1f')})"
    )


def _precedence_notes(det: dict[str, Any]) -> str:
    f = _figure(det)
    return (
        f"offered {f('overload', '.2f')}x the links: high precedence "
        f"{f('high_offered_mbit', '.0f')} Mbit/s, delivered {f('high_mbps', '.1f')}, "
        f"lost {f('high_lost', 'd')} ({f('high_lost_percent', '.2f')}%), "
        f"owd {f('high_owd_mean_ms', '.1f')} ms; low {f('low_offered_mbit', '.0f')}, "
        f"delivered {f('low_mbps', '.1f')}, loss {f('low_lost_percent', '.2f')}%"
    )


def _event_words(events: list[dict[str, Any]]) -> str:
    """`link 1 cut at 4 s, restored at 8 s` for the report."""
    words = {"cut": "cut", "restore": "restored", "shape": "reshaped"}
    parts = []
    for e in events:
        action = words.get(e.get("action", ""), e.get("action"))
        parts.append(f"link {e.get('link')} {action} at {e.get('at_s'):g} s")
    return ", ".join(parts)


def summary_line(doc: dict[str, Any]) -> str:
    """One JSON line summarising every measured point."""
    pts = [
        {
            "system": p["system"],
            "paths": p["links"],
            "ip": p["ip"],
            "traffic": p["traffic"],
            "mbps": None if p["mbps"] is None else round(p["mbps"], 2),
            "efficiency": None if p["efficiency"] is None else round(p["efficiency"], 4),
            "cpu_pct": process_cpu(p),
            "error": p["error"],
            **_mix_figures(p),
        }
        for p in doc["points"]
    ]
    return json.dumps({"scenario": doc["scenario"], "points": pts})


def run_header(doc: dict[str, Any]) -> list[str]:
    """Title, date, machine and command of one run, for the report."""
    m = doc["machine"]
    return [
        f"## {doc['scenario']}",
        "",
        f"* run: {doc['started']} → {doc['finished']}",
        f"* machine: {m['cpus']} CPUs ({m['cpu_model']}), Linux {m['kernel']}, "
        f"commit {m['commit']}",
        f"* command: `{doc['command']}`",
        *_cc_line(doc.get("setup") or {}),
        "",
    ]


def _cc_line(setup: dict[str, Any]) -> list[str]:
    """The hosts' TCP congestion control, when a run chose other than CUBIC."""
    cc = setup.get("tcp_congestion_control")
    if not cc or cc == "cubic":
        return []
    return [f"* the hosts' TCP congestion control (inner TCP): {cc}"]


def _fmt(v: float | None, pct: bool = False) -> str:
    if v is None:
        return "–"
    return f"{v:.1%}" if pct else f"{v:.1f}"


def markdown(docs: list[tuple[Path, dict[str, Any]]], images_rel: Path) -> str:
    """The report: for each results directory a table and its plots."""
    out = [
        "# mpt lab results",
        "",
        "Generated by `mptlab report` from the raw results; do not edit by hand.",
        "",
    ]
    # The hand-written summary and known limits come first.
    notes = repo_root() / "docs" / "results-notes.md"
    if notes.exists():
        out += [notes.read_text().rstrip("\n"), ""]
    for d, doc in docs:
        if doc.get("scenario") == "concentrator":
            from .concentrate import table as conc_table

            out += [*run_header(doc), conc_table(doc)]
            continue
        if "rows" in doc:  # the measure scenario
            from .measure import table

            out += [*run_header(doc), table(doc["rows"])]
            continue
        if "benchmarks" in doc:
            from .bench import markdown as bench_markdown

            out += bench_markdown(doc)
            continue
        out += [
            *run_header(doc),
            "| system | ip | links | traffic | Mbit/s (min–max) | efficiency | CPU % | notes |",
            "|---|---|---|---|---|---|---|---|",
        ]
        plain = {
            (p["traffic"], p["path_v"]): p["mbps"]
            for p in doc["points"]
            if p["system"] == "plain" and p["mbps"]
        }
        for p in doc["points"]:
            notes = p["error"] or ""
            det = p.get("details") or {}
            if p["traffic"] == "qos-mix":
                notes = notes or _mix_notes(det)
            elif p["traffic"] == "precedence":
                notes = notes or _precedence_notes(det)
            elif "outage_s" in det:
                notes = f"survived {det.get('survived')}, outage {det['outage_s']} s"
                if det.get("rates_after_shape"):
                    # A shape event: back at 85 % of the new sum after
                    # `recovery_s`, and the longest stall.
                    notes += (
                        f"; at 85% of the new sum after {det.get('recovery_s')} s,"
                        f" longest stall {det.get('longest_stall_s')} s"
                    )
            elif "lost_percent" in det:
                notes = f"loss {det['lost_percent']:.2f}%"
            elif "retransmits" in det and det["retransmits"] is not None:
                notes = f"retransmits {det['retransmits']}"
                if det.get("steady_mbps") is not None and p.get("sum_mbit"):
                    notes += (
                        f"; from {det['steady_after_s']:g} s on"
                        f" {det['steady_mbps']:.1f} ({det['steady_mbps'] / p['sum_mbit']:.1%})"
                    )
            elif "owd_mean_ms" in det:
                notes = f"owd {det['owd_mean_ms']:.2f} ms, jitter {det['jitter_ms']:.3f} ms"
                if det.get("events"):
                    notes += f"; lost {det.get('lost')} with {_event_words(det['events'])}"
            ref = plain.get((p["traffic"], p["path_v"]))
            bulk = p["efficiency"] is None and p["traffic"] in ("tcp", "udp", "http")
            if bulk and ref and p["system"] != "plain" and p["mbps"]:
                notes += f"; {p['mbps'] / ref:.1%} of plain"
            if bulk and "cycles_per_byte" in det:
                notes += f"; {det['cycles_per_byte']:.2f} cycles/B"
                if "tunnel_cycles_per_byte" in det:
                    notes += f" ({det['tunnel_cycles_per_byte']:.2f} in mpt)"
            rng = (
                f"{_fmt(p['mbps'])} ({_fmt(p['mbps_min'])}–{_fmt(p['mbps_max'])})"
                if p["mbps"] is not None
                else "–"
            )
            out.append(
                f"| {p['system']} | {p['ip']} | {p['links']} | {p['traffic']} | {rng} | "
                f"{_fmt(p['efficiency'], True)} | {process_cpu(p)} | {notes} |"
            )
        out.append("")
        for img in sorted(d.glob("*.png")):
            out.append(f"![{img.stem}]({images_rel / d.name / img.name})")
        out.append("")
    return "\n".join(out)
