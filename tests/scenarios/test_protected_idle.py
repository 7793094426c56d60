"""Scenario: a protected instance idle for hours (protected_idle.toml).

``[safety] protect_names = ["*keep*"]``: the protected notebook is reported once when idle_gpu
would have acted and is never destroyed; the unprotected instance next to it is destroyed on
time. The notebook's idle episode lasts far longer than the rules' sample lookback: the report
must not repeat, and no "resolved" message may claim the GPU is busy again.
"""

from __future__ import annotations

import pytest

from tests.scenarios.helpers import (
    ENFORCE,
    Run,
    assert_spend_never_above_baseline,
    assert_within_tick,
    offset,
    run_scenario,
    tick_seconds,
)

NAME = "protected_idle"
CONFIG = f'{ENFORCE}\n[safety]\nprotect_names = ["*keep*"]\n'
PROTECTED = "vast-main/9801"
FORGOTTEN = "vast-main/9802"
IDLE_FROM = offset("30m")
IDLE_LIMIT = offset("30m")
WARN_BEFORE = offset("10m")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return run_scenario(NAME, tmp_path_factory.mktemp(NAME), CONFIG)


def test_a_protected_idle_instance_is_never_touched(run: Run) -> None:
    assert run.actions_for(PROTECTED) == []
    assert run.instances[PROTECTED]["final_state"] == "running"
    assert [call[2] for call in run.api_calls] == ["9802"]


def test_a_protected_idle_instance_is_reported_once_for_the_whole_episode(run: Run) -> None:
    notes = run.notifications_for(PROTECTED)
    seen = [(note["offset_s"], note["severity"], note["rule"]) for note in notes]
    assert len(notes) == 1, seen
    assert notes[0]["rule"] == "idle_gpu"
    # Reported from the moment the warning would have gone out.
    assert_within_tick(
        notes[0]["offset_s"], IDLE_FROM + IDLE_LIMIT - WARN_BEFORE, tick_seconds(NAME)
    )


def test_the_unprotected_neighbour_is_destroyed_on_time(run: Run) -> None:
    (action,) = run.actions_for(FORGOTTEN)
    assert (action["rule"], action["action"], action["result"]) == (
        "idle_gpu",
        "destroy",
        "verified",
    )
    assert_within_tick(action["offset_s"], IDLE_FROM + IDLE_LIMIT, tick_seconds(NAME))


def test_protection_never_costs_more_than_no_watchdog(run: Run) -> None:
    assert_spend_never_above_baseline(run)
    protected = run.instances[PROTECTED]
    assert protected["spend_usd"] == protected["spend_without_watchdog_usd"]
