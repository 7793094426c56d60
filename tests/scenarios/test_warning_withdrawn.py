"""Scenario: a withdrawn warning restarts the clock (warning_withdrawn.toml).

Warned at 40m, the instance goes blind at 42m and the warning is withdrawn (a resolution saying
the destroy is cancelled). When SSH is back and the GPU is still idle, the destroy must follow a
*new* warning sent at least ``warn_before`` (10 min) earlier — before the fix it came with no new
warning at all, because the episode's warning key had been used once already.
"""

from __future__ import annotations

import pytest

from tests.scenarios.helpers import ENFORCE, Run, offset, run_scenario

NAME = "warning_withdrawn"
INSTANCE = "vast-main/9301"
WARN_BEFORE = offset("10m")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return run_scenario(NAME, tmp_path_factory.mktemp(NAME), ENFORCE)


def idle_notes(run: Run) -> list[tuple[int, str, str]]:
    return [
        (int(note["offset_s"]), note["severity"], str(note["title"]))
        for note in run.notifications_for(INSTANCE)
        if note["rule"] == "idle_gpu"
    ]


def test_the_first_warning_is_withdrawn_when_the_gpu_goes_unobserved(run: Run) -> None:
    notes = idle_notes(run)
    # Idle from a tick (20m): 20 min later the newest rows are a few seconds old (the host
    # sends them every 5 s, docs/probe.md), so the warning comes at 40m or at the next tick.
    assert offset("40m") <= notes[0][0] <= offset("41m")
    assert notes[0][1] == "warning"
    assert notes[1][1] == "info"
    assert notes[1][2].startswith("Resolved")
    assert offset("42m") < notes[1][0] < offset("2h")


def test_the_destroy_follows_a_new_standing_warning_warn_before_ahead(run: Run) -> None:
    (action,) = run.actions
    assert action["result"] == "verified"
    destroyed_at = int(action["offset_s"])
    assert destroyed_at > offset("2h")
    notes = idle_notes(run)
    withdrawn_at = notes[1][0]
    rewarned = [
        at
        for at, severity, title in notes
        if severity == "warning" and withdrawn_at < at and "will be destroyed" in title
    ]
    assert rewarned, "no new warning after the withdrawal"
    assert rewarned[0] <= destroyed_at - WARN_BEFORE
    assert not [
        at for at, severity, _ in notes if withdrawn_at < at < destroyed_at and severity == "info"
    ]
