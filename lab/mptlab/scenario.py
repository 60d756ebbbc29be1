"""Declarative scenarios (`lab/scenarios/*.toml`) and command-line overrides.

A scenario file::

    name = "aggregation"
    description = '''...ASCII topology drawing...'''

    [topology]
    links = [1, 2, 4]         # link counts to sweep
    rate_mbit = 100           # every link (both directions)
    delay_ms = 0              # also jitter_ms, loss, loss_burst, queue_ms
    lans = false              # true: traffic goes between a LAN host behind A and one
                              # behind B (MTU 1500), A and B routing (site.py)
    cc = "cubic"              # the hosts' own TCP congestion control (the
                              # inner TCP's): cubic, reno or bbr
    # or explicit links (fixed count), each with its own settings:
    # [[topology.link]]
    # rate_mbit = 100
    # delay_ms = 5
    # [topology.link.reverse]  # optional: the B-to-A direction differs
    # rate_mbit = 20

    [run]
    systems = ["plain", "mpt", "mptcp"]   # and "mpt-insecure", "mpt-1w", "mpt-parallel",
                                          # "mpt-recover", "mpt-norecover"
                                          # (loss recovery off), "mpt-1dg"
                                          # (tunnel MTU of one datagram),
                                          # "mpt-hold" (max_delay_ms = 300),
                                          # "mpt-q200" (queue_ms = 200), "mpt-pushback"
                                          # (local_queue_ms = 4), "mpt-wrr" (weights
                                          # from the link rates), "mpt-noqos"
                                          # (QoS off; the scenario's [qos] text
                                          # is left out), "mpt-noredundant"
                                          # (`redundant = true` set false),
                                          # "mpt-nomark" (real-time classes
                                          # with outer_dscp = 0), "hook"
    ip = ["4in4", "6in4", "4in6", "6in6"] # tunnel-in-path IP versions
    traffic = ["tcp", "udp", "http", "voip"]  # and "voip-bulk": VoIP beside a TCP transfer,
                                              # "voip-load": beside UDP at 80% of the links
                                              # (the links' own delay under load, no queue),
                                              # "qos-mix": VoIP, M2M, 4 bulk TCP and a UDP
                                              # flood at 5x the links (lab/mptlab/qosmix.py),
                                              # "precedence": UDP on port 5204 at half the
                                              # links beside UDP that makes the offer 1.25x
    seconds = 5
    repeats = 1
    tcp_streams = 1
    http_mb = 0               # 0: sized to last about `seconds` at the links' sum
    udp_payload = 1392        # bytes per UDP datagram payload
    flood_factor = 5.0        # qos-mix: the UDP flood's rate, times the links' sum
    udp_load = 0.85           # optional: UDP payload rate as a share of the links' sum
    warm_tunnel = false       # true: all repeats on one tunnel; by default each
                              # repeat brings the system up afresh (first transfers)
    timeline = false          # true: mpt's sender polled every 0.2 s during each
                              # transfer, per path (lab/mptlab/timeline.py)

    [mpt]                     # optional
    extra = "..."             # configuration text added to both daemons' files
                              # (a line `tunnel.KEY = VALUE` goes into [tunnel])
    server_learns = true      # side A's paths have no `remote`: the server learns
                              # its client's addresses (as a concentrator does)

    [[event]]                 # optional, during TCP transfers and VoIP streams
    at_s = 3
    action = "cut"            # or "restore", or "shape" with any of:
    link = 2                  # rate_mbit, delay_ms, jitter_ms, loss (both
                              # directions; delay/jitter/loss need a link that
                              # starts with some delay, so it is emulated)

    [measure]                 # optional: this run checks the measuring
    delay_ms = 10             # instruments' accuracy instead of comparing
                              # systems (lab/mptlab/measure.py has the keys)

    [hook]                    # optional: any other tunnel, for "hook"
    up = "/path/up.sh"        # prints the address to send to (example: tests/e2e/tools/vxlan-up.sh)
    down = "/path/down.sh"    # both get MPTLAB_* variables: namespaces, link addresses,
                              # MPTLAB_LINK{i}_RATE_MBIT, _DELAY_MS, _JITTER_MS, _LOSS
    mtu = 1420                # optional: UDP datagrams fit this MTU (or the up
                              # script prints a line "mtu=1420" before the address)
    processes = ["glorytun"]  # optional: the tunnel's processes, counted in
                              # tunnel_cycles_per_byte

Invariants: loading validates every key and value and raises ScenarioError
naming the file and key; overrides (`key=value`, dotted for sections, lists
comma-separated) go through the same validation.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .netns import Shape

SCENARIO_DIR = Path(__file__).resolve().parent.parent / "scenarios"
IP_COMBOS = ("4in4", "6in4", "4in6", "6in6")
SYSTEMS = (
    "plain",
    "mpt",
    "mpt-insecure",
    "mpt-1w",
    "mpt-parallel",
    "mpt-recover",
    "mpt-norecover",
    "mpt-1dg",
    "mpt-hold",
    "mpt-q200",
    "mpt-pushback",
    "mpt-wrr",
    "mpt-base",
    "mpt-noqos",
    "mpt-noredundant",
    "mpt-nomark",
    "mptcp",
    "hook",
)
TRAFFIC = ("tcp", "udp", "http", "voip", "voip-bulk", "voip-load", "qos-mix", "precedence")
LINK_KEYS = {
    "rate_mbit",
    "delay_ms",
    "jitter_ms",
    "loss",
    "loss_burst",
    "queue_ms",
    "limit",
    "duplicate",
    "corrupt",
    "serialize",
    "wmm",
    "trace",
    "trace_back",
    "trace_start_s",
}
# Link keys that are switches, not numbers.
LINK_FLAGS = {"serialize", "wmm"}
# Link keys that are files (relative to the scenario file's folder).
LINK_FILES = {"trace", "trace_back"}
TOP_KEYS = {
    "name",
    "description",
    "topology",
    "run",
    "event",
    "hook",
    "mpt",
    "measure",
    "concentrator",
    "matrix",
}
TOPO_KEYS = LINK_KEYS | {"links", "link", "cc", "lans"}
# The hosts' TCP congestion controls a scenario may choose (Linux names;
# CUBIC is Linux's default and what the other scenarios measure).
CONGESTION_CONTROLS = ("cubic", "reno", "bbr")
RUN_KEYS = {
    "systems",
    "ip",
    "traffic",
    "seconds",
    "repeats",
    "tcp_streams",
    "http_mb",
    "udp_payload",
    "flood_factor",
    "mix_streams",
    "udp_load",
    "warm_tunnel",
    "timeline",
}


class ScenarioError(ValueError):
    """A scenario file or override is invalid."""


@dataclass
class Event:
    at_s: float
    action: str
    link: int
    # For "shape": the link's new settings (None: unchanged).
    rate_mbit: float | None = None
    delay_ms: float | None = None
    jitter_ms: float | None = None
    loss: float | None = None

    def changes(self) -> dict[str, float]:
        """The settings a "shape" event changes."""
        keys = ("rate_mbit", "delay_ms", "jitter_ms", "loss")
        return {k: v for k in keys if (v := getattr(self, k)) is not None}


@dataclass
class Scenario:
    name: str
    description: str
    link_counts: list[int]
    shapes: list[Shape] | None  # explicit per-link shapes (fixed count)
    shape: Shape  # used for every link when `shapes` is None
    systems: list[str]
    ip: list[str]
    traffic: list[str]
    seconds: float = 5.0
    # The traffics of some systems, where they differ from `traffic` (set
    # by code, not by scenario files: the qos-matrix measures QoS off on
    # the mix only, its idle reference being mpt's).
    traffic_by_system: dict[str, list[str]] = field(default_factory=dict)
    repeats: int = 1
    tcp_streams: int = 1
    http_mb: float = 0.0
    udp_payload: int = 1392
    flood_factor: float = 5.0
    # qos-mix: the TCP flows in the bulk class.
    mix_streams: int = 4
    cc: str = "cubic"  # the end hosts' TCP congestion control
    # Routed sites: traffic between a LAN host behind A and one behind B
    # (site.py), through the system's routes.
    lans: bool = False
    # UDP traffic's payload rate as a share of the links' sum (None: as
    # close to the capacity as the system's overhead allows, 98 %).
    udp_load: float | None = None
    # Repeats on one tunnel (the paths' capacities learned by the first);
    # by default each repeat gets a fresh tunnel, as a user's transfer.
    warm_tunnel: bool = False
    timeline: bool = False
    events: list[Event] = field(default_factory=list)
    hook_up: str | None = None
    hook_down: str | None = None
    hook_mtu: int | None = None  # the hook tunnel's MTU, if its up script does not print it
    hook_processes: list[str] = field(default_factory=list)  # its processes' names
    mpt_extra: str = ""
    # [mpt] server_learns: side A's paths have no `remote`, so the server
    # learns its client's addresses (as a concentrator always does).
    server_learns: bool = False
    source: str = ""
    # The `measure` scenario's settings (lab/mptlab/measure.py): present,
    # the run checks the instruments' accuracy instead of comparing systems.
    measure: dict[str, Any] | None = None
    # The `concentrator` scenario's settings (lab/mptlab/concentrate.py).
    concentrator: dict[str, Any] | None = None
    # The `qos-matrix` scenario's cells (lab/mptlab/qosmatrix.py).
    matrix: dict[str, Any] | None = None

    def shapes_for(self, n: int) -> list[Shape]:
        return self.shapes if self.shapes is not None else [self.shape] * n

    def link_rates(self, n: int) -> list[float]:
        """Each link's rate A to B: its `rate_mbit`, or a trace's mean."""
        from .trace import load_trace

        return [
            s.rate_mbit or (load_trace(Path(s.trace)).mean_mbps() if s.trace else 0.0)
            for s in self.shapes_for(n)
        ]


def _check_keys(where: str, got: dict[str, Any], allowed: set[str]) -> None:
    for k in got:
        if k not in allowed:
            raise ScenarioError(f"{where}: unknown key '{k}' (valid: {', '.join(sorted(allowed))})")


def _trace_file(where: str, v: Any, base: Path) -> str:
    """A trace path, relative to the scenario's folder, checked to parse."""
    from .trace import TraceError, load_trace

    if not isinstance(v, str) or not v:
        raise ScenarioError(f"{where}: a file name (relative to the scenario's folder)")
    p = Path(v) if Path(v).is_absolute() else base / v
    try:
        load_trace(p)
    except TraceError as e:
        raise ScenarioError(f"{where}: {e}") from e
    return str(p)


