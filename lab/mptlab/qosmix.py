"""The hybrid node's traffic mix (Masek et al.), for the `qos` scenario,
and the ED-SGSN thesis's overload of a high-precedence class
(`qos-precedence`).

At once, from A to B through the system under test:

* VoIP: G.711-like, 160-byte payload every 20 ms, marked EF;
* M2M: 50-byte messages, ten a second (the paper's 50 bytes every 30 s,
  made frequent enough that a loss shows in a short run), port 7200;
* bulk: `streams` TCP flows (iperf3 -P), one class;
* a misbehaving UDP flow at `flood_factor` times the links' capacity.

What comes back: VoIP one-way delay and loss, M2M loss, each bulk flow's
rate with Jain's fairness index, and the flood's delivered rate. The rates
are the receiver's over the window in which VoIP and M2M run (bulk and
flood have filled the tunnel by then), and over the whole run beside them
(which includes the flood alone while the TCP flows connect).

Precedence (`run_precedence`): a UDP flow on `HIGH_PORT` at `high_share`
of the links' capacity, which the scenario puts in a class of its own
ahead of the rest, beside a UDP flow that brings the offer to `overload`
times the capacity. The high flow starts once the low one has filled the
tunnel; what comes back is each flow's loss and delivered rate.

Invariants: every part is bounded in time (subprocess timeouts), and a
part that fails is reported as missing, not as zero.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from .netns import Topology
from .probe import DSCP_EF, stream, voip
from .traffic import iperf3, window_streams_mbps

M2M_PORT = 7200
BULK_PORT = 5202
FLOOD_PORT = 5203
FLOOD_PAYLOAD = 1200
HIGH_PORT = 5204


def jain(xs: list[float]) -> float | None:
    """Jain's fairness index: 1 when all are equal, 1/n when one takes all."""
    if not xs or not any(xs):
        return None
    return sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs))


