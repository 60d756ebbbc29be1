"""One emulated link's shape: rate, delay, jitter, loss, trace and the
shaper arguments (tbf, or an htb tree for WMM) that carry it.

Invariants: a `Shape` is a plain value (no I/O); `back()` gives the B-to-A
direction; the shaper's burst and queue limit follow from the rate and
`queue_ms` alone.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from .util import run


@dataclass
class Shape:
    """One link: rate (tbf) and impairments, per direction.

    `reverse`, if given, describes the B-to-A direction; otherwise both
    directions are alike. `loss` is a fraction (0.02 = 2%); `loss_burst` the
    mean number of packets per loss burst (1 = independent losses).
    `trace` makes the link's capacity follow a trace of delivery
    opportunities (mahimahi's format; `trace_back` for B to A, default the
    same file; `trace_start_s` where the replay starts): mpt-netem queues
    frames (drop-tail, `queue_ms` at the trace's mean rate) for the trace's
    opportunities, then applies the delay. `rate_mbit` is then unset.
    `serialize` makes mpt-netem carry the rate instead of tbf: an exact
    per-frame serialiser without a burst, as a measured link should be
    (tbf lets a bucket's worth of frames through at line rate, which
    defeats dispersion measurements of capacity). `wmm` makes the link a
    Wi-Fi link with WMM: frames whose DSCP is in the voice access category
    (EF, VOICE-ADMIT, CS6, CS7; RFC 8325) have a jitter FIFO of their own
    and go ahead of the best-effort backlog: at the host's shaper (an htb
    tree instead of tbf) or, with `serialize`, in mpt-netem.
    """

    rate_mbit: float | None = None
    queue_ms: float = 20.0
    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    loss: float = 0.0
    loss_burst: float = 1.0
    limit: int = 10_000
    duplicate: float = 0.0
    corrupt: float = 0.0
    serialize: bool = False
    wmm: bool = False
    # With `serialize`: mark ECN-capable frames CE when they wait longer
    # than this in mpt-netem's rate queue, ms (0: never). This kernel has
    # no ECN-capable qdisc; a link that marks is emulated.
    ecn_mark_ms: float = 0.0
    # A capacity trace (mahimahi format) instead of a rate, A to B, and
    # B to A (None: the same file); where the replay starts, seconds.
    trace: str | None = None
    trace_back: str | None = None
    trace_start_s: float = 0.0
    reverse: Shape | None = None

    def impaired(self) -> bool:
        own = bool(
            self.delay_ms
            or self.jitter_ms
            or self.loss
            or self.duplicate
            or self.corrupt
            or self.serialize
            or self.wmm
            or self.trace
        )
        return own or bool(self.reverse and self.reverse.impaired())

    def back(self) -> Shape:
        if self.reverse is None and self.trace_back:
            return replace(self, trace=self.trace_back, trace_back=None)
        return self.reverse or self

    def netem_dir(self) -> dict[str, float | int]:
        return {
            "delay_ms": self.delay_ms,
            "jitter_ms": self.jitter_ms,
            "loss": self.loss,
            "loss_burst": self.loss_burst,
            "limit": self.limit,
            "duplicate": self.duplicate,
            "corrupt": self.corrupt,
            "rate_mbit": (self.rate_mbit or 0.0) if self.serialize else 0.0,
            "wmm": self.wmm,
            "ecn_mark_ms": self.ecn_mark_ms if self.serialize else 0.0,
            **(
                {
                    "trace": str(Path(self.trace).resolve()),
                    "trace_start_ms": self.trace_start_s * 1000,
                    "queue_ms": self.queue_ms,
                }
                if self.trace
                else {}
            ),
        }

    def rate_qdisc(self, ns: str, dev: str) -> None:
        """Shape `dev` at this link's rate: tbf, or with `wmm` an htb tree
        whose voice class (DSCPs of WMM_VOICE_TOS) is served first within
        the rate, as a WMM station's voice queue is."""
        if not self.wmm:
            run(["tc", "qdisc", "replace", "dev", dev, "root", *self.tbf_args()], ns=ns)
            return
        assert self.rate_mbit is not None
        rate = f"{self.rate_mbit}mbit"
        burst_bytes, limit_bytes = self.bucket_bytes()
        burst = str(burst_bytes)
        packets = max(limit_bytes // 1514, 10)
        tc = ["tc", "qdisc", "add", "dev", dev]
        cls = ["tc", "class", "add", "dev", dev, "parent"]
        run([*tc, "root", "handle", "1:", "htb", "default", "20"], ns=ns)
        run([*cls, "1:", "classid", "1:1", "htb", "rate", rate, "burst", burst], ns=ns)
        for cid, share, prio in (("1:10", 0.1, "0"), ("1:20", 0.9, "1")):
            own = f"{self.rate_mbit * share}mbit"
            spec = ["htb", "rate", own, "ceil", rate, "burst", burst, "prio", prio]
            run([*cls, "1:1", "classid", cid, *spec, "quantum", "1514"], ns=ns)
            run([*tc, "parent", cid, "pfifo", "limit", str(packets)], ns=ns)
        filt = ["tc", "filter", "add", "dev", dev, "parent", "1:", "protocol"]
        for tos in WMM_VOICE_TOS:
            match = [["ip", "prio", "1", "u32", "match", "ip", "dsfield"]]
            match.append(["ipv6", "prio", "2", "u32", "match", "ip6", "priority"])
            for m in match:
                run([*filt, *m, hex(tos), "0xfc", "flowid", "1:10"], ns=ns)

    def bucket_bytes(self) -> tuple[int, int]:
        """The shaper's burst and queue limit in bytes: one timer tick of
        traffic at least (HZ >= 100), and `queue_ms` at the rate on top."""
        assert self.rate_mbit is not None
        rate_bps = self.rate_mbit * 1e6
        burst = max(int(rate_bps / 8 / 100), 16_000)
        return burst, int(rate_bps / 8 * self.queue_ms / 1000) + burst

    def tbf_args(self) -> list[str]:
        burst, limit = self.bucket_bytes()
        return ["tbf", "rate", f"{self.rate_mbit}mbit", "burst", str(burst), "limit", str(limit)]


# TOS bytes (DSCP << 2) of the WMM voice access category (RFC 8325: EF,
# VOICE-ADMIT, CS6, CS7), for the host's shaper of a `wmm` link.
WMM_VOICE_TOS = (46 << 2, 44 << 2, 48 << 2, 56 << 2)