def _shape(where: str, d: dict[str, Any], base: Path = Path(".")) -> Shape:
    _check_keys(where, d, LINK_KEYS | {"reverse"})
    reverse = None
    if "reverse" in d:
        if not isinstance(d["reverse"], dict):
            raise ScenarioError(f"{where}.reverse: must be a table of link settings")
        reverse = _shape(f"{where}.reverse", d["reverse"], base)
        d = {k: v for k, v in d.items() if k != "reverse"}
    for k in LINK_FLAGS & set(d):
        if not isinstance(d[k], bool):
            raise ScenarioError(f"{where}.{k}: must be true or false")
    try:
        kw = {
            k: _trace_file(f"{where}.{k}", v, base)
            if k in LINK_FILES
            else v
            if k in LINK_FLAGS
            else int(v)
            if k == "limit"
            else float(v)
            for k, v in d.items()
        }
    except (TypeError, ValueError) as e:
        raise ScenarioError(f"{where}: {e}") from e
    s = Shape(**kw, reverse=reverse)  # type: ignore[arg-type]
    if s.rate_mbit is not None and s.rate_mbit <= 0:
        raise ScenarioError(f"{where}.rate_mbit: must be positive")
    if (s.trace or s.trace_back) and s.rate_mbit is not None:
        raise ScenarioError(f"{where}: trace and rate_mbit exclude each other")
    if s.trace_back and not s.trace:
        raise ScenarioError(f"{where}.trace_back: needs a trace for A to B as well")
    if s.trace_start_s < 0:
        raise ScenarioError(f"{where}.trace_start_s: must not be negative")
    if not 0 <= s.loss < 1:
        raise ScenarioError(f"{where}.loss: a fraction within 0..1 (0.02 = 2%)")
    for k in ("delay_ms", "jitter_ms", "queue_ms", "duplicate", "corrupt"):
        if getattr(s, k) < 0:
            raise ScenarioError(f"{where}.{k}: must not be negative")
    if s.loss_burst < 1 or s.limit < 1:
        raise ScenarioError(f"{where}: loss_burst and limit must be at least 1")
    return s


