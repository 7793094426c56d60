"""Scenario: a late heartbeat every five minutes (heartbeat_blips.toml).

A Vast job ends at 30 minutes; its host is listed ``unknown`` for one poll every five minutes for
as long as the instance lives, the container's start unchanged. Each blip is blind time inside
the same run: the idle clock pauses over it (never counts it) and goes on after it, so idle_gpu
still warns once and destroys once it observed ``idle`` of idleness, instead of re-arming at
every blip and letting the instance bill with no message at all.
"""

from __future__ import annotations

import pytest

from tests.scenarios.helpers import Run, offset, run_scenario

NAME = "heartbeat_blips"
INSTANCE = "vast-main/9001"
LAST_ACTIVITY = offset("30m")
IDLE_LIMIT = offset("30m")  # idle_gpu's default
# Blind time is never idle: each 5-minute cycle loses the blip's poll and the probe's
# reconnection (≈ 2 of 5 minutes here), so the action comes later than LAST_ACTIVITY +
# IDLE_LIMIT — but within twice the limit, far before the scenario's 4 hours.
LATEST = LAST_ACTIVITY + 2 * IDLE_LIMIT


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return run_scenario(NAME, tmp_path_factory.mktemp(NAME))


def test_blips_every_five_minutes_do_not_keep_the_idle_instance_alive(run: Run) -> None:
    (action,) = run.actions_for(INSTANCE)
    assert (action["rule"], action["action"], action["result"]) == (
        "idle_gpu",
        "destroy",
        "verified",
    )
    assert action["idle_onset_offset_s"] == LAST_ACTIVITY  # one episode, never re-armed
    assert LAST_ACTIVITY + IDLE_LIMIT <= action["offset_s"] <= LATEST
    assert run.instances[INSTANCE]["final_state"] == "gone"


def test_the_warning_stands_through_the_blips_once_and_is_never_withdrawn(run: Run) -> None:
    notes = run.notifications_for(INSTANCE)
    warnings = [n for n in notes if n["severity"] == "warning" and "will be" in n["title"]]
    assert len(warnings) == 1, notes
    assert not [n for n in notes if n["title"].startswith("Resolved")], notes
