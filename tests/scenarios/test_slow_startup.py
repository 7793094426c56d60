"""Scenario: a slow start-up (slow_startup.toml).

A 2-GPU job loads data for 40 minutes with its GPUs at 0 %, then trains for hours. idle_gpu arms
``arm_after`` (20 min) after the instance started running, so the earliest it could act is at
50 min and the earliest warning at 40 min — exactly when the training starts. The product
promises no destroy; the variants show what the user sees when loading takes a little longer
(a warning, then an all-clear) and much longer (the documented limit applies).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.scenarios.helpers import (
    Run,
    assert_spend_never_above_baseline,
    assert_within_tick,
    offset,
    run_scenario,
    scenario_data,
    tick_seconds,
)

NAME = "slow_startup"
INSTANCE = "runpod-main/p4q8r2s6t0u3vw"
ARM_AFTER = offset("20m")
IDLE_LIMIT = offset("30m")
WARN_BEFORE = offset("10m")


def with_loading_time(loading: str, duration: str = "1h30m") -> dict[str, Any]:
    data = scenario_data(NAME)
    data["duration"] = duration
    data["accounts"][0]["instances"][0]["events"][1]["at"] = loading
    return data


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return run_scenario(NAME, tmp_path_factory.mktemp(NAME))


def test_a_job_loading_data_for_40_minutes_is_never_destroyed(run: Run) -> None:
    assert run.actions == []
    assert run.api_calls == ()
    assert run.instances[INSTANCE]["final_state"] == "running"


def test_a_job_loading_data_for_40_minutes_gets_no_warning(run: Run) -> None:
    # The warning window opens at arm_after + idle_minutes - warn_before = 40m, the very tick
    # the training shows up in the samples: the activity wins.
    assert run.notifications == []


def test_a_slow_start_up_costs_nothing_extra(run: Run) -> None:
    assert_spend_never_above_baseline(run)
    figures = run.instances[INSTANCE]
    assert figures["spend_usd"] == figures["spend_without_watchdog_usd"]


def test_loading_for_45_minutes_gets_a_warning_then_an_all_clear_and_no_destroy(
    tmp_path: Path,
) -> None:
    data = with_loading_time("45m")
    run = run_scenario(data, tmp_path)

    assert run.actions == []
    warning, all_clear = run.notifications_for(INSTANCE)
    assert (warning["severity"], warning["rule"]) == ("warning", "idle_gpu")
    assert_within_tick(
        warning["offset_s"], ARM_AFTER + IDLE_LIMIT - WARN_BEFORE, tick_seconds(data)
    )
    assert (all_clear["severity"], all_clear["rule"]) == ("info", "idle_gpu")
    assert_within_tick(all_clear["offset_s"], offset("45m"), tick_seconds(data))
    assert_spend_never_above_baseline(run)


def test_loading_for_longer_than_arm_after_plus_the_window_is_destroyed_at_that_limit(
    tmp_path: Path,
) -> None:
    data = with_loading_time("1h10m")
    run = run_scenario(data, tmp_path)

    (action,) = run.actions
    assert (action["rule"], action["action"], action["result"]) == (
        "idle_gpu",
        "destroy",
        "verified",
    )
    assert action["offset_s"] < offset("1h10m")
    assert_within_tick(action["offset_s"], ARM_AFTER + IDLE_LIMIT, tick_seconds(data))
    assert_spend_never_above_baseline(run)
