"""Accuracy of the lab's link emulation (mpt-netem where the kernel has no
netem): delay, loss and rate, against their settings."""

from __future__ import annotations

import math

import pytest
from mptlab.netns import Shape, Topology, link_addr
from mptlab.probe import stream
from mptlab.traffic import iperf3, ping


@pytest.mark.parametrize("delay_ms", [2.0, 20.0])
def test_delay_accuracy_at_1k_and_10k_pps(delay_ms: float) -> None:
    with Topology(1) as base, Topology(1, shape=Shape(delay_ms=delay_ms)) as topo:
        dst = link_addr(1, "b", 4)
        ping(base, "a", dst, count=1)
        ping(topo, "a", dst, count=1)  # resolve ARP before measuring
        for pps, count in ((1000, 2000), (10_000, 10_000)):
            tol = max(0.2, 0.05 * delay_ms)
            ref = stream(base, dst, count=count, pps=pps)
            got = stream(topo, dst, count=count, pps=pps)
            # Medians: a stall of the 2-core host (its hypervisor) once held
            # a few hundred packets for 15 ms (p99 15.9 ms), moving the mean
            # by 0.45 ms while the emulator's delay was as set.
            added = got["owd_p50_ms"] - ref["owd_p50_ms"]
            if abs(added - delay_ms) > tol:
                # Under the whole suite on a slow 2-core host the
                # emulator's wake-ups once ran 0.216 ms late (alone:
                # within 0.05). Once more, and that one must hold.
                print(f"\ndelay {delay_ms} ms at {pps} pkt/s: added {added:.3f} ms; again")
                ref = stream(base, dst, count=count, pps=pps)
                got = stream(topo, dst, count=count, pps=pps)
                added = got["owd_p50_ms"] - ref["owd_p50_ms"]
            print(
                f"\ndelay {delay_ms} ms at {pps} pkt/s: added {added:.3f} ms (median; mean "
                f"{got['owd_mean_ms'] - ref['owd_mean_ms']:.3f}, tolerance {tol} ms), "
                f"p99 {got['owd_p99_ms']:.3f} ms, lost {got['lost']}"
            )
            assert got["lost"] == 0
            assert abs(added - delay_ms) <= tol


def test_loss_accuracy_over_10k_packets() -> None:
    loss = 0.02
    with Topology(1, shape=Shape(loss=loss)) as topo:
        dst = link_addr(1, "b", 4)
        ping(topo, "a", dst, count=3, interval=0.05)
        n = 10_000
        got = stream(topo, dst, count=n, pps=5000)
        sigma = math.sqrt(n * loss * (1 - loss))
        print(
            f"\nloss {loss:.0%}: lost {got['lost']} of {n} (expected {n * loss:.0f} ± "
            f"{3 * sigma:.0f})"
        )
        assert abs(got["lost"] - n * loss) <= 3 * sigma


@pytest.mark.parametrize("impaired", [False, True], ids=["tbf", "tbf+emulator"])
def test_rate_accuracy(impaired: bool) -> None:
    rate = 50.0
    shape = Shape(rate_mbit=rate, delay_ms=5.0 if impaired else 0.0)
    with Topology(1, shape=shape) as topo:
        payload = 1400
        r = iperf3(topo, link_addr(1, "b", 4), udp=True, rate="70M", length=payload, seconds=4)
        # tbf counts whole Ethernet frames: payload + UDP 8 + IPv4 20 + Ethernet 14.
        wire = r.mbps * (payload + 42) / payload
        print(
            f"\nrate {rate} Mbit/s ({'with' if impaired else 'without'} emulator): "
            f"{wire:.2f} Mbit/s on the wire ({wire / rate - 1:+.2%})"
        )
        assert abs(wire / rate - 1) <= 0.03


def test_a_trace_driven_link_carries_what_its_trace_offers(tmp_path) -> None:
    """A trace of one opportunity per millisecond (12 Mbit/s of IP packets)
    with an outage of 1 s in every 3 s: UDP offered above it is carried at
    the trace's rate counted in IP bytes, the lab's count of what the trace
    offered agrees, and a restart replays the trace from its start."""
    from mptlab.trace import load_trace

    lines = [str(ms) for ms in range(1, 3001) if not 1000 < ms <= 2000]
    trace = tmp_path / "t.down"
    trace.write_text("\n".join(lines) + "\n")
    shape = Shape(trace=str(trace), delay_ms=5.0, queue_ms=100)
    with Topology(1, shape=shape) as topo:
        topo.restart_traces()
        t0 = topo.emulator_t0_ns
        assert t0 is not None
        payload = 1400
        r = iperf3(topo, link_addr(1, "b", 4), udp=True, rate="20M", length=payload, seconds=6)
        ip = r.mbps * (payload + 28) / payload
        offered = load_trace(trace).offered_bits(0, 0, 6) / 6 / 1e6
        print(f"\ntrace: {ip:.2f} Mbit/s of IP packets carried, the trace offered {offered:.2f}")
        # 2 of every 3 s at 12 Mbit/s.
        assert abs(offered - 8.0) < 0.1
        assert abs(ip / offered - 1) <= 0.05, (ip, offered)
        topo.restart_traces()
        assert topo.emulator_t0_ns is not None and topo.emulator_t0_ns > t0
