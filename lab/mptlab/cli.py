"""The `mptlab` command line.

Subcommands:
    demo    -- two namespaces, three emulated paths, the tunnel up, traffic
               through it, and `mpt status` of both ends;
    list    -- the scenarios shipped in lab/scenarios;
    run     -- run a scenario (with key=value overrides), write raw JSON,
               summary CSV and plots;
    plot    -- draw the plots of a results directory again;
    bench   -- run the core microbenchmarks (criterion) for the report;
    report  -- write docs/results.md from results directories.

Invariant: every subcommand tears down what it created, also on Ctrl-C
(Topology is a context manager and registered for exit cleanup).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

from . import bench, concentrate, measure, plot, qosmatrix, results, runner, scenario
from .daemon import TUNNEL_V4, TUNNEL_V6, PathOpts, TunnelOpts, start_pair
from .netns import Shape, Topology
from .traffic import iperf3, ping
from .util import mpt_binary, repo_root, run


def demo(args: argparse.Namespace) -> int:
    rates = [100, 50, 20]
    shapes = [Shape(rate_mbit=r) for r in rates]
    # No weights: mpt learns each path's capacity and delay (path-aware
    # sending, the default), with the default QoS classes.
    paths = [PathOpts(1, 4), PathOpts(2, 6), PathOpts(3, 4)]
    print(
        f"mpt demo: namespaces A and B joined by {len(rates)} links of "
        f"{' + '.join(str(r) for r in rates)} Mbit/s (tbf);"
    )
    print(
        "paths: link1 over IPv4, link2 over IPv6, link3 over IPv4 (capacities learned, "
        "not configured); tunnel carries IPv4 and IPv6\n"
    )
    with (
        Topology(len(rates), shape=shapes, prefix="mptdemo") as topo,
        tempfile.TemporaryDirectory(prefix="mptdemo-") as tmp,
    ):
        a, b = start_pair(topo, TunnelOpts(paths=paths), Path(tmp))
        print(
            f"tunnel up: A={TUNNEL_V4['a']}/{TUNNEL_V6['a']}  B={TUNNEL_V4['b']}/{TUNNEL_V6['b']}"
        )
        p4 = ping(topo, "a", TUNNEL_V4["b"], count=5)
        p6 = ping(topo, "a", TUNNEL_V6["b"], count=5)
        print(f"ping IPv4 through the tunnel: {p4.received}/{p4.sent}, avg {p4.avg_ms} ms")
        print(f"ping IPv6 through the tunnel: {p6.received}/{p6.sent}, avg {p6.avg_ms} ms")
        print(f"\niperf3 TCP A -> B through the tunnel for {args.seconds} s ...")
        result: dict = {}
        t = threading.Thread(
            target=lambda: result.setdefault(
                "r", iperf3(topo, TUNNEL_V4["b"], seconds=args.seconds)
            )
        )
        t.start()
        time.sleep(min(3.0, args.seconds / 2))
        print("=== mpt path list on A, during the transfer (live rates) ===")
        print(
            run([str(mpt_binary()), "path", "-s", str(a.control), "list"], ns=topo.ns("a")).stdout
        )
        t.join(timeout=args.seconds + 60)
        r = result["r"]
        total = sum(rates)
        print(
            f"  {r.mbps:.1f} Mbit/s = {r.mbps / total:.1%} of the {total} Mbit/s sum of the "
            f"links; TCP retransmissions: {r.retransmits}\n"
        )
        for side, peer in (("A (sender)", a), ("B (receiver)", b)):
            print(f"=== mpt status on {side} ===")
            out = run(
                [str(mpt_binary()), "status", "-s", str(peer.control)], ns=peer.topo.ns(peer.side)
            ).stdout
            print(out)
        a.stop()
        b.stop()
    print("demo finished; namespaces removed.")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    for sc in scenario.available():
        first = next((ln for ln in sc.description.splitlines() if ln.strip()), "")
        print(f"{sc.name:<16} {first.strip()}")
        if args.verbose:
            print(sc.description)
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    try:
        sc = scenario.load(args.scenario, args.overrides)
    except scenario.ScenarioError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    started = datetime.now(UTC)
    out = (
        Path(args.out)
        if args.out
        else Path("results") / (f"{sc.name}-{started.strftime('%Y%m%d-%H%M%S')}")
    )
    say = (lambda m: print(m, file=sys.stderr)) if args.json else print
    command = "mptlab run " + " ".join([args.scenario, *args.overrides])
    if sc.measure is not None:
        say(f"scenario {sc.name}: the instruments' accuracy -> {out}")
        missed = measure.run(sc.measure, out, command, say)
        if args.json:
            print(json.dumps({"scenario": sc.name, "out": str(out), "targets_missed": missed}))
        return 1 if missed else 0
    if sc.concentrator is not None:
        say(f"scenario {sc.name}: many clients, one server -> {out}")
        return concentrate.run_scenario(sc.concentrator, out, command, say)
    if sc.matrix is not None:
        say(f"scenario {sc.name}: QoS fairness matrix -> {out}")
        doc = qosmatrix.run(qosmatrix.Settings.from_dict(sc.matrix, sc.mpt_extra), out, say)
        if args.json:
            print(json.dumps({"scenario": sc.name, "out": str(out), "met": doc["met"]}))
        return 0
    r = runner.Runner(sc, out, progress=say)
    say(f"scenario {sc.name}: {r.total} measurements -> {out}")
    # Which tree's lab and binary run: `pip install -e` from another clone
    # (a CI run on a clean clone) silently moves the lab there.
    say(f"lab {repo_root()}, mpt {mpt_binary()}")
    t0 = time.monotonic()
    try:
        points = r.run()
    except KeyboardInterrupt:
        say("interrupted; writing what was measured")
        points = r.points
    setup = {
        "seconds": sc.seconds,
        "link_rates_mbit": sc.link_rates(max(sc.link_counts)),
        "tcp_congestion_control": sc.cc,
    }
    doc = results.write(out, sc.name, command, points, started.isoformat(timespec="seconds"), setup)
    made = plot.plot_all(doc, out)
    say(
        f"done in {time.monotonic() - t0:.0f} s: {out}/raw.json, summary.csv, "
        f"{len(made)} plot files"
    )
    if args.json:
        print(results.summary_line(doc))
    errors = [p for p in points if p.error]
    return 1 if errors and len(errors) == len(points) else 0


def cmd_plot(args: argparse.Namespace) -> int:
    d = Path(args.results)
    made = plot.plot_all(results.load(d), d)
    print(f"{len(made)} plot files in {d}")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    doc = bench.run(Path(args.out))
    for b in doc["benchmarks"]:
        print(f"{b['id']:<40} {b['ns']:>10.1f} ns")
    print(f"wrote {args.out}/bench.json")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    out = Path(args.out)
    img_root = out.parent / "results"
    docs = []
    sweeps = []
    for r in args.results:
        d = Path(r)
        if (d / "sweep.json").exists():
            # A sweep (mptlab sweep): its table, after the scenarios.
            dest = img_root / d.name
            dest.mkdir(parents=True, exist_ok=True)
            for f in ("sweep.json", "sweep.md"):
                if (d / f).resolve() != (dest / f).resolve():
                    shutil.copy(d / f, dest / f)
            sweeps.append(f"## sweep (`{d.name}`)\n\n" + (d / "sweep.md").read_text())
            continue
        doc = results.load(d)
        dest = img_root / d.name
        dest.mkdir(parents=True, exist_ok=True)
        files = [*d.glob("*.png"), *d.glob("*.svg")]
        for f in [*files, d / "summary.csv", d / "raw.json", d / "bench.json"]:
            if f.exists():
                shutil.copy(f, dest / f.name)
        docs.append((dest, doc))
    text = results.markdown(docs, Path("results"))
    out.write_text(text.rstrip("\n") + "\n\n" + "\n".join(sweeps) if sweeps else text)
    print(f"wrote {out} and {img_root}/")
    return 0


def cmd_ab(args: argparse.Namespace) -> int:
    from .ab import default_out
    from .ab import run as ab_run

    if not 1 <= args.runs <= 100:
        print("error: --runs within 1..100")
        return 2
    try:
        ab_run(
            args.scenario,
            args.a,
            args.b,
            args.runs,
            args.overrides,
            Path(args.out) if args.out else default_out(args.scenario),
        )
    except scenario.ScenarioError as e:
        print(f"error: {e}")
        return 2
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    from .sweep import run as sweep

    if not 1 <= args.count <= 1000 or not 1 <= args.seconds <= 600 or not 1 <= args.repeats <= 50:
        print("error: --count within 1..1000, --seconds within 1..600, --repeats within 1..50")
        return 2
    cases = None
    if args.cases:
        try:
            cases = [int(c) for c in args.cases.split(",")]
        except ValueError:
            cases = [-1]
        if any(not 0 <= c < 10_000 for c in cases) or len(set(cases)) != len(cases):
            print(f"error: --cases takes distinct numbers 0..9999, comma-separated: {args.cases!r}")
            return 2
    out = Path(args.out or f"results/sweep-{args.seed}-{time.strftime('%Y%m%d-%H%M%S')}")
    s = sweep(
        args.seed,
        args.count,
        args.seconds,
        out,
        base=args.base,
        repeats=args.repeats,
        cases=cases,
        timeline=args.timeline,
        remote=args.remote_bottleneck,
    )
    print(f"{out}/sweep.md, sweep.json")
    return 0 if s["compared"] or args.count == 0 else 1


def cmd_sweep_merge(args: argparse.Namespace) -> int:
    """Join sweeps of one seed: each case's share the median of all their
    transfers."""
    from .sweep import summary_line
    from .sweepmerge import MergeError, load, merge, write

    try:
        s = merge([load(Path(d)) for d in args.sweeps], [str(d) for d in args.sweeps])
    except MergeError as e:
        print(f"error: {e}")
        return 2
    write(s, Path(args.out))
    print(summary_line(s))
    print(f"{args.out}/sweep.md, sweep.json")
    return 0


def cmd_matrix_report(args: argparse.Namespace) -> int:
    from . import qosmatrix

    docs = []
    for d in args.dirs:
        f = Path(d) / "qos-matrix.json"
        try:
            docs.append(json.loads(f.read_text()))
        except (OSError, ValueError) as e:
            print(f"mptlab matrix-report: {f}: {e}", file=sys.stderr)
            return 2
    m = qosmatrix.merge(docs, args.repeats)
    text = qosmatrix.merged_markdown(m)
    if args.out:
        Path(args.out).write_text(text)
    print(text, end="")
    return 0


def cmd_timeline(args: argparse.Namespace) -> int:
    """Print the per-path timelines a run recorded (`run.timeline = true`)."""
    from .tcpinfo import render as render_tcp
    from .timeline import render

    raw = Path(args.results) / "raw.json"
    try:
        doc = json.loads(raw.read_text())
    except (OSError, ValueError) as e:
        print(f"mptlab timeline: {raw}: {e}", file=sys.stderr)
        return 2
    shown = 0
    for p in doc.get("points", []):
        det = p.get("details") or {}
        tl = det.get("paths_timeline")
        tcp = det.get("tcp_timeline")
        if not tl and not tcp:
            continue
        print(f"== {p.get('system')} {p.get('ip')} N={p.get('links')} {p.get('traffic')}")
        if tl:
            print(render(tl))
        back = det.get("paths_timeline_back")
        if back:
            print("-- the receiver's paths (the reverse direction: ACKs)")
            print(render(back))
        if tcp:
            print("-- the inner TCP at the sender (ss -tin)")
            print(render_tcp(tcp))
        shown += 1
    if not shown:
        print(f"mptlab timeline: {raw}: no timeline (run with run.timeline=true)", file=sys.stderr)
        return 1
    return 0


def cmd_trace(args: argparse.Namespace) -> int:
    from .trace import generate, parse

    if args.seconds < 1 or not 0 < args.low_mbit <= args.mean_mbit <= args.high_mbit:
        print("error: --seconds >= 1 and 0 < --low-mbit <= --mean-mbit <= --high-mbit")
        return 2
    text = generate(
        args.seed,
        seconds=args.seconds,
        mean_mbps=args.mean_mbit,
        low_mbps=args.low_mbit,
        high_mbps=args.high_mbit,
        outages=args.outages,
    )
    t = parse(text, args.out)
    Path(args.out).write_text(text)
    rates = sorted(t.rates_mbps(0, args.seconds))
    pct = [rates[int(q * (len(rates) - 1))] for q in (0.1, 0.5, 0.9)]
    print(
        f"{args.out}: {args.seconds} s, mean {t.mean_mbps():.1f} Mbit/s, 1-second rates "
        f"p10/p50/p90 {pct[0]:.1f}/{pct[1]:.1f}/{pct[2]:.1f} Mbit/s"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="mptlab", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("demo", help="tunnel over 3 emulated paths with traffic and status")
    d.add_argument("--seconds", type=float, default=5.0, help="iperf3 duration")
    d.set_defaults(func=demo)
    ls = sub.add_parser("list", help="show the scenarios")
    ls.add_argument("-v", "--verbose", action="store_true", help="with descriptions")
    ls.set_defaults(func=cmd_list)
    rn = sub.add_parser("run", help="run a scenario")
    rn.add_argument("scenario", help="name in lab/scenarios or a path to a .toml file")
    rn.add_argument("overrides", nargs="*", help="key=value (links=1,2 seconds=3 ...)")
    rn.add_argument("--out", help="results directory (default results/NAME-TIME)")
    rn.add_argument(
        "--json",
        action="store_true",
        help="progress to stderr; end with one JSON summary line on stdout",
    )
    rn.set_defaults(func=cmd_run)
    pl = sub.add_parser("plot", help="draw the plots of a results directory")
    pl.add_argument("results")
    pl.set_defaults(func=cmd_plot)
    bn = sub.add_parser("bench", help="run the core microbenchmarks (criterion)")
    bn.add_argument("--out", default="results/bench")
    bn.set_defaults(func=cmd_bench)
    tl = sub.add_parser("timeline", help="print the per-path timelines of a results directory")
    tl.add_argument("results")
    tl.set_defaults(func=cmd_timeline)
    rp = sub.add_parser("report", help="write docs/results.md from results directories")
    rp.add_argument("results", nargs="+")
    rp.add_argument("--out", default="docs/results.md")
    rp.set_defaults(func=cmd_report)
    tr = sub.add_parser("trace", help="write a synthetic LTE-like capacity trace (mahimahi format)")
    tr.add_argument("out", help="file to write")
    tr.add_argument("--seed", type=int, default=1)
    tr.add_argument("--seconds", type=int, default=120)
    tr.add_argument("--mean-mbit", type=float, default=10.0)
    tr.add_argument("--low-mbit", type=float, default=1.0)
    tr.add_argument("--high-mbit", type=float, default=30.0)
    tr.add_argument("--outages", type=int, default=2, help="gaps of no capacity")
    tr.set_defaults(func=cmd_trace)
    ab = sub.add_parser(
        "ab", help="A/B of two systems on a scenario, order alternated (ABBA), with the spread"
    )
    ab.add_argument("scenario")
    ab.add_argument("overrides", nargs="*", help="key=value, as for run")
    ab.add_argument("--a", default="mpt", help="system A (default mpt)")
    ab.add_argument("--b", default="mpt-base", help="system B (default mpt-base: MPT_BASE_BIN)")
    ab.add_argument("--runs", type=int, default=4, help="runs, each with both systems")
    ab.add_argument("--out", help="results directory (default results/ab-NAME-TIME)")
    ab.set_defaults(func=cmd_ab)
    mr = sub.add_parser(
        "matrix-report", help="merge qos-matrix runs: per cell its runs and worst figures"
    )
    mr.add_argument("dirs", nargs="+", help="results directories of qos-matrix runs")
    mr.add_argument("--repeats", type=int, default=3, help="runs a cell needs to count (3)")
    mr.add_argument("--out", help="also write the markdown table here")
    mr.set_defaults(func=cmd_matrix_report)
    sw = sub.add_parser("sweep", help="mpt and MPTCP on link sets drawn from a seeded generator")
    sw.add_argument("--seed", type=int, default=1)
    sw.add_argument("--count", type=int, default=30)
    sw.add_argument("--seconds", type=float, default=10.0, help="each transfer's length")
    sw.add_argument("--out", help="results directory (default results/sweep-SEED-TIME)")
    sw.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="transfers per system and case (fresh tunnels, order alternated); the median counts",
    )
    sw.add_argument(
        "--base",
        action="store_true",
        help="also run the previous build ($MPT_BASE_BIN) in each case, the order alternated",
    )
    sw.add_argument(
        "--remote-bottleneck",
        action="store_true",
        help="the emulator in the middle carries every link's rate, not tbf on the hosts' own ends",
    )
    sw.add_argument(
        "--cases",
        help="only these case numbers, comma-separated (each as in the whole sweep)",
    )
    sw.add_argument(
        "--timeline",
        action="store_true",
        help="record each transfer's paths and inner TCP, and print what held each TCP back",
    )
    sw.set_defaults(func=cmd_sweep)
    sm = sub.add_parser(
        "sweep-merge", help="join sweeps of one seed: each case the median of all their transfers"
    )
    sm.add_argument("sweeps", nargs="+", help="sweep result folders (each with its sweep.json)")
    sm.add_argument("--out", required=True, help="folder for the merged sweep.json and sweep.md")
    sm.set_defaults(func=cmd_sweep_merge)
    args = ap.parse_args(argv)
    try:
        return int(args.func(args))
    except results.NotResults as e:
        print(f"mptlab {args.cmd}: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted; namespaces removed", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
