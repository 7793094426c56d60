"""Scenario: a forgotten idle instance (forgotten_idle.toml).

A 4090 trains for 30 minutes, then its GPU sits at 0 %. idle_gpu's defaults (idle_minutes 30,
warn_before 10m) promise a warning ten minutes ahead and a verified destroy 30 minutes after the
last activity.
"""

from __future__ import annotations

import pytest

from tests.scenarios.helpers import (
    Run,
    assert_spend_never_above_baseline,
    assert_within_tick,
    offset,
    run_scenario,
    tick_seconds,
)

NAME = "forgotten_idle"
INSTANCE = "vast-main/9001"
LAST_ACTIVITY = offset("30m")  # the scripted gpu_util = 0 event
IDLE_LIMIT = offset("30m")  # idle_gpu.idle_minutes default
WARN_BEFORE = offset("10m")  # idle_gpu.warn_before default


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return run_scenario(NAME, tmp_path_factory.mktemp(NAME))


def test_the_idle_instance_is_destroyed_idle_minutes_after_its_last_activity(run: Run) -> None:
    (action,) = run.actions
    assert (action["account"], action["instance"]) == ("vast-main", "9001")
    assert (action["rule"], action["action"], action["dry_run"]) == ("idle_gpu", "destroy", False)
    assert_within_tick(action["offset_s"], LAST_ACTIVITY + IDLE_LIMIT, tick_seconds(NAME))


def test_the_destroy_is_verified_and_the_instance_is_gone(run: Run) -> None:
    (action,) = run.actions
    assert action["result"] == "verified"
    assert action["offset_s"] < action["verified_offset_s"] <= action["offset_s"] + 2 * 60
    assert run.instances[INSTANCE]["final_state"] == "gone"
    assert run.api_calls == ((action["offset_s"], "vast-main", "9001", "destroy"),)


def test_a_warning_goes_out_warn_before_ahead_of_the_destroy(run: Run) -> None:
    (action,) = run.actions
    warnings = [
        note
        for note in run.notifications_for(INSTANCE)
        if note["severity"] == "warning" and note["offset_s"] < action["offset_s"]
    ]
    assert len(warnings) == 1, run.notifications
    assert warnings[0]["rule"] == "idle_gpu"
    assert_within_tick(
        warnings[0]["offset_s"], action["offset_s"] - WARN_BEFORE, tick_seconds(NAME)
    )
    assert "destroy" in warnings[0]["title"]


def test_the_user_is_told_once_the_instance_is_destroyed(run: Run) -> None:
    (action,) = run.actions
    after = [
        note for note in run.notifications_for(INSTANCE) if note["offset_s"] >= action["offset_s"]
    ]
    assert len(after) == 1, run.notifications
    assert "Destroyed" in after[0]["title"]


def test_the_watchdog_saves_money_and_never_costs_any(run: Run) -> None:
    assert_spend_never_above_baseline(run)
    figures = run.instances[INSTANCE]
    assert figures["spend_usd"] < figures["spend_without_watchdog_usd"]
