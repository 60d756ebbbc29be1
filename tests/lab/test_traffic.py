"""The receiver's steady rate from iperf3's server intervals."""

from mptlab.traffic import steady_mbps


def _raw(intervals: list[tuple[float, float, int]], duration: float) -> dict:
    return {
        "start": {"test_start": {"duration": duration}},
        "server_output_json": {
            "intervals": [
                {"sum": {"start": a, "end": b, "seconds": b - a, "bytes": n}}
                for a, b, n in intervals
            ]
        },
    }


def test_steady_rate_leaves_out_the_start_and_the_tail() -> None:
    # 1 MB per 0.5 s is 16 Mbit/s; the start is slower, the tail after the
    # client's 3 s is a fragment that says nothing about the rate.
    raw = _raw(
        [(0, 0.5, 100_000), (0.5, 1.0, 500_000), (1.0, 1.5, 1_000_000)]
        + [(1.5, 2.0, 1_000_000), (2.0, 2.5, 1_000_000), (2.5, 3.0, 1_000_000)]
        + [(3.0, 3.01, 5_000)],
        duration=3,
    )
    assert steady_mbps(raw, 1.0) == 16.0
    assert steady_mbps(raw, 0.0) < 16.0


def test_no_server_intervals_no_steady_rate() -> None:
    assert steady_mbps(None, 2.0) is None
    assert steady_mbps({"start": {}}, 2.0) is None
    assert steady_mbps(_raw([(0, 0.5, 1000)], duration=1), 2.0) is None


def test_each_stream_s_rate_over_a_window() -> None:
    from mptlab.traffic import window_streams_mbps

    # Two streams, intervals of 0.5 s: the first second is left out, and so
    # is the interval that reaches past the window's end.
    iv = [
        {
            "sum": {"start": a, "end": a + 0.5, "seconds": 0.5},
            "streams": [{"bytes": n}, {"bytes": 2 * n}],
        }
        for a, n in [(0.0, 10), (0.5, 10), (1.0, 1_000_000), (1.5, 1_000_000), (2.0, 5)]
    ]
    raw = {"server_output_json": {"intervals": iv}}
    assert window_streams_mbps(raw, 1.0, 2.2) == [16.0, 32.0]
    assert window_streams_mbps(raw, 3.0, 4.0) is None
    assert window_streams_mbps(None, 0.0, 1.0) is None
