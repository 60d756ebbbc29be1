"""The concentrator scenario: its settings (which systems it runs) and
what it reads of the server's view of each client."""

import pytest
from mptlab.concentrate import Settings, client_variant


def test_a_variant_that_only_adds_to_the_clients_files_is_a_system() -> None:
    s = Settings.from_dict({"systems": ["mpt", "mpt-pushback", "mptcp"]})
    assert s.systems == ["mpt", "mpt-pushback", "mptcp"]
    assert client_variant("mpt-pushback") == "[scheduler]\nlocal_queue_ms = 4"
    assert client_variant("mpt") is None


def test_other_variants_are_refused_with_the_list() -> None:
    # Static weights from the lab's link rates change more than a file.
    with pytest.raises(ValueError, match="unknown system 'mpt-wrr'.*mpt-pushback"):
        Settings.from_dict({"systems": ["mpt-wrr"]})


def test_client_extra_is_kept_as_text() -> None:
    s = Settings.from_dict({"client_extra": "[reorder]\nrecover = false"})
    assert s.client_extra == "[reorder]\nrecover = false"


def test_the_datagrams_lost_on_a_clients_links_are_the_servers_path_gaps() -> None:
    from mptlab.concentrate import path_gaps

    # `mpt status --peer NAME --json` of a concentrator, trimmed.
    doc = {
        "name": "client0",
        "tunnel": {"paths": [{"id": 0, "rx_lost": 185}, {"id": 1, "rx_lost": None}]},
    }
    assert path_gaps(doc) == 185
    assert path_gaps({"name": "client1"}) == 0


def test_the_emulators_lateness_is_the_mean_over_every_frame_and_the_largest() -> None:
    from mptlab.concentrate import emulator_late

    def d(passed: int, late_sum_ms: float, late_max_ms: float) -> dict:
        st = {"passed": passed, "late_ns_sum": int(late_sum_ms * 1e6)}
        return {"stats": {**st, "late_ns_max": int(late_max_ms * 1e6)}}

    doc = {"directions": [d(100, 50.0, 2.0), d(300, 350.0, 19.0), d(0, 0, 0)]}
    mean, largest = emulator_late(doc)  # type: ignore[misc]
    assert abs(mean - 1.0) < 1e-9 and largest == 19.0
    assert emulator_late(None) is None
    assert emulator_late({"directions": [d(0, 0, 0)]}) is None
