"""`mptlab sweep`: link sets nobody tuned to, drawn from a seeded
generator, each run with mpt and kernel MPTCP in the same topology.

Each case has 2–4 links; each link a rate of 5–200 Mbit/s (log-uniform),
a one-way delay of 2–80 ms, jitter of 0–8 ms (none in a third of the
links), loss of 0–3 % (none in half of them); a case sometimes has a link
that follows a capacity trace (made by the generator of `trace.py` from
the case's seed) and sometimes a capacity step (a link drops to a fifth
to a half of its rate halfway through the transfer). One TCP transfer per
system, on a fresh tunnel, order alternated case by case (mpt first in
even cases, MPTCP first in odd ones).

Where the bottleneck sits: by default each link's rate is a tbf on both
hosts' own ends (as every lab scenario has it), so a kernel TCP sender is
held back by its own qdisc (TCP Small Queues) and loses nothing at the
bottleneck, while mpt's inner TCP meets the tunnel's queue instead. With
`remote` (`--remote-bottleneck`) the emulator in the middle carries every
fixed rate (`Shape.serialize`): the bottleneck is a box of its own, as a
modem or an ISP's shaper is, for every system alike. Traces are carried
by the emulator either way.

It prints, per case and in all, mpt's share of capacity (against what the
links offered while it ran) and the ratio mpt/MPTCP, with their p10 and
median, and writes `sweep.json` and `sweep.md` in the output folder.

Invariants: a case is a function of (seed, index) alone; every case is
run whatever the others did (a failure is recorded, not raised).
"""

from __future__ import annotations

import json
import math
import random
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from . import results
from .netns import Shape
from .runner import Runner
from .scenario import Event, Scenario
from .tcpinfo import tcp_line, tcp_summary
from .trace import generate


@dataclass
class Case:
    index: int
    shapes: list[Shape]
    step: Event | None = None
    notes: list[str] = field(default_factory=list)

    def describe(self) -> str:
        parts = []
        for s in self.shapes:
            rate = "trace" if s.trace else f"{s.rate_mbit:.0f}M"
            extra = f"±{s.jitter_ms:.1f}" if s.jitter_ms else ""
            loss = f" {s.loss:.1%}" if s.loss else ""
            parts.append(f"{rate}/{s.delay_ms:.0f}{extra}ms{loss}")
        step = f", link {self.step.link} -> {self.step.rate_mbit:.0f}M" if self.step else ""
        return " + ".join(parts) + step


def draw(seed: int, index: int, seconds: float, workdir: Path) -> Case:
    """Case `index` of the sweep with seed `seed` (module documentation)."""
    rnd = random.Random(seed * 1_000_003 + index)
    shapes = []
    notes = []
    for _ in range(rnd.randint(2, 4)):
        rate = math.exp(rnd.uniform(math.log(5), math.log(200)))
        jitter = 0.0 if rnd.random() < 1 / 3 else rnd.uniform(0, 8)
        loss = 0.0 if rnd.random() < 0.5 else rnd.uniform(0, 0.03)
        delay = rnd.uniform(2, 80)
        shapes.append(
            Shape(
                rate_mbit=round(rate, 1),
                delay_ms=round(delay, 1),
                jitter_ms=round(jitter, 1),
                loss=round(loss, 4),
            )
        )
    if rnd.random() < 0.3:
        i = rnd.randrange(len(shapes))
        s = shapes[i]
        mean = min(max(s.rate_mbit or 10, 2), 30)
        path = workdir / f"case{index}-link{i + 1}.trace"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            generate(
                rnd.randrange(1 << 30),
                seconds=max(int(seconds) + 10, 30),
                mean_mbps=mean,
                low_mbps=min(1.0, mean),
                high_mbps=max(30.0, mean),
                outages=rnd.choice([0, 0, 1]),
            )
        )
        shapes[i] = Shape(
            trace=str(path), delay_ms=s.delay_ms, jitter_ms=s.jitter_ms, loss=s.loss, queue_ms=100
        )
        notes.append(f"link {i + 1} follows a trace (mean {mean:.0f} Mbit/s)")
    step = None
    fixed = [i for i, s in enumerate(shapes) if not s.trace]
    if fixed and rnd.random() < 0.3:
        i = rnd.choice(fixed)
        new = round((shapes[i].rate_mbit or 10) * rnd.uniform(0.2, 0.5), 1)
        step = Event(at_s=seconds / 2, action="shape", link=i + 1, rate_mbit=new)
        # A rate change needs the link emulated: give it a delay at least.
        notes.append(f"link {i + 1} drops to {new} Mbit/s at {seconds / 2:g} s")
    return Case(index, shapes, step, notes)


