"""Scenario: an outbid interruptible instance (outbid_interruptible.toml).

A bid instance is paused by the provider at 15 min (outbid): no GPU, a 400 GB disk still
billing. paused_interruptible's defaults (after 30m, warn_before 10m) promise a warning at 35 min
and a verified destroy at 45 min.
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

NAME = "outbid_interruptible"
INSTANCE = "vast-bids/9101"
PAUSED_AT = offset("15m")
AFTER = offset("30m")
WARN_BEFORE = offset("10m")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return run_scenario(NAME, tmp_path_factory.mktemp(NAME))


def test_a_paused_interruptible_is_destroyed_30_minutes_after_it_was_paused(run: Run) -> None:
    (action,) = run.actions
    assert (action["rule"], action["action"], action["dry_run"]) == (
        "paused_interruptible",
        "destroy",
        False,
    )
    assert_within_tick(action["offset_s"], PAUSED_AT + AFTER, tick_seconds(NAME))
    assert run.api_calls == ((action["offset_s"], "vast-bids", "9101", "destroy"),)


def test_the_destroy_is_verified_and_the_instance_is_gone(run: Run) -> None:
    (action,) = run.actions
    assert action["result"] == "verified"
    assert action["verified_offset_s"] > action["offset_s"]
    assert run.instances[INSTANCE]["final_state"] == "gone"


def test_the_owner_is_warned_warn_before_ahead(run: Run) -> None:
    (action,) = run.actions
    warnings = [
        note
        for note in run.notifications_for(INSTANCE)
        if note["severity"] == "warning" and note["offset_s"] < action["offset_s"]
    ]
    assert [note["rule"] for note in warnings] == ["paused_interruptible"]
    assert_within_tick(
        warnings[0]["offset_s"], action["offset_s"] - WARN_BEFORE, tick_seconds(NAME)
    )


def test_destroying_the_paused_disk_saves_its_storage(run: Run) -> None:
    assert_spend_never_above_baseline(run)
    figures = run.instances[INSTANCE]
    assert figures["spend_usd"] < figures["spend_without_watchdog_usd"]
