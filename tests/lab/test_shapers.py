"""The bottleneck's own counters in a run's details (`shapers.shaper_delta`)."""

from mptlab.shapers import shaper_delta


def test_a_run_reports_what_each_shaper_sent_and_dropped_meanwhile():
    before = {
        "l1a": {"tbf 8001:": {"packets": 100, "drops": 3, "overlimits": 9, "backlog": 0}},
        "l2a": {"tbf 8002:": {"packets": 50, "drops": 0, "overlimits": 0, "backlog": 0}},
    }
    after = {
        # A netem root counts the drops of its tbf child as its own.
        "l1a": {
            "netem 1:": {"packets": 4800, "drops": 80, "overlimits": 0, "backlog": 12112},
            "tbf 8001:": {"packets": 4800, "drops": 77, "overlimits": 3000, "backlog": 12112},
        },
        "l2a": {"tbf 8002:": {"packets": 50, "drops": 0, "overlimits": 0, "backlog": 0}},
        "l1b": {"tbf 8003:": {"packets": 2000, "drops": 0, "overlimits": 0, "backlog": 0}},
    }
    d = shaper_delta(before, after)
    assert d["l1a"] == {"packets": 4800, "drops": 80, "backlog": 12112}
    assert d["l1b"] == {"packets": 2000, "drops": 0, "backlog": 0}
    assert "l2a" not in d, "an end that sent nothing meanwhile is left out"


def test_a_device_that_could_not_be_read_is_left_out():
    assert shaper_delta({"l1a": {}}, {}) == {}


def test_a_rate_event_keeps_what_the_replaced_shaper_counted():
    # A step deleted l3a's tbf (120 packets, 6 drops since `before`) and
    # made a new one with the same handle, counting from zero.
    before = {"l3a": {"tbf 8001:": {"packets": 30, "drops": 1, "overlimits": 0, "backlog": 0}}}
    after = {
        "l3a": {
            "tbf 8001:": {"packets": 400, "drops": 2, "overlimits": 0, "backlog": 0},
            "retired": {"packets": 150, "drops": 7, "overlimits": 0, "backlog": 0},
        }
    }
    d = shaper_delta(before, after)
    assert d["l3a"] == {"packets": 120 + 400, "drops": 6 + 2, "backlog": 0}
    # A second reading later counts only what came after the first.
    later = {
        "l3a": {
            "tbf 8001:": {"packets": 450, "drops": 2, "overlimits": 0, "backlog": 0},
            "retired": {"packets": 150, "drops": 7, "overlimits": 0, "backlog": 0},
        }
    }
    assert shaper_delta(after, later)["l3a"] == {"packets": 50, "drops": 0, "backlog": 0}
