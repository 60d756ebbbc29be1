"""The qos-mix figures: Jain's index and the well-behaved flows' share."""

import pytest
from mptlab.qosmix import jain, share_of_fair


def test_jain_is_one_when_equal_and_one_over_n_when_one_takes_all() -> None:
    assert jain([5.0, 5.0, 5.0, 5.0]) == pytest.approx(1.0)
    assert jain([8.0, 0.0, 0.0, 0.0]) == pytest.approx(0.25)


def test_share_of_fair_compares_the_streams_with_an_equal_split() -> None:
    # Four streams of 20 and a flood of 20: each has exactly its share.
    assert share_of_fair([20.0] * 4, 20.0) == pytest.approx(1.0)
    # The flood takes 40: the fair share is 120 / 5 = 24, the streams 20.
    assert share_of_fair([20.0] * 4, 40.0) == pytest.approx(20 / 24)
    assert share_of_fair(None, 10.0) is None
    assert share_of_fair([1.0], None) is None


def test_the_notes_name_the_real_time_class_s_delay_inside_mpt() -> None:
    from mptlab.results import _mix_notes

    det = {
        "voip_owd_mean_ms": 6.5,
        "bulk_share_of_fair": 0.97,
        "sender_classes": [
            {"name": "bulk", "realtime": False, "packets": 9, "delay": {"p99_ms": 50}},
            {
                "name": "voip",
                "realtime": True,
                "packets": 500,
                "delay": {"p50_ms": 0.001, "p99_ms": 0.64},
            },
        ],
    }
    notes = _mix_notes(det)
    assert "VoIP owd 6.50 ms" in notes and "in mpt p50 0.001 / p99 0.64 ms" in notes
    assert "97.0% of fair share" in notes
    assert "in mpt" not in _mix_notes({"voip_owd_mean_ms": 6.5})


def test_the_shares_are_those_while_voip_runs_with_the_whole_run_beside() -> None:
    from mptlab.qosmix import summary

    mix = {
        "bulk": {
            "mbps": 70.0,
            "streams_mbps": [17.5] * 4,
            "window_streams_mbps": [20.0] * 4,
            "jain": 1.0,
        },
        "flood": {"mbps": 35.0, "window_mbps": 20.0},
    }
    d = summary(mix)
    assert d["bulk_share_of_fair"] == pytest.approx(1.0)
    assert d["flood_mbps"] == 20.0 and d["bulk_mbps"] == 80.0
    assert d["run_bulk_share_of_fair"] == pytest.approx(17.5 / 21.0)
    # Without server intervals: the whole run's.
    del mix["bulk"]["window_streams_mbps"]
    d = summary(mix)
    assert d["bulk_share_of_fair"] == pytest.approx(17.5 / 21.0)
    assert d["flood_mbps"] == 35.0


def test_the_precedence_notes_give_each_flow_s_loss() -> None:
    from mptlab.results import _precedence_notes

    det = {
        "overload": 1.25,
        "high_offered_mbit": 60.0,
        "high_mbps": 59.5,
        "high_lost": 0,
        "high_lost_percent": 0.0,
        "high_owd_mean_ms": 57.0,
        "low_offered_mbit": 90.0,
        "low_mbps": 58.2,
        "low_lost_percent": 35.3,
    }
    notes = _precedence_notes(det)
    assert notes.startswith("offered 1.25x the links: high precedence 60 Mbit/s")
    assert "lost 0 (0.00%)" in notes and "loss 35.30%" in notes
    # A missing part shows as a dash, not as zero.
    assert "lost – (–%)" in _precedence_notes({"overload": 1.25})


def test_a_call_through_a_cut_names_its_events() -> None:
    from mptlab.results import _event_words

    events = [
        {"at_s": 4.0, "action": "cut", "link": 1},
        {"at_s": 8.0, "action": "restore", "link": 1},
    ]
    assert _event_words(events) == "link 1 cut at 4 s, link 1 restored at 8 s"
