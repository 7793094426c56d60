"""Scenario: one late heartbeat inside an idle run (heartbeat_blip.toml).

A Vast job ends at 30 minutes; at 45 minutes the host misses its heartbeats for one poll
(``actual_status: unknown``, the container's start unchanged). The blip is blind time inside the
same run: idle_gpu destroys after 30 minutes of observed idleness, the blind minute not counted,
instead of re-arming as if a new run had started (≈ 1h36m).
"""

from __future__ import annotations

import pytest

from tests.scenarios.helpers import Run, offset, run_scenario, tick_seconds

NAME = "heartbeat_blip"
INSTANCE = "vast-main/9001"
LAST_ACTIVITY = offset("30m")
IDLE_LIMIT = offset("30m")  # idle_gpu's default
BLIP = offset("1m")  # one poll listed unknown
# The probe needs a tick or two after the blip to read the host again: blind, not idle.
RECONNECT = 2 * tick_seconds(NAME)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return run_scenario(NAME, tmp_path_factory.mktemp(NAME))


def test_the_idle_instance_is_destroyed_at_its_idle_limit_plus_only_the_blind_minutes(
    run: Run,
) -> None:
    (action,) = run.actions_for(INSTANCE)
    assert (action["rule"], action["action"], action["result"]) == (
        "idle_gpu",
        "destroy",
        "verified",
    )
    assert action["idle_onset_offset_s"] == LAST_ACTIVITY  # the episode did not restart
    earliest = LAST_ACTIVITY + IDLE_LIMIT
    assert earliest <= action["offset_s"] <= earliest + BLIP + RECONNECT + tick_seconds(NAME)


def test_one_warning_goes_out_and_the_blip_withdraws_nothing(run: Run) -> None:
    notes = run.notifications_for(INSTANCE)
    warnings = [n for n in notes if n["severity"] == "warning" and "will be" in n["title"]]
    assert len(warnings) == 1, notes
    assert not [n for n in notes if n["title"].startswith("Resolved")], notes
