"""Scenario: a stopped instance with a 200 GB disk (stopped_disk.toml).

A RunPod pod is stopped at 30 min and forgotten; its volume bills at twice the running rate.
stopped_disk's defaults (after 24h, warn_before 1h) promise a warning 23 hours after the stop and
a verified destroy 24 hours after it. The scenario polls every 5 minutes.
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

NAME = "stopped_disk"
INSTANCE = "runpod-main/h7j3k9l2m5n8pq"
STOPPED_AT = offset("30m")
AFTER = offset("24h")
WARN_BEFORE = offset("1h")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return run_scenario(NAME, tmp_path_factory.mktemp(NAME))


def test_a_stopped_disk_is_destroyed_24_hours_after_the_stop(run: Run) -> None:
    (action,) = run.actions
    assert (action["rule"], action["action"], action["dry_run"]) == (
        "stopped_disk",
        "destroy",
        False,
    )
    assert_within_tick(action["offset_s"], STOPPED_AT + AFTER, tick_seconds(NAME))
    assert run.api_calls == ((action["offset_s"], "runpod-main", "h7j3k9l2m5n8pq", "destroy"),)


def test_the_destroy_is_verified_and_the_pod_is_gone(run: Run) -> None:
    (action,) = run.actions
    assert action["result"] == "verified"
    assert run.instances[INSTANCE]["final_state"] == "gone"


def test_the_owner_is_warned_an_hour_ahead_and_only_once(run: Run) -> None:
    (action,) = run.actions
    warnings = [
        note for note in run.notifications_for(INSTANCE) if note["offset_s"] < action["offset_s"]
    ]
    assert [(note["severity"], note["rule"]) for note in warnings] == [("warning", "stopped_disk")]
    assert_within_tick(
        warnings[0]["offset_s"], action["offset_s"] - WARN_BEFORE, tick_seconds(NAME)
    )


def test_destroying_the_stopped_disk_saves_money(run: Run) -> None:
    assert_spend_never_above_baseline(run)
    figures = run.instances[INSTANCE]
    assert figures["spend_usd"] < figures["spend_without_watchdog_usd"]
