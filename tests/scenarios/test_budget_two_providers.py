"""Scenario: a budget breach across two providers (budget_two_providers.toml).

``[rules.budget] daily_usd = 10`` over a Vast and a RunPod account, with ``[safety]
protect_names = ["*keep*"]``. The fleet bills about $22/h, so the global daily spend reaches $10
in the first half hour. The budget emergency skips grace: at the first tick after the crossing
every billing, unprotected instance is destroyed (busy or stopped alike), and the protected one
is reported critically and left running.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.scenarios.helpers import (
    ENFORCE,
    Run,
    assert_spend_never_above_baseline,
    load,
    run_scenario,
    scenario_data,
    tick_seconds,
)

NAME = "budget_two_providers"
DAILY_USD = 10.0
CONFIG = f"""{ENFORCE}
[rules.budget]
daily_usd = {DAILY_USD}

[safety]
protect_names = ["*keep*"]
"""
PROTECTED = "vast-main/9202"
UNPROTECTED = ("vast-main/9201", "runpod-main/r1s2t3u4v5w6xy", "runpod-main/z9y8x7w6v5u4ts")
# Storage is priced per month: 720 h on Vast, 730 h on RunPod (docs/scenario-format.md).
MONTH_HOURS = {"vast": 720.0, "runpod": 730.0}


def crossing_offset_s() -> float:
    """When the fleet's spend reaches the ceiling: every rate is constant until then."""
    rate = 0.0
    for account in load(NAME).accounts:
        for instance in account.instances:
            state = instance.events[0].state
            storage = (
                instance.disk_gb * instance.storage_usd_per_gb_month / MONTH_HOURS[account.provider]
            )
            if state == "running":
                rate += instance.compute_usd_per_hour + storage
            else:
                rate += storage * instance.stopped_storage_multiplier
    return DAILY_USD / rate * 3600


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return run_scenario(NAME, tmp_path_factory.mktemp(NAME), CONFIG)


def test_every_billing_unprotected_instance_is_destroyed_at_the_breach(run: Run) -> None:
    crossing = crossing_offset_s()
    for key in UNPROTECTED:
        (action,) = run.actions_for(key)
        assert (action["rule"], action["action"], action["dry_run"]) == ("budget", "destroy", False)
        assert crossing <= action["offset_s"] <= crossing + tick_seconds(NAME), key
        assert action["result"] == "verified", key
        assert run.instances[key]["final_state"] == "gone", key


def test_each_instance_is_destroyed_by_exactly_one_provider_call(run: Run) -> None:
    called = sorted(f"{account}/{instance}" for _at, account, instance, _kind in run.api_calls)
    assert called == sorted(UNPROTECTED)
    assert {kind for *_rest, kind in run.api_calls} == {"destroy"}


def test_the_protected_instance_is_never_touched(run: Run) -> None:
    assert run.actions_for(PROTECTED) == []
    assert run.instances[PROTECTED]["final_state"] == "running"


def test_the_protected_instance_is_reported_critically_once(run: Run) -> None:
    notes = run.notifications_for(PROTECTED)
    assert [(note["severity"], note["rule"]) for note in notes] == [("critical", "budget")]
    assert crossing_offset_s() <= notes[0]["offset_s"] <= crossing_offset_s() + tick_seconds(NAME)


def test_the_budget_emergency_costs_less_than_no_watchdog(run: Run) -> None:
    assert_spend_never_above_baseline(run)
    for key in UNPROTECTED:
        figures = run.instances[key]
        assert figures["spend_usd"] < figures["spend_without_watchdog_usd"], key
    protected = run.instances[PROTECTED]
    assert protected["spend_usd"] == protected["spend_without_watchdog_usd"]


def test_without_a_ceiling_nothing_is_touched(tmp_path: Path) -> None:
    data = scenario_data(NAME)
    data["duration"] = "45m"
    run = run_scenario(data, tmp_path, ENFORCE)
    assert run.actions == []
    assert run.api_calls == ()
    assert_spend_never_above_baseline(run)
