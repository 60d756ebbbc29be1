"""The `mptlab` command line.

Subcommands:
    demo   -- two namespaces, three emulated paths, the tunnel up, traffic
              through it, and `mpt status` of both ends.

Invariant: every subcommand tears down what it created, also on Ctrl-C
(Topology is a context manager and registered for exit cleanup).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from .daemon import TUNNEL_V4, TUNNEL_V6, PathOpts, TunnelOpts, start_pair
from .netns import Shape, Topology
from .traffic import iperf3, ping
from .util import mpt_binary, run


def demo(args: argparse.Namespace) -> int:
    rates = [100, 50, 20]
    shapes = [Shape(rate_mbit=r) for r in rates]
    paths = [PathOpts(1, 4, weight=10), PathOpts(2, 6, weight=5), PathOpts(3, 4, weight=2)]
    print(
        f"mpt demo: namespaces A and B joined by {len(rates)} links of "
        f"{' + '.join(str(r) for r in rates)} Mbit/s (tbf);"
    )
    print(
        "paths: link1 over IPv4 (weight 10), link2 over IPv6 (weight 5), "
        "link3 over IPv4 (weight 2); tunnel carries IPv4 and IPv6\n"
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
        r = iperf3(topo, TUNNEL_V4["b"], seconds=args.seconds)
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="mptlab", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("demo", help="tunnel over 3 emulated paths with traffic and status")
    d.add_argument("--seconds", type=float, default=5.0, help="iperf3 duration")
    d.set_defaults(func=demo)
    args = ap.parse_args(argv)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        print("interrupted; namespaces removed", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