SHAPE_EVENT_KEYS = {"rate_mbit", "delay_ms", "jitter_ms", "loss"}


def _event(where: str, e: dict[str, Any]) -> Event:
    _check_keys(where, e, {"at_s", "action", "link"} | SHAPE_EVENT_KEYS)
    action = e.get("action")
    if action not in ("cut", "restore", "shape"):
        raise ScenarioError(f"{where}.action: must be cut, restore or shape")
    for k in ("at_s", "link"):
        if k not in e:
            raise ScenarioError(f"{where}.{k}: missing")
    try:
        kw = {k: float(e[k]) for k in SHAPE_EVENT_KEYS if k in e}
        ev = Event(float(e["at_s"]), action, int(e["link"]), **kw)
    except (TypeError, ValueError) as err:
        raise ScenarioError(f"{where}: {err}") from err
    if ev.at_s < 0:
        raise ScenarioError(f"{where}.at_s: must be zero or more seconds")
    if action == "shape" and not ev.changes():
        keys = ", ".join(sorted(SHAPE_EVENT_KEYS))
        raise ScenarioError(f"{where}: a shape event needs one of {keys}")
    if action != "shape" and ev.changes():
        raise ScenarioError(f'{where}: link settings go with action = "shape" only')
    if ev.rate_mbit is not None and ev.rate_mbit <= 0:
        raise ScenarioError(f"{where}.rate_mbit: must be positive")
    if ev.loss is not None and not 0 <= ev.loss < 1:
        raise ScenarioError(f"{where}.loss: a fraction within 0..1 (0.02 = 2%)")
    for k in ("delay_ms", "jitter_ms"):
        if (v := getattr(ev, k)) is not None and v < 0:
            raise ScenarioError(f"{where}.{k}: must be zero or more")
    return ev