def remote_bottleneck(case: Case) -> Case:
    """`case` with every fixed rate carried by the emulator in the middle
    instead of the hosts' tbf (module documentation); traces already are."""
    shapes = [s if s.trace else replace(s, serialize=True) for s in case.shapes]
    return replace(case, shapes=shapes)


def _scenario(case: Case, seconds: float, systems: list[str], timeline: bool = False) -> Scenario:
    return Scenario(
        name=f"sweep-case{case.index}",
        description="",
        link_counts=[len(case.shapes)],
        shapes=case.shapes,
        shape=Shape(),
        systems=systems,
        ip=["4in4"],
        traffic=["tcp"],
        seconds=seconds,
        events=[case.step] if case.step else [],
        timeline=timeline,
    )


def _write_case(
    work: Path,
    name: str,
    seed: int,
    index: int,
    seconds: float,
    case: Case,
    points: list[Any],
    started: str,
    say: Callable[[str], None],
) -> None:
    """Each case's raw.json, as `mptlab run` writes it (for `mptlab
    timeline` and `mptlab plot` on the case's folder). A file that cannot
    be written costs the file, not the case's figures."""
    try:
        results.write(
            work,
            name,
            f"mptlab sweep --seed {seed} --cases {index} --seconds {seconds:g}",
            points,
            started,
            {"seconds": seconds, "case": case.describe()},
        )
    except (OSError, TypeError, ValueError) as e:
        say(f"  (no raw.json for case {index}: {type(e).__name__}: {e})")


def capacity(case: Case, seconds: float, point: Any) -> float:
    """What the links offered during the transfer, Mbit/s: the fixed
    links' rates (less what a step took for the rest of the run) and what
    a trace offered then (the runner's count)."""
    fixed = sum(s.rate_mbit or 0.0 for s in case.shapes if not s.trace)
    if case.step is not None and case.step.rate_mbit is not None:
        old = case.shapes[case.step.link - 1].rate_mbit or 0.0
        fixed -= (old - case.step.rate_mbit) * max(seconds - case.step.at_s, 0) / seconds
    traced = point.details.get("offered_median_mbit")
    if traced is not None:
        # The runner's count holds the fixed links at their starting rate.
        traced -= sum(s.rate_mbit or 0.0 for s in case.shapes if not s.trace)
    return max(fixed + (traced or 0.0), 1e-9)


def pct(xs: list[float], q: float) -> float | None:
    """The q-quantile (nearest rank), None for no data."""
    if not xs:
        return None
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


