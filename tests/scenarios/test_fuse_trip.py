"""Scenario: the blast-radius fuse (fuse_trip.toml).

Ten instances go idle at the same moment. With ``[safety] max_actions_per_tick = 3`` the tick at
which all ten fall due destroys three, blocks the other seven (result "blocked"), and alerts
critically that the fuse tripped; the fuse then latches, so nothing else is destroyed until a
human resets it.
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

NAME = "fuse_trip"
PER_TICK = 3
CONFIG = f"{ENFORCE}\n[safety]\nmax_actions_per_tick = {PER_TICK}\n"
INSTANCES = 10
DUE_AT = offset("20m") + offset("30m")  # idle from 20m, idle_minutes 30


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return run_scenario(NAME, tmp_path_factory.mktemp(NAME), CONFIG)


def by_result(run: Run, result: str) -> list[dict[str, object]]:
    return [action for action in run.actions if action["result"] == result]


def test_all_ten_fall_due_in_the_same_tick(run: Run) -> None:
    assert len(run.actions) == INSTANCES
    (offset_s,) = {action["offset_s"] for action in run.actions}
    assert isinstance(offset_s, int)
    assert_within_tick(offset_s, DUE_AT, tick_seconds(NAME))


def test_only_max_actions_per_tick_are_destroyed(run: Run) -> None:
    destroyed = by_result(run, "verified")
    assert len(destroyed) == PER_TICK
    assert len(run.api_calls) == PER_TICK
    assert {f"vast-farm/{call[2]}" for call in run.api_calls} == {
        f"{action['account']}/{action['instance']}" for action in destroyed
    }
    gone = [key for key, figures in run.instances.items() if figures["final_state"] == "gone"]
    assert len(gone) == PER_TICK


def test_the_rest_are_blocked_and_keep_running(run: Run) -> None:
    blocked = by_result(run, "blocked")
    assert len(blocked) == INSTANCES - PER_TICK
    for action in blocked:
        key = f"{action['account']}/{action['instance']}"
        assert run.instances[key]["final_state"] == "running", key


def test_the_fuse_trip_is_a_critical_alert(run: Run) -> None:
    (offset_s,) = {action["offset_s"] for action in run.actions}
    fleet_alerts = [note for note in run.notifications if note["instance"] is None]
    assert [(note["severity"], note["offset_s"]) for note in fleet_alerts] == [
        ("critical", offset_s)
    ]
    per_instance = [
        note
        for note in run.notifications
        if note["instance"] is not None and note["severity"] == "critical"
    ]
    assert len(per_instance) == INSTANCES - PER_TICK


def test_the_latched_fuse_holds_everything_until_a_human_resets_it(run: Run) -> None:
    (offset_s,) = {action["offset_s"] for action in run.actions}
    assert all(call[0] == offset_s for call in run.api_calls)
    # The blocked seven stay idle for the rest of the run and are never retried.
    assert len(run.actions) == INSTANCES


def test_the_fuse_never_makes_the_watchdog_cost_money(run: Run) -> None:
    assert_spend_never_above_baseline(run)