def _flag(where: str, v: Any) -> bool:
    if not isinstance(v, bool):
        raise ScenarioError(f"{where}: must be true or false")
    return v


def _list(where: str, v: Any, allowed: tuple[str, ...] | None = None) -> list[Any]:
    items = v if isinstance(v, list) else [v]
    if allowed is not None:
        for x in items:
            if x not in allowed:
                raise ScenarioError(f"{where}: '{x}' is not one of {', '.join(allowed)}")
    return items


def _number(where: str, x: Any, kind: type = float) -> Any:
    """`x` as a number of `kind` (int or float), or a clear error."""
    if isinstance(x, bool):
        raise ScenarioError(f"{where}: '{x}' is not a number")
    try:
        return kind(x)
    except (TypeError, ValueError):
        raise ScenarioError(f"{where}: '{x}' is not a number") from None


def _whole(where: str, x: Any) -> int:
    """`x` as a whole number, or a clear error (an override gives text:
    `links=8`, a list `links=1,2`)."""
    if isinstance(x, bool):
        raise ScenarioError(f"{where}: '{x}' is not a whole number")
    if isinstance(x, int):
        return x
    try:
        return int(str(x).strip())
    except ValueError:
        raise ScenarioError(
            f"{where}: '{x}' is not a whole number (a list is written links=1,2)"
        ) from None