def run(
    seed: int,
    count: int,
    seconds: float,
    outdir: Path,
    say: Callable[[str], None] = print,
    base: bool = False,
    repeats: int = 1,
    cases: list[int] | None = None,
    timeline: bool = False,
    remote: bool = False,
) -> dict[str, Any]:
    """The sweep; with `base`, the previous build ($MPT_BASE_BIN, as
    `mpt-base`) runs in each case too, between the two others, and the
    order of all three alternates from case to case. With `repeats` > 1
    each case runs that many times (each a fresh tunnel, the order
    alternated from repeat to repeat) and each system's share is the
    median of its transfers: one transfer per case moved a case by up to
    14 points between two sweeps of the same build. With `cases`, only
    those indices run (each is the case it is in the whole sweep: to
    rerun the ones that lost). With `timeline`, each transfer records the
    mpt sender's paths and the inner TCP (`mptlab timeline` on a case's
    folder), and each case prints what held each system's TCP back.
    With `remote`, the emulator carries every fixed rate (module
    documentation)."""
    outdir.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in cases if cases else range(count):
        case = draw(seed, i, seconds, outdir / "traces")
        if remote:
            case = remote_bottleneck(case)
        first = ["mpt", "mpt-base", "mptcp"] if base else ["mpt", "mptcp"]
        order = first[::-1] if i % 2 == 1 else first
        say(f"case {i}: {case.describe()}" + (f" ({'; '.join(case.notes)})" if case.notes else ""))
        runs: dict[str, list[float]] = {}
        tcp: dict[str, list[dict[str, Any]]] = {}
        errors = {}
        for r in range(repeats):
            this = order[::-1] if r % 2 == 1 else order
            sc = _scenario(case, seconds, this, timeline)
            work = outdir / f"case{i}" / f"r{r}" if repeats > 1 else outdir / f"case{i}"
            try:
                started = datetime.now(UTC).isoformat(timespec="seconds")
                points = Runner(sc, work, progress=lambda m: None).run()
                for p in points:
                    if p.mbps is not None:
                        runs.setdefault(p.system, []).append(p.mbps / capacity(case, seconds, p))
                    t = tcp_summary(p.details.get("tcp_timeline"))
                    if t is not None:
                        tcp.setdefault(p.system, []).append(t)
                    if p.error:
                        errors[p.system] = p.error
                _write_case(work, sc.name, seed, i, seconds, case, points, started, say)
            except Exception as e:  # noqa: BLE001 - the next case runs all the same
                errors["case"] = f"{type(e).__name__}: {e}"
        share = {k: statistics.median(v) for k, v in runs.items() if v}
        m, c, b = share.get("mpt"), share.get("mptcp"), share.get("mpt-base")
        ratio = m / c if m is not None and c else None
        row = {
            "case": i,
            "links": case.describe(),
            "notes": case.notes,
            "order": order,
            "mpt_share": m,
            "mptcp_share": c,
            "ratio": ratio,
            "errors": errors,
        }
        if repeats > 1:
            row["runs"] = runs
        if tcp:
            row["tcp"] = tcp
        if base:
            row["base_share"] = b
            row["base_ratio"] = m / b if m is not None and b else None
        rows.append(row)
        say(
            f"  mpt {m if m is None else f'{m:.1%}'}, MPTCP {c if c is None else f'{c:.1%}'}, "
            f"mpt/MPTCP {ratio if ratio is None else f'{ratio:.3f}'}"
            + (f", previous build {_f(b, '.1%')}" if base else "")
            + (f"; errors {errors}" if errors else "")
        )
        if tcp:
            names = {"mpt": "mpt", "mptcp": "MPTCP", "mpt-base": "previous"}
            say(
                "  inner TCP: "
                + "; ".join(tcp_line(names.get(k, k), v[-1]) for k, v in sorted(tcp.items()))
            )
    summary = summarize(seed, seconds, repeats, cases, rows, base)
    if remote:
        summary["bottleneck"] = "remote"
    (outdir / "sweep.json").write_text(json.dumps(summary, indent=1))
    (outdir / "sweep.md").write_text(markdown(summary))
    say(summary_line(summary))
    return summary


