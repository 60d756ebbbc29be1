"""Plots in the spirit of the MPT papers' figures, as PNG and SVG:

* throughput against the number of links, one line per system, with the
  sum-of-links line;
* efficiency (throughput / sum of links) against the number of links;
* CPU (sum over the involved processes) against the number of links;
* throughput over time for runs with events, each cut, restore or reshape
  marked;
* one-way delay CDFs of VoIP streams, every system on one figure;
* the inner TCP over time (window and round trip at the sender, from
  `ss -tin`, `tcpinfo.py`), every system on one figure, for runs with
  `run.timeline = true`.

Invariant: plots are drawn from raw.json only; matplotlib runs headless.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from .results import process_cpu  # noqa: E402
from .runner import label_ip  # noqa: E402

BUSY_NOTE = (
    "machine busy: CPU use of the whole machine during the run (every process,"
    " the emulator and traffic tools included); 100 = one core"
)

STYLE = {
    "mpt": ("tab:blue", "o"),
    "mptcp": ("tab:orange", "s"),
    "plain": ("tab:gray", "^"),
    "hook": ("tab:green", "d"),
    "mpt-insecure": ("tab:purple", "v"),
    "mpt-1w": ("tab:cyan", "P"),
    "mpt-parallel": ("tab:red", "X"),
    "mpt-recover": ("tab:olive", "D"),
    "mpt-norecover": ("tab:brown", "<"),
}


def _save(fig: Any, outdir: Path, name: str) -> list[Path]:
    paths = []
    for ext in ("png", "svg"):
        p = outdir / f"{name}.{ext}"
        fig.savefig(p, dpi=110, bbox_inches="tight")
        paths.append(p)
    plt.close(fig)
    return paths


def _series(points: list[dict[str, Any]], traffic: str, path_v: int, tunnel_v: int) -> dict:
    by: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for p in points:
        if p["traffic"] != traffic or p["mbps"] is None or p["system"] == "plain":
            continue
        if p["path_v"] != path_v or (p["system"] == "mpt" and p["tunnel_v"] != tunnel_v):
            continue
        by[p["system"]].append(p)
    for v in by.values():
        v.sort(key=lambda p: p["links"])
    return by


def _who(p: dict[str, Any]) -> str:
    return f"{p['system']} {label_ip(p['ip'])}"


def _setup(doc: dict[str, Any], links: list[int]) -> str:
    """Scenario, link rates and duration, for titles."""
    s = doc.get("setup") or {}
    rates = s.get("link_rates_mbit") or []
    shown = sorted({r for r in rates[: max(links, default=0)] if r})
    rate = (
        f"{shown[0]:g} Mbit/s links"
        if len(shown) == 1
        else ("links of " + "/".join(f"{r:g}" for r in shown) + " Mbit/s" if shown else "")
    )
    secs = f"{s['seconds']:g} s" if s.get("seconds") else ""
    return ", ".join(x for x in (doc.get("scenario", ""), rate, secs) if x)


def plot_all(doc: dict[str, Any], outdir: Path) -> list[Path]:
    pts = doc["points"]
    made: list[Path] = []
    combos = sorted({(p["tunnel_v"], p["path_v"]) for p in pts if p["system"] == "mpt"})
    traffics = sorted({p["traffic"] for p in pts if not p["traffic"].startswith("voip")})
    for tv, pv in combos:
        for tr in traffics:
            by = _series(pts, tr, pv, tv)
            if not by or max(len(v) for v in by.values()) < 2:
                continue
            links = sorted({p["links"] for v in by.values() for p in v})
            label = f"{_setup(doc, links)}\n{tr.upper()}, IPv{tv} tunnel over IPv{pv} paths"
            plain = [
                p
                for p in pts
                if p["system"] == "plain" and p["traffic"] == tr and p["path_v"] == pv and p["mbps"]
            ]
            # Throughput.
            fig, ax = plt.subplots(figsize=(6.4, 4))
            sums = {p["links"]: p["sum_mbit"] for v in by.values() for p in v}
            if any(sums.values()):
                ax.plot(links, [sums[n] for n in links], "k--", lw=1, label="sum of links")
            for sys_, ps in by.items():
                c, m = STYLE.get(sys_, ("tab:red", "x"))
                # Error bars only where repeats spread (one run has none).
                spread = any(
                    p["mbps_min"] is not None and p["mbps_max"] != p["mbps_min"] for p in ps
                )
                ax.errorbar(
                    [p["links"] for p in ps],
                    [p["mbps"] for p in ps],
                    yerr=[
                        [p["mbps"] - p["mbps_min"] for p in ps],
                        [p["mbps_max"] - p["mbps"] for p in ps],
                    ]
                    if spread
                    else None,
                    color=c,
                    marker=m,
                    capsize=3,
                    label=sys_,
                )
            if plain:
                ax.axhline(plain[0]["mbps"], color="tab:gray", ls=":", label="plain, 1 link")
            ax.set(xlabel="number of links", ylabel="Mbit/s", title=label)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_ylim(bottom=0)
            ax.grid(alpha=0.3)
            ax.legend()
            made += _save(fig, outdir, f"throughput-{tr}-{tv}in{pv}")
            # Efficiency.
            fig, ax = plt.subplots(figsize=(6.4, 4))
            for sys_, ps in by.items():
                c, m = STYLE.get(sys_, ("tab:red", "x"))
                eff = [(p["links"], p["efficiency"] * 100) for p in ps if p["efficiency"]]
                if eff:
                    ax.plot(*zip(*eff, strict=False), color=c, marker=m, label=sys_)
            ax.axhline(100, color="k", ls="--", lw=1)
            ax.set(
                xlabel="number of links", ylabel="% of the sum of links", title=label, ylim=(0, 110)
            )
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.grid(alpha=0.3)
            ax.legend()
            made += _save(fig, outdir, f"efficiency-{tr}-{tv}in{pv}")
            # CPU.
            fig, ax = plt.subplots(figsize=(6.4, 4))
            for sys_, ps in by.items():
                c, m = STYLE.get(sys_, ("tab:red", "x"))
                cpu = [(p["links"], process_cpu(p)) for p in ps if p.get("cpu_pct")]
                busy = [
                    (p["links"], p["cpu_pct"].get("system_busy", 0)) for p in ps if p.get("cpu_pct")
                ]
                if cpu and any(v for _, v in cpu):
                    ax.plot(*zip(*cpu, strict=False), color=c, marker=m, label=f"{sys_} processes")
                if busy:
                    ax.plot(
                        *zip(*busy, strict=False),
                        color=c,
                        marker=m,
                        ls=":",
                        label=f"{sys_}: machine busy",
                    )
            ax.set(xlabel="number of links", ylabel="CPU % (100 = one core)", title=label)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_ylim(bottom=0)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
            fig.text(0.01, -0.02, BUSY_NOTE, fontsize=7, ha="left", va="top", wrap=True)
            made += _save(fig, outdir, f"cpu-{tr}-{tv}in{pv}")
    # One-way delay CDFs of the VoIP streams, every system on one figure.
    for tr in sorted({p["traffic"] for p in pts if p["traffic"].startswith("voip")}):
        curves = [
            p for p in pts if p["traffic"] == tr and (p.get("details") or {}).get("owd_cdf_ms")
        ]
        if not curves:
            continue
        fig, ax = plt.subplots(figsize=(7, 4))
        for p in curves:
            cdf = p["details"]["owd_cdf_ms"]
            ms = [v for _, v in cdf]
            frac = [q / 100 for q, _ in cdf]
            colour = STYLE.get(p["system"], ("tab:gray", ""))[0]
            ax.plot(ms, frac, color=colour, label=_who(p))
        ax.set(
            xlabel="one-way delay (ms; both namespaces share one clock)",
            ylabel="fraction of packets",
            title=(
                f"{_setup(doc, [p['links'] for p in curves])}\n"
                f"{tr}: one-way delay of the VoIP stream"
            ),
        )
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        made += _save(fig, outdir, f"owd-cdf-{tr}")
    made += _plot_inner_tcp(doc, outdir)
    # Timelines of runs with events (cut, restore, shape).
    for p in pts:
        det = p.get("details") or {}
        if "timeline" not in det:
            continue
        fig, ax = plt.subplots(figsize=(7, 3.5))
        t, m = zip(*det["timeline"], strict=False) if det["timeline"] else ((), ())
        ax.step(
            t,
            m,
            where="post",
            color=STYLE.get(p["system"], ("tab:red", ""))[0],
            label="inner TCP (iperf3)",
        )
        # What each path carried (the sender's byte counters; encapsulated).
        pt = det.get("path_timeline") or {}
        for name, series in (pt.get("mbps") or {}).items():
            ax.plot(pt["t"], series, lw=0.9, ls=":", label=f"path {name}")
        colours = {"cut": "red", "restore": "green", "shape": "darkorange"}
        for ev in det.get("events", []):
            new = ", ".join(
                f"{k} {ev[k]:g}"
                for k in ("rate_mbit", "delay_ms", "jitter_ms", "loss")
                if ev.get(k) is not None
            )
            ax.axvline(
                ev["at_s"],
                color=colours.get(ev["action"], "gray"),
                ls="--",
                label=f"link {ev['link']} {ev['action']}" + (f": {new}" if new else ""),
            )
        after = (
            f"back to 85 % in {det.get('recovery_s')} s, longest stall "
            f"{det.get('longest_stall_s')} s"
            if det.get("rates_after_shape")
            else f"outage {det.get('outage_s')} s"
        )
        ax.set(
            xlabel="seconds",
            ylabel="Mbit/s",
            title=f"{_setup(doc, [p['links']])}\n{_who(p)}, {p['links']} links, {after}",
        )
        ax.grid(alpha=0.3)
        ax.legend()
        tag = label_ip(p["ip"]).replace("IPv", "v")
        made += _save(fig, outdir, f"{p['scenario']}-{p['system']}-{tag}-{p['links']}")
    return made


def _plot_inner_tcp(doc: dict[str, Any], outdir: Path) -> list[Path]:
    """Per link count and traffic, the window and round trip of each
    system's inner TCP over time (`details.tcp_timeline`)."""
    made: list[Path] = []
    groups: dict[tuple[int, str], list[dict[str, Any]]] = defaultdict(list)
    for p in doc["points"]:
        if (p.get("details") or {}).get("tcp_timeline"):
            groups[(p["links"], p["traffic"])].append(p)
    for (links, tr), ps in sorted(groups.items()):
        fig, (win, rtt) = plt.subplots(2, 1, figsize=(7, 5.5), sharex=True)
        for p in ps:
            rows = p["details"]["tcp_timeline"]
            colour = STYLE.get(p["system"], ("tab:red", ""))[0]
            t = [r["t"] for r in rows]
            win.plot(t, [r.get("cwnd_bytes", 0) / 1e6 for r in rows], color=colour, label=_who(p))
            rt = [(r["t"], r["rtt_ms"]) for r in rows if r.get("rtt_ms") is not None]
            if rt:
                rtt.plot(*zip(*rt, strict=True), color=colour, label=_who(p))
        win.set(
            ylabel="window, MB",
            title=f"{_setup(doc, [links])}\n{tr.upper()}: the inner TCP at the sender (ss)",
        )
        rtt.set(xlabel="seconds", ylabel="smoothed round trip, ms")
        for ax in (win, rtt):
            ax.set_ylim(bottom=0)
            ax.grid(alpha=0.3)
        win.legend(fontsize=8)
        made += _save(fig, outdir, f"inner-tcp-{tr}-{links}")
    return made