def parse(data: dict[str, Any], source: str) -> Scenario:
    _check_keys(source, data, TOP_KEYS)
    topo = data.get("topology", {})
    run = data.get("run", {})
    _check_keys(f"{source}: [topology]", topo, TOPO_KEYS)
    _check_keys(f"{source}: [run]", run, RUN_KEYS)
    base = Path(source).parent
    shape = _shape(f"{source}: [topology]", {k: v for k, v in topo.items() if k in LINK_KEYS}, base)
    cc = _list(f"{source}: topology.cc", topo.get("cc", "cubic"), CONGESTION_CONTROLS)
    if len(cc) != 1:
        raise ScenarioError(f"{source}: topology.cc: one congestion control, not a list")
    shapes = None
    if "link" in topo:
        shapes = [
            _shape(f"{source}: [[topology.link]] #{i + 1}", d, base)
            for i, d in enumerate(topo["link"])
        ]
        counts = [len(shapes)]
    else:
        counts = [
            _whole(f"{source}: topology.links", x)
            for x in _list(f"{source}: topology.links", topo.get("links", [1]))
        ]
    for c in counts:
        if not 1 <= c <= 32:
            raise ScenarioError(f"{source}: topology.links: {c} is outside 1..32")
    events = [
        _event(f"{source}: [[event]] #{i + 1}", e) for i, e in enumerate(data.get("event", []))
    ]
    for i, ev in enumerate(events):
        where = f"{source}: [[event]] #{i + 1}"
        if not 1 <= ev.link <= max(counts):
            raise ScenarioError(f"{where}.link: {ev.link} is not a link of this topology")
        impairs = {"delay_ms", "jitter_ms", "loss"} & set(ev.changes())
        link_shapes = shapes or [shape]
        if impairs and not any(s.impaired() for s in link_shapes):
            raise ScenarioError(
                f"{where}: {', '.join(sorted(impairs))} can change only on an emulated "
                "topology; give the links a delay_ms to start with"
            )
    hook = data.get("hook", {})
    _check_keys(f"{source}: [hook]", hook, {"up", "down", "mtu", "processes"})
    hook_mtu = hook.get("mtu")
    if hook_mtu is not None and (
        isinstance(hook_mtu, bool) or not isinstance(hook_mtu, int) or not 576 <= hook_mtu <= 65535
    ):
        raise ScenarioError(f"{source}: hook.mtu must be an integer within 576..65535")
    hook_processes = [str(x) for x in _list(f"{source}: hook.processes", hook.get("processes", []))]
    mpt_sec = data.get("mpt", {})
    _check_keys(f"{source}: [mpt]", mpt_sec, {"extra", "server_learns"})
    learns = mpt_sec.get("server_learns", False)
    if not isinstance(learns, bool):
        raise ScenarioError(f"{source}: mpt.server_learns must be true or false")
    sc = Scenario(
        name=str(data.get("name", Path(source).stem)),
        description=str(data.get("description", "")),
        link_counts=counts,
        shapes=shapes,
        shape=shape,
        systems=_list(f"{source}: run.systems", run.get("systems", ["plain", "mpt"]), SYSTEMS),
        ip=_list(f"{source}: run.ip", run.get("ip", ["4in4"]), IP_COMBOS),
        traffic=_list(f"{source}: run.traffic", run.get("traffic", ["tcp"]), TRAFFIC),
        seconds=_number(f"{source}: run.seconds", run.get("seconds", 5), float),
        repeats=_number(f"{source}: run.repeats", run.get("repeats", 1), int),
        tcp_streams=_number(f"{source}: run.tcp_streams", run.get("tcp_streams", 1), int),
        http_mb=_number(f"{source}: run.http_mb", run.get("http_mb", 0), float),
        udp_payload=_number(f"{source}: run.udp_payload", run.get("udp_payload", 1392), int),
        flood_factor=_number(f"{source}: run.flood_factor", run.get("flood_factor", 5.0), float),
        mix_streams=_number(f"{source}: run.mix_streams", run.get("mix_streams", 4), int),
        cc=cc[0],
        lans=_flag(f"{source}: topology.lans", topo.get("lans", False)),
        udp_load=None
        if run.get("udp_load") is None
        else _number(f"{source}: run.udp_load", run["udp_load"]),
        warm_tunnel=_flag(f"{source}: run.warm_tunnel", run.get("warm_tunnel", False)),
        timeline=_flag(f"{source}: run.timeline", run.get("timeline", False)),
        events=events,
        hook_up=hook.get("up"),
        hook_down=hook.get("down"),
        hook_mtu=hook_mtu,
        hook_processes=hook_processes,
        mpt_extra=str(mpt_sec.get("extra", "")),
        server_learns=learns,
        source=source,
        measure=data.get("measure"),
        concentrator=data.get("concentrator"),
        matrix=data.get("matrix"),
    )
    if sc.matrix is not None:
        from .qosmatrix import Settings as MatrixSettings

        try:
            MatrixSettings.from_dict(sc.matrix, sc.mpt_extra)
        except (ValueError, TypeError) as e:
            raise ScenarioError(f"{source}: {e}") from e
    if sc.concentrator is not None:
        from .concentrate import Settings as ConcSettings

        try:
            ConcSettings.from_dict(sc.concentrator)
        except (ValueError, TypeError) as e:
            raise ScenarioError(f"{source}: {e}") from e
    if sc.measure is not None:
        from .measure import Settings

        try:
            Settings.from_dict(sc.measure)
        except (ValueError, TypeError) as e:
            raise ScenarioError(f"{source}: {e}") from e
    if "hook" in sc.systems and not (sc.hook_up and sc.hook_down):
        raise ScenarioError(f"{source}: system 'hook' needs [hook] up and down scripts")
    if sc.udp_load is not None and not 0 < sc.udp_load <= 1.5:
        raise ScenarioError(f"{source}: run.udp_load must be within 0..1.5 (a share of the links)")
    if sc.seconds <= 0 or sc.repeats < 1:
        raise ScenarioError(f"{source}: run.seconds must be > 0 and run.repeats >= 1")
    return sc


