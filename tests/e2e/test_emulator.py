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
            ref = stream(base, dst, count=count, pps=pps)
            got = stream(topo, dst, count=count, pps=pps)
            added = got["owd_mean_ms"] - ref["owd_mean_ms"]
            tol = max(0.2, 0.05 * delay_ms)
            print(
                f"\ndelay {delay_ms} ms at {pps} pkt/s: added {added:.3f} ms "
                f"(tolerance {tol} ms), p99 {got['owd_p99_ms']:.3f} ms, lost {got['lost']}"
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
