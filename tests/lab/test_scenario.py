"""Unit tests of scenario parsing and overrides (no root needed)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "lab"))

from mptlab import scenario  # noqa: E402
from mptlab.runner import udp_payload_for, udp_wire_bytes  # noqa: E402
from mptlab.systems import weights_for  # noqa: E402


def test_every_shipped_scenario_loads_and_has_a_drawing() -> None:
    names = {sc.name for sc in scenario.available()}
    expected = {
        "smoke",
        "aggregation",
        "aggregation-1g",
        "asymmetric",
        "wifi-lte",
        "failover",
        "lossy",
        "three-unequal",
        "capacity-drop",
        "voip-wifi-lte",
        "measure",
        "qos",
        "qos-wired",
        "qos-precedence",
        "qos-redundant",
        "wifi-lte-bbr",
    }
    assert expected <= names
    for sc in scenario.available():
        assert "+" in sc.description and "|" in sc.description, sc.name


def test_overrides_reach_run_and_topology() -> None:
    sc = scenario.load("aggregation", ["links=1,2", "seconds=2", "systems=mpt", "ip=6in4"])
    assert sc.link_counts == [1, 2]
    assert sc.seconds == 2.0
    assert sc.systems == ["mpt"]
    assert sc.ip == ["6in4"]
    sc = scenario.load("smoke", ["topology.rate_mbit=20", "links=3"])
    assert sc.shape.rate_mbit == 20.0 and sc.link_counts == [3]


def test_the_hosts_congestion_control_defaults_to_cubic_and_can_be_chosen() -> None:
    assert scenario.load("wifi-lte").cc == "cubic"
    assert scenario.load("wifi-lte-bbr").cc == "bbr"
    assert scenario.load("wifi-lte", ["topology.cc=reno"]).cc == "reno"
    assert scenario.load("smoke", ["cc=bbr"]).cc == "bbr"


def test_explicit_links_fix_the_count() -> None:
    sc = scenario.load("wifi-lte")
    assert sc.link_counts == [2]
    assert [s.delay_ms for s in sc.shapes_for(2)] == [5.0, 40.0]
    assert sc.link_rates(2) == [100.0, 20.0]


@pytest.mark.parametrize(
    "data,msg",
    [
        ({"run": {"systems": ["mpt", "wireguard"]}}, "'wireguard' is not one of"),
        ({"run": {"ip": ["5in4"]}}, "'5in4' is not one of"),
        ({"topology": {"rate": 100}}, "unknown key 'rate'"),
        ({"topology": {"links": [0]}}, "outside 1..32"),
        ({"topology": {"loss": 2}}, "a fraction"),
        ({"run": {"systems": ["hook"]}}, "needs [hook] up and down"),
        ({"event": [{"at_s": 1, "action": "explode", "link": 1}]}, "cut, restore or shape"),
        ({"event": [{"at_s": 1, "action": "shape", "link": 1}]}, "needs one of"),
        ({"event": [{"at_s": 1, "action": "cut", "link": 1, "rate_mbit": 5}]}, 'shape" only'),
        ({"event": [{"at_s": 1, "action": "shape", "link": 3, "rate_mbit": 5}]}, "not a link"),
        ({"event": [{"at_s": 1, "action": "shape", "link": 1, "rate_mbit": 0}]}, "positive"),
        ({"event": [{"at_s": 1, "action": "shape", "link": 1, "loss": 1.5}]}, "a fraction"),
        (
            {"event": [{"at_s": 1, "action": "shape", "link": 1, "delay_ms": 9}]},
            "only on an emulated topology",
        ),
        ({"event": [{"action": "cut", "link": 1}]}, "at_s: missing"),
        ({"colour": 1}, "unknown key 'colour'"),
        ({"topology": {"cc": "vegas"}}, "'vegas' is not one of cubic, reno, bbr"),
        ({"topology": {"cc": ["bbr", "reno"]}}, "one congestion control"),
    ],
)
def test_bad_scenarios_are_rejected_with_the_key(data: dict, msg: str) -> None:
    with pytest.raises(scenario.ScenarioError, match=msg.replace("[", r"\[")):
        scenario.parse(data, "x.toml")


def test_bad_overrides_and_unknown_scenarios() -> None:
    with pytest.raises(scenario.ScenarioError, match="expected key=value"):
        scenario.load("smoke", ["links"])
    with pytest.raises(scenario.ScenarioError, match="unknown key 'speed'"):
        scenario.load("smoke", ["speed=3"])
    with pytest.raises(scenario.ScenarioError, match="no scenario 'nope'"):
        scenario.load("nope")
    # A list written as TOML on the command line is text, not a crash.
    with pytest.raises(scenario.ScenarioError, match=r"'\[8\]' is not a whole number"):
        scenario.load("aggregation", ["topology.links=[8]"])
    with pytest.raises(scenario.ScenarioError, match="'True' is not a whole number"):
        scenario.parse({"topology": {"links": [True]}}, "x.toml")
    for o, msg in [
        ("seconds=abc", "run.seconds: 'abc' is not a number"),
        ("run.udp_payload=big", "run.udp_payload: 'big' is not a number"),
        ("run.repeats=true", "run.repeats: 'True' is not a number"),
        ("udp_load=x", "run.udp_load: 'x' is not a number"),
        ("topology.jitter_ms=-3", "jitter_ms: must not be negative"),
        ("topology.delay_ms=-1", "delay_ms: must not be negative"),
    ]:
        with pytest.raises(scenario.ScenarioError, match=msg):
            scenario.load("smoke", [o])
    assert scenario.load("aggregation", ["topology.links=8"]).link_counts == [8]
    assert scenario.load("aggregation", ["links=2,4"]).link_counts == [2, 4]


def test_weights_follow_rates_and_wire_sizes() -> None:
    assert weights_for([100, 20]) == [5, 1]
    assert weights_for([100, 100, 100]) == [1, 1, 1]
    assert weights_for([0, 0]) == [1, 1]
    # 1392-byte payload: plain IPv4 1434 bytes on the wire; encrypted mpt
    # over IPv4 adds 68 (IP 20, UDP 8, header 24, tag 16).
    assert udp_wire_bytes(1392, "plain", 0, 4) == 1434
    assert udp_wire_bytes(1392, "mpt", 4, 4) == 1502
    assert udp_wire_bytes(1392, "mpt", 6, 6) == 1392 + 48 + 24 + 16 + 48 + 14


def test_udp_payload_never_fragments() -> None:
    # Inner IP packet = payload + UDP + IP of the tunnel version must fit
    # the tunnel MTU (1500 - outer IP - UDP - 24 - 16), and that of the
    # previous wire version (36-byte header), so A/B runs send the same.
    assert udp_payload_for(1392, "mpt", 4, 4) == 1392
    assert udp_payload_for(1392, "mpt", 6, 4) == 1372
    assert udp_payload_for(1392, "mpt", 4, 6) == 1372
    assert udp_payload_for(1392, "mpt", 6, 6) == 1352
    assert udp_payload_for(1392, "mpt-insecure", 4, 4) == 1392
    assert udp_payload_for(1392, "plain", 0, 6) == 1392
    assert udp_payload_for(1000, "mpt", 6, 6) == 1000


def test_a_link_direction_can_differ() -> None:
    data = {
        "topology": {
            "link": [
                {"rate_mbit": 100, "delay_ms": 5, "reverse": {"rate_mbit": 20, "delay_ms": 30}}
            ]
        }
    }
    sc = scenario.parse(data, "x.toml")
    s = sc.shapes_for(1)[0]
    assert (s.rate_mbit, s.delay_ms) == (100.0, 5.0)
    assert (s.back().rate_mbit, s.back().delay_ms) == (20.0, 30.0)
    bad = {"topology": {"link": [{"reverse": {"speed": 1}}]}}
    with pytest.raises(scenario.ScenarioError, match="reverse: unknown key 'speed'"):
        scenario.parse(bad, "x.toml")


def test_shape_events_parse_with_their_settings() -> None:
    sc = scenario.parse(
        {
            "topology": {"links": [2], "rate_mbit": 100, "delay_ms": 5},
            "event": [
                {"at_s": 4, "action": "shape", "link": 2, "rate_mbit": 10, "loss": 0.01},
                {"at_s": 6, "action": "restore", "link": 1},
            ],
        },
        "x.toml",
    )
    assert sc.events[0].changes() == {"rate_mbit": 10.0, "loss": 0.01}
    assert sc.events[1].changes() == {}


def test_mpt_has_no_weights_but_mpt_wrr_has_the_lab_s() -> None:
    import inspect

    from mptlab import systems
    from mptlab.runner import MPT_VARIANTS

    # A user does not know the links' rates: the `mpt` system runs with
    # default weights; only `mpt-wrr` takes them from the emulation.
    assert inspect.signature(systems.mpt).parameters["weights"].default is False
    assert MPT_VARIANTS["mpt-wrr"] == {"weights": True}
    assert [k for k, v in MPT_VARIANTS.items() if v.get("weights")] == ["mpt-wrr"]


def test_the_measure_scenario_has_settings_and_rejects_unknown_keys() -> None:
    sc = scenario.load("measure", ["measure.owd_packets=2000", "measure.pps=1000"])
    assert sc.measure is not None
    assert sc.measure["owd_packets"] == 2000
    from mptlab.measure import Settings

    s = Settings.from_dict(sc.measure)
    assert (s.owd_packets, s.pps, s.rates_mbit) == (2000, [1000], [100.0, 1000.0])
    with pytest.raises(scenario.ScenarioError, match="unknown key 'bogus'"):
        scenario.load("measure", ["measure.bogus=1"])
    with pytest.raises(scenario.ScenarioError, match="loss must be a fraction"):
        scenario.load("measure", ["measure.loss=2"])


def test_the_noredundant_variant_turns_redundancy_off_and_nothing_else() -> None:
    from mptlab.runner import MPT_VARIANTS

    extra = scenario.load("qos-redundant").mpt_extra
    assert "redundant = true" in extra
    out = MPT_VARIANTS["mpt-noredundant"]["transform"](extra)
    assert "redundant = true" not in out and "redundant = false" in out
    assert out.replace("redundant = false", "redundant = true") == extra


def test_the_nomark_variant_unmarks_real_time_classes_only() -> None:
    from mptlab.runner import MPT_VARIANTS

    extra = scenario.load("qos-wmm").mpt_extra + '\n[[qos.class]]\nname = "x"\nouter_dscp = 10\n'
    out = MPT_VARIANTS["mpt-nomark"]["transform"](extra)
    assert out.count("outer_dscp = 0") == extra.count("realtime = true") == 1
    assert "outer_dscp = 10" not in out
    assert out.replace("outer_dscp = 0\n", "") == extra.replace("outer_dscp = 10\n", "")


def test_link_switches_must_be_booleans() -> None:
    data = {"name": "x", "topology": {"link": [{"rate_mbit": 10, "wmm": 1}]}}
    with pytest.raises(scenario.ScenarioError, match=r"wmm: must be true or false"):
        scenario.parse(data, "x.toml")
    ok = scenario.parse({**data, "topology": {"link": [{"rate_mbit": 10, "wmm": True}]}}, "x")
    assert ok.shapes_for(1)[0].wmm is True


def test_boolean_overrides_are_booleans() -> None:
    # `run.warm_tunnel=true` was refused: the override's "true" stayed a
    # string, and the switches take booleans only.
    sc = scenario.load("wifi-lte", ["run.warm_tunnel=true", "timeline=true"])
    assert sc.warm_tunnel is True and sc.timeline is True
    sc = scenario.load("wifi-lte", ["warm_tunnel=false"])
    assert sc.warm_tunnel is False and sc.timeline is False
    with pytest.raises(scenario.ScenarioError, match="timeline"):
        scenario.load("wifi-lte", ["timeline=1"])


def test_the_experiment_variants_write_their_keys_where_they_belong() -> None:
    import tomllib

    from mptlab.daemon import PathOpts, TunnelOpts, config_text
    from mptlab.runner import MPT_VARIANTS

    def cfg(system: str) -> dict:
        extra = MPT_VARIANTS[system]["extra"]
        opts = TunnelOpts(paths=[PathOpts(1)], extra=extra, security="insecure")
        return tomllib.loads(config_text(None, "a", opts, Path("/run/x.sock")))  # type: ignore[arg-type]

    assert cfg("mpt-1dg")["tunnel"]["mtu"] == 1432
    assert cfg("mpt-hold")["reorder"]["max_delay_ms"] == 300
    assert cfg("mpt-q200")["scheduler"]["queue_ms"] == 200
    for system in ("mpt-1dg", "mpt-hold", "mpt-q200"):
        assert system in scenario.SYSTEMS


def test_the_progress_count_counts_each_listing_of_a_system(tmp_path: Path) -> None:
    from mptlab.runner import Runner

    sc = scenario.load(
        "wifi-lte", ["run.systems=mpt,mpt-base,mptcp,mpt-base,mpt", "run.traffic=tcp"]
    )
    assert Runner(sc, tmp_path, progress=lambda _: None).total == 5