def summarize(
    seed: int,
    seconds: float,
    repeats: int,
    cases_run: list[int] | None,
    rows: list[dict[str, Any]],
    base: bool,
) -> dict[str, Any]:
    """The sweep's summary of its per-case `rows` (as `run` makes them):
    p10 and median of mpt's share and of mpt/MPTCP, and how many cases
    mpt is at or above MPTCP in; with `base`, the same for the previous
    build."""
    shares = [r["mpt_share"] for r in rows if r["mpt_share"] is not None]
    ratios = [r["ratio"] for r in rows if r["ratio"] is not None]
    summary: dict[str, Any] = {
        "seed": seed,
        "count": len(rows),
        "cases_run": cases_run,
        "seconds": seconds,
        "repeats": repeats,
        "mpt_share_p10": pct(shares, 0.1),
        "mpt_share_median": statistics.median(shares) if shares else None,
        "ratio_p10": pct(ratios, 0.1),
        "ratio_median": statistics.median(ratios) if ratios else None,
        "mpt_at_least_mptcp": sum(1 for r in ratios if r >= 1.0),
        "compared": len(ratios),
        "cases": rows,
    }
    if base:
        bases = [r["base_share"] for r in rows if r.get("base_share") is not None]
        vs = [r["base_ratio"] for r in rows if r.get("base_ratio") is not None]
        summary["base"] = {
            "share_p10": pct(bases, 0.1),
            "share_median": statistics.median(bases) if bases else None,
            "ratio_median": statistics.median(vs) if vs else None,
            "mpt_at_least_base": sum(1 for r in vs if r >= 1.0),
            "compared": len(vs),
        }
    return summary


def _f(v: float | None, spec: str) -> str:
    return "–" if v is None else format(v, spec)


def summary_line(s: dict[str, Any]) -> str:
    line = (
        f"sweep seed {s['seed']}, {s['count']} cases"
        + _repeats(s)
        + (", rates carried in the middle" if s.get("bottleneck") == "remote" else "")
        + ": mpt's share of capacity p10 "
        f"{_f(s['mpt_share_p10'], '.1%')}, median {_f(s['mpt_share_median'], '.1%')}; "
        f"mpt/MPTCP p10 {_f(s['ratio_p10'], '.3f')}, median {_f(s['ratio_median'], '.3f')}; "
        f"mpt >= MPTCP in {s['mpt_at_least_mptcp']} of {s['compared']}"
    )
    if b := s.get("base"):
        line += (
            f"; the previous build's share p10 {_f(b['share_p10'], '.1%')}, median "
            f"{_f(b['share_median'], '.1%')}, mpt/previous median {_f(b['ratio_median'], '.3f')}, "
            f"mpt >= previous in {b['mpt_at_least_base']} of {b['compared']}"
        )
    return line


def _repeats(s: dict[str, Any]) -> str:
    """How many transfers each case's figure is the median of."""
    lo, hi = s.get("repeats", 1), s.get("transfers_max", s.get("repeats", 1))
    if s.get("merged_from"):
        n = f"{lo}" if lo == hi else f"{lo}-{hi}"
        return f" (median of {n} transfers each, {len(s['merged_from'])} sweeps merged)"
    return f" (median of {lo} each)" if lo > 1 else ""


def markdown(s: dict[str, Any]) -> str:
    base = "base" in s
    if s.get("merged_from"):
        head = "`mptlab sweep-merge --out OUT " + " ".join(s["merged_from"]) + "`"
    else:
        head = (
            f"`mptlab sweep --seed {s['seed']} "
            + (
                f"--cases {','.join(map(str, s['cases_run']))}"
                if s.get("cases_run")
                else f"--count {s['count']}"
            )
            + f" --seconds {s['seconds']:g}"
            + (f" --repeats {s['repeats']}" if s.get("repeats", 1) > 1 else "")
            + (" --base" if base else "")
            + (" --remote-bottleneck" if s.get("bottleneck") == "remote" else "")
            + "`"
        )
    lines = [
        head,
        "",
        "| case | links (rate/delay±jitter loss) | mpt | MPTCP | mpt/MPTCP |"
        + (" previous build | mpt/previous |" if base else ""),
        "|---|---|---|---|---|" + ("---|---|" if base else ""),
    ]
    for r in s["cases"]:
        lines.append(
            f"| {r['case']} | {r['links']} | {_f(r['mpt_share'], '.1%')} | "
            f"{_f(r['mptcp_share'], '.1%')} | {_f(r['ratio'], '.3f')} |"
            + (
                f" {_f(r.get('base_share'), '.1%')} | {_f(r.get('base_ratio'), '.3f')} |"
                if base
                else ""
            )
        )
    lines += ["", summary_line(s), ""]
    return "\n".join(lines)
