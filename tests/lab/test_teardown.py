"""What the lab writes for a namespace goes with it (`netns.teardown`)."""

import uuid

from mptlab.netns import emulator_config_path, teardown


def test_teardown_removes_the_emulator_configuration_of_its_namespaces():
    # A namespace name nobody uses: `ip netns del` of it only fails.
    ns = f"mptt{uuid.uuid4().hex[:8]}"
    kept = f"mptt{uuid.uuid4().hex[:8]}"
    emulator_config_path(ns).write_text("{}")
    emulator_config_path(kept).write_text("{}")
    try:
        teardown([], [ns])
        assert not emulator_config_path(ns).exists()
        assert emulator_config_path(kept).exists(), "another run's file stays"
    finally:
        emulator_config_path(ns).unlink(missing_ok=True)
        emulator_config_path(kept).unlink(missing_ok=True)
