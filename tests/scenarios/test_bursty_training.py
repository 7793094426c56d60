"""Scenario: a bursty training job (bursty_training.toml).

Two minutes of GPU work every twenty minutes for a whole day. The quiet gaps (18 min) are shorter
than idle_gpu's window (30 min) and even than the point where its warning would go out (20 min),
so the watchdog must neither act nor warn. The contrast case stretches the gaps beyond the
window and shows the same pattern is seen, and acted on, when it really is idle.
"""

from __future__ import annotations

from pathlib import Path

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

NAME = "bursty_training"
INSTANCE = "runpod-main/k3f9x2m7q1w8za"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return run_scenario(NAME, tmp_path_factory.mktemp(NAME))


@pytest.mark.slow
def test_a_bursty_job_is_never_touched_in_24_hours(run: Run) -> None:
    assert run.actions == []
    assert run.api_calls == ()
    assert run.instances[INSTANCE]["final_state"] == "running"


@pytest.mark.slow
def test_a_bursty_job_gets_no_warning_either(run: Run) -> None:
    assert run.notifications == []


@pytest.mark.slow
def test_a_bursty_job_costs_exactly_what_it_costs_without_a_watchdog(run: Run) -> None:
    assert_spend_never_above_baseline(run)
    figures = run.instances[INSTANCE]
    assert figures["spend_usd"] == figures["spend_without_watchdog_usd"]


def test_the_same_bursts_with_gaps_longer_than_the_window_are_destroyed(tmp_path: Path) -> None:
    data = scenario_data(NAME)
    data["duration"] = "2h"
    (instance,) = data["accounts"][0]["instances"]
    instance["events"][0]["gpu_pattern"] = {"period": "3h", "busy_for": "10m", "util": 90}
    run = run_scenario(data, tmp_path)

    (action,) = run.actions
    assert (action["rule"], action["action"], action["result"]) == (
        "idle_gpu",
        "destroy",
        "verified",
    )
    assert_within_tick(action["offset_s"], offset("10m") + offset("30m"), tick_seconds(data))
    assert_spend_never_above_baseline(run)
