"""The inner TCP's timeline: `ss -tin` output parsed, subflows summed,
iperf3's control connection left out, and rendered."""

from mptlab.tcpinfo import combine, parse_ss, render

# Two sockets as `ss -tinH state established dport = :5201` prints them:
# iperf3's control connection, then the data connection.
CONTROL_INFO = (
    "\t cubic wscale:9,9 rto:304 rtt:101.4/20.1 ato:40 mss:1448 pmtu:1500 cwnd:10"
    " bytes_sent:187 bytes_acked:188 send 1.1Mbps app_limited busy:20ms unacked:0 retrans:0/0"
)
DATA_INFO = (
    "\t cubic wscale:9,9 rto:360 rtt:150.2/12.3 ato:40 mss:8948 pmtu:9000 cwnd:460"
    " ssthresh:140 bytes_sent:52000000 bytes_retrans:17896 bytes_acked:48000000 unacked:420"
    " retrans:0/2 busy:6000ms rwnd_limited:504ms(8.4%) sndbuf_limited:116ms(1.9%)"
)
SS = (
    "0      0      10.99.0.1:40100 10.99.0.2:5201\n"
    + CONTROL_INFO
    + "\n0      4194000 10.99.0.1:40102 10.99.0.2:5201\n"
    + DATA_INFO
    + "\n"
)


def test_the_data_socket_is_kept_and_its_limits_read() -> None:
    socks = parse_ss(SS)
    assert len(socks) == 2
    row = combine(socks)
    assert row is not None
    assert row["sockets"] == 1, "the control connection is left out"
    assert row["cwnd_bytes"] == 460 * 8948
    assert row["inflight_bytes"] == 420 * 8948
    assert row["rtt_ms"] == 150.2
    assert row["retrans"] == 2
    assert (row["rwnd_limited_ms"], row["sndbuf_limited_ms"]) == (504, 116)


def test_each_socket_carries_its_local_port_to_tell_earlier_transfers_apart() -> None:
    socks = parse_ss(SS)
    assert [s["local_port"] for s in socks] == [40100.0, 40102.0]
    v6 = "0 0 [fd00::1]:40104 [fd00::2]:5201\n" + DATA_INFO + "\n"
    assert parse_ss(v6)[0]["local_port"] == 40104.0


def test_subflows_are_summed_and_the_round_trip_weighted_by_flight() -> None:
    a = {"cwnd": 100, "mss": 1000, "unacked": 100, "bytes_sent": 1e6, "rtt_ms": 100.0}
    b = {"cwnd": 300, "mss": 1000, "unacked": 300, "bytes_sent": 3e6, "rtt_ms": 200.0}
    row = combine([a, b, {"cwnd": 10, "mss": 1000, "bytes_sent": 200}])
    assert row is not None
    assert (row["sockets"], row["cwnd_bytes"], row["inflight_bytes"]) == (2, 400_000, 400_000)
    assert row["rtt_ms"] == 175.0
    text = render([{"t": 1.0, **row}])
    assert "cwnd   0.40 MB" in text and "rtt 175.0 ms" in text and "(2 subflows)" in text


def test_no_socket_gives_no_row_and_garbage_parses_to_nothing() -> None:
    assert combine([]) is None
    assert parse_ss("not ss output\n\x00\xff") == []
    # Before the data connection has sent much, the busiest socket stands.
    row = combine(parse_ss(SS.split("0      4194000")[0]))
    assert row is not None and row["cwnd_bytes"] == 10 * 1448


def test_a_sweep_case_summarises_what_held_each_tcp_back() -> None:
    from mptlab.tcpinfo import tcp_line, tcp_summary

    assert tcp_summary(None) is None and tcp_summary([]) is None
    rows = [
        {"t": 0.2, "cwnd_bytes": 1_000_000, "rtt_ms": 100.0, "retrans": 0},
        {"t": 0.4, "cwnd_bytes": 4_120_000, "rtt_ms": 180.0, "retrans": 2},
        {
            "t": 0.6,
            "cwnd_bytes": 4_120_000,
            "rtt_ms": None,
            "retrans": 3,
            "sndbuf_limited_ms": 660,
            "rwnd_limited_ms": 504,
        },
        # The data socket closed: only iperf3's control connection is left.
        {"t": 0.8, "cwnd_bytes": 14_480, "rtt_ms": 120.0, "retrans": 0},
    ]
    t = tcp_summary(rows)
    assert t == {
        "rtt_ms_median": 120.0,
        "cwnd_mb_max": 4.12,
        "retrans": 3,
        "sndbuf_limited_s": 0.66,
        "rwnd_limited_s": 0.5,
    }
    line = tcp_line("mpt", t)
    assert line == (
        "mpt rtt 120 ms, window up to 4.12 MB, 3 retransmitted,"
        " send-buffer limited 0.7 s, receive-window limited 0.5 s"
    )


def test_the_inner_tcp_is_plotted_per_link_count_with_every_system(tmp_path) -> None:
    from mptlab.plot import plot_all

    def point(system: str, rtt: float) -> dict:
        rows = [
            {"t": 0.2 * i, "cwnd_bytes": 100_000 * i, "rtt_ms": rtt + i, "retrans": 0}
            for i in range(1, 6)
        ]
        rows[2]["rtt_ms"] = None  # a sample without a round trip yet
        return {
            "system": system,
            "ip": "4in4",
            "links": 2,
            "traffic": "tcp",
            "mbps": 50.0,
            "mbps_min": 50.0,
            "mbps_max": 50.0,
            "sum_mbit": 100.0,
            "efficiency": 0.5,
            "tunnel_v": 4,
            "path_v": 4,
            "cpu_pct": None,
            "details": {"tcp_timeline": rows},
        }

    doc = {
        "scenario": "x",
        "setup": {"seconds": 1},
        "points": [point("mpt", 60), point("mptcp", 40)],
    }
    made = plot_all(doc, tmp_path)
    assert tmp_path / "inner-tcp-tcp-2.png" in made
    assert (tmp_path / "inner-tcp-tcp-2.svg").stat().st_size > 0