def _coerce(v: str) -> Any:
    if "," in v:
        return [_coerce(x) for x in v.split(",") if x]
    if v in ("true", "false"):
        # TOML's booleans (`run.warm_tunnel=true`): a string "true" was
        # refused as not a boolean.
        return v == "true"
    for conv in (int, float):
        try:
            return conv(v)
        except ValueError:
            pass
    return v


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply `key=value` overrides. Bare keys are looked up in [run] and
    [topology]; `section.key` addresses a section explicitly."""
    for o in overrides:
        if "=" not in o:
            raise ScenarioError(f"override '{o}': expected key=value")
        key, val = o.split("=", 1)
        value = _coerce(val)
        if key in ("links", "systems", "ip", "traffic") and not isinstance(value, list):
            value = [value]
        if "." in key:
            sec, k = key.split(".", 1)
            data.setdefault(sec, {})[k] = value
        elif key in RUN_KEYS:
            data.setdefault("run", {})[key] = value
        elif key in TOPO_KEYS:
            data.setdefault("topology", {})[key] = value
        else:
            raise ScenarioError(f"override '{o}': unknown key '{key}'")
    return data


def load(name_or_path: str, overrides: list[str] | None = None) -> Scenario:
    p = Path(name_or_path)
    if not p.exists():
        p = SCENARIO_DIR / f"{name_or_path}.toml"
    if not p.exists():
        known = ", ".join(sorted(x.stem for x in SCENARIO_DIR.glob("*.toml")))
        raise ScenarioError(f"no scenario '{name_or_path}' (known: {known})")
    try:
        data = tomllib.loads(p.read_text())
    except tomllib.TOMLDecodeError as e:
        raise ScenarioError(f"{p}: {e}") from e
    return parse(apply_overrides(data, overrides or []), str(p))


def available() -> list[Scenario]:
    return [load(str(p)) for p in sorted(SCENARIO_DIR.glob("*.toml"))]
