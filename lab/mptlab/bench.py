"""Microbenchmarks of the core (criterion), collected for the report.

`mptlab bench` runs `cargo bench -p mpt-core --bench core` and gathers
criterion's estimates (`target/criterion/**/new/estimates.json`) into
`DIR/bench.json`, which `mptlab report` renders as a table.

Invariant: only numbers criterion wrote during this run are collected (the
benchmark directories are read after the run; their `new` estimates are
the latest).
"""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .results import machine, run_header
from .util import repo_root

COMMAND = [
    "cargo",
    "bench",
    "-q",
    "-p",
    "mpt-core",
    "--bench",
    "core",
    "--",
    "--warm-up-time",
    "1",
    "--measurement-time",
    "2",
]


def collect(criterion_dir: Path) -> list[dict[str, Any]]:
    rows = []
    for bench in sorted(criterion_dir.glob("**/new/benchmark.json")):
        meta = json.loads(bench.read_text())
        est = json.loads((bench.parent / "estimates.json").read_text())
        ns = est["mean"]["point_estimate"]
        row: dict[str, Any] = {"id": meta["full_id"], "ns": round(ns, 2)}
        tp = meta.get("throughput") or {}
        if "Bytes" in tp:
            row["gib_per_s"] = round(tp["Bytes"] / ns / 1.073741824, 3)
        rows.append(row)
    return rows


def run(out: Path) -> dict[str, Any]:
    root = repo_root()
    started = datetime.now(UTC).isoformat(timespec="seconds")
    subprocess.run(COMMAND, cwd=root, check=True, timeout=1800, stdout=subprocess.DEVNULL)
    doc = {
        "scenario": "microbenchmarks",
        "command": " ".join(COMMAND),
        "machine": machine(),
        "started": started,
        "finished": datetime.now(UTC).isoformat(timespec="seconds"),
        "benchmarks": collect(root / "target" / "criterion"),
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(json.dumps(doc, indent=1))
    return doc


def markdown(doc: dict[str, Any]) -> list[str]:
    lines = [
        *run_header(doc),
        "| benchmark | time per iteration | throughput |",
        "|---|---|---|",
    ]
    for b in doc["benchmarks"]:
        tp = f"{b['gib_per_s']:.2f} GiB/s" if "gib_per_s" in b else ""
        lines.append(f"| {b['id']} | {b['ns']:.1f} ns | {tp} |")
    return [*lines, ""]