def run_mix(
    topo: Topology,
    addr: str,
    *,
    seconds: float,
    capacity_mbit: float,
    streams: int = 4,
    flood_factor: float = 5.0,
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    lead = 2.0  # bulk and flood fill the tunnel before the measured streams start

    def bulk() -> None:
        try:
            r = iperf3(
                topo,
                addr,
                seconds=seconds + 2 * lead,
                streams=streams,
                port=BULK_PORT,
                server_intervals=True,
            )
            rates = [
                s["receiver"]["bits_per_second"] / 1e6
                for s in (r.raw or {}).get("end", {}).get("streams", [])
                if "receiver" in s
            ]
            retrans = [
                int(s["sender"].get("retransmits", 0))
                for s in (r.raw or {}).get("end", {}).get("streams", [])
                if "sender" in s
            ]
            out["bulk"] = {
                "mbps": r.mbps,
                "streams_mbps": rates,
                "window_streams_mbps": window_streams_mbps(r.raw, lead, lead + seconds),
                "jain": jain(rates),
                "retransmits": retrans,
            }
        except Exception as e:  # noqa: BLE001 - reported as missing
            out["bulk_error"] = str(e)

    def flood() -> None:
        rate = capacity_mbit * flood_factor
        try:
            r = iperf3(
                topo,
                addr,
                udp=True,
                rate=f"{rate:.0f}M",
                length=FLOOD_PAYLOAD,
                seconds=seconds + 2 * lead,
                port=FLOOD_PORT,
                window="4M",
                server_intervals=True,
            )
            w = window_streams_mbps(r.raw, lead, lead + seconds)
            out["flood"] = {
                "offered_mbit": rate,
                "mbps": r.mbps,
                "window_mbps": sum(w) if w else None,
                "lost_percent": r.lost_percent,
            }
        except Exception as e:  # noqa: BLE001
            out["flood_error"] = str(e)

    def m2m() -> None:
        try:
            out["m2m"] = stream(
                topo, addr, count=int(seconds * 10), pps=10, size=50, port=M2M_PORT, dscp=0
            )
        except Exception as e:  # noqa: BLE001
            out["m2m_error"] = str(e)

    background = [threading.Thread(target=f) for f in (bulk, flood)]
    for t in background:
        t.start()
    time.sleep(lead)
    m = threading.Thread(target=m2m)
    m.start()
    try:
        out["voip"] = voip(topo, addr, seconds=seconds)
    except Exception as e:  # noqa: BLE001
        out["voip_error"] = str(e)
    for t in [m, *background]:
        t.join(timeout=seconds + 90)
    return out


def run_precedence(
    topo: Topology,
    addr: str,
    *,
    seconds: float,
    capacity_mbit: float,
    overload: float = 1.25,
    high_share: float = 0.5,
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    lead = 2.0  # the low flow fills the tunnel before the high one starts

    def low(mbit: float) -> None:
        try:
            r = iperf3(
                topo,
                addr,
                udp=True,
                rate=f"{mbit:.1f}M",
                length=FLOOD_PAYLOAD,
                seconds=seconds + 2 * lead,
                port=FLOOD_PORT,
                window="4M",
            )
            out["low"] = {"offered_mbit": mbit, "mbps": r.mbps, "lost_percent": r.lost_percent}
        except Exception as e:  # noqa: BLE001 - reported as missing
            out["low_error"] = str(e)

    low_mbit = capacity_mbit * (overload - high_share)
    t = threading.Thread(target=low, args=(low_mbit,))
    t.start()
    time.sleep(lead)
    # The high flow counts its losses by sequence numbers, with the
    # receiver up before the first packet (iperf3's UDP test loses a few
    # of its first packets at tens of Mbit/s even on loopback:
    # esnet/iperf#799).
    high_mbit = capacity_mbit * high_share
    pps = high_mbit * 1e6 / 8 / FLOOD_PAYLOAD
    try:
        high = stream(
            topo, addr, count=int(pps * seconds), pps=pps, size=FLOOD_PAYLOAD, port=HIGH_PORT
        )
    except Exception as e:  # noqa: BLE001
        high, out["high_error"] = {}, str(e)
    t.join(timeout=seconds + 90)
    lo = out.get("low", {})
    return {
        "overload": overload,
        "high_offered_mbit": high_mbit,
        "high_mbps": high.get("mbps"),
        "high_lost": high.get("lost"),
        "high_lost_percent": None if high.get("loss") is None else high["loss"] * 100,
        "high_owd_mean_ms": high.get("owd_mean_ms"),
        "high_owd_p99_ms": high.get("owd_p99_ms"),
        "low_offered_mbit": lo.get("offered_mbit"),
        "low_mbps": lo.get("mbps"),
        "low_lost_percent": lo.get("lost_percent"),
        **{k: v for k, v in out.items() if k.endswith("_error")},
    }


def share_of_fair(streams: list[float] | None, flood_mbps: float | None) -> float | None:
    """The well-behaved flows' mean rate over their fair share: what the
    bulk streams and the flood delivered together, split equally among them
    (1.0: the flood took no more than a TCP flow)."""
    if not streams or flood_mbps is None:
        return None
    fair = (sum(streams) + flood_mbps) / (len(streams) + 1)
    return (sum(streams) / len(streams)) / fair if fair > 0 else None


def summary(mix: dict[str, Any]) -> dict[str, Any]:
    """The figures of one run, flat, for the results table."""
    v, m2m = mix.get("voip", {}), mix.get("m2m", {})
    bulk, fl = mix.get("bulk", {}), mix.get("flood", {})
    # The shares while VoIP runs; the whole run's where the window is missing.
    streams = bulk.get("window_streams_mbps") or bulk.get("streams_mbps")
    flood = fl.get("window_mbps") if bulk.get("window_streams_mbps") else None
    flood = fl.get("mbps") if flood is None else flood
    return {
        "voip_owd_mean_ms": v.get("owd_mean_ms"),
        "voip_owd_p99_ms": v.get("owd_p99_ms"),
        "voip_jitter_ms": v.get("jitter_ms"),
        "voip_loss": v.get("loss"),
        "m2m_loss": m2m.get("loss"),
        "m2m_owd_mean_ms": m2m.get("owd_mean_ms"),
        "bulk_mbps": sum(streams) if streams else bulk.get("mbps"),
        "bulk_streams_mbps": streams,
        "bulk_jain": jain(streams) if streams else None,
        "bulk_retransmits": bulk.get("retransmits"),
        "bulk_share_of_fair": share_of_fair(streams, flood),
        "flood_mbps": flood,
        "run_bulk_mbps": bulk.get("mbps"),
        "run_bulk_jain": bulk.get("jain"),
        "run_bulk_share_of_fair": share_of_fair(bulk.get("streams_mbps"), fl.get("mbps")),
        "run_flood_mbps": fl.get("mbps"),
        "flood_offered_mbit": fl.get("offered_mbit"),
        "dscp_voip": DSCP_EF,
        **{k: v for k, v in mix.items() if k.endswith("_error")},
    }
