"""Scenario: a budget crossed during one provider's outage (budget_during_outage.toml).

Global ``daily_usd = 30`` over $24/h (Vast $16/h, RunPod $8/h): the day's $30 is reached at
1h15m. Vast answers HTTP 500 from 1h05m to 2h. Unknown spend is estimated pessimistically — the
Vast instances keep billing their last known rate while unreadable — so the breach is seen at
1h15m and the RunPod pod, which can be acted on, is destroyed then (before this fix: at 1h45m,
the Vast spend having stopped counting a few minutes after its last listing). The Vast
instances wait for a listing that works. The outage is told once (a warning after
``outage_after``, with what it cannot protect) and its end once.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from tests.scenarios.helpers import (
    ENFORCE,
    Run,
    assert_spend_never_above_baseline,
    finish,
    offset,
    run_scenario,
    scenario_data,
    simulating,
    tick_seconds,
)
from watchdog_gpu.model import AccountObservation, AccountSnapshot, InstanceSnapshot, InstanceState

NAME = "budget_during_outage"
CONFIG = f"{ENFORCE}\n[rules.budget]\ndaily_usd = 30.0\n"
OUTAGE_START = offset("1h05m")
RECOVERY = offset("2h")
OUTAGE_AFTER = offset("10m")  # the documented default
CROSSING = 30.0 / 24.0 * 3600  # $30 at $24/h: 1h15m
RUNPOD = "runpod-main/p8q7r6s5t4u3vw"
VAST = ("vast-main/9301", "vast-main/9302")
TICK = tick_seconds(NAME)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return run_scenario(NAME, tmp_path_factory.mktemp(NAME), CONFIG)


def outage_notes(run: Run) -> list[dict[str, object]]:
    return [n for n in run.notifications if n["rule"] == "account_health"]


def test_the_account_that_can_be_acted_on_is_destroyed_at_the_breach(run: Run) -> None:
    (action,) = run.actions_for(RUNPOD)
    assert (action["rule"], action["action"], action["result"]) == ("budget", "destroy", "verified")
    assert CROSSING <= action["offset_s"] <= CROSSING + TICK, action
    assert OUTAGE_START < action["offset_s"] < RECOVERY


def test_the_unreadable_account_is_acted_on_once_it_can_be_listed(run: Run) -> None:
    for key in VAST:
        (action,) = run.actions_for(key)
        assert (action["rule"], action["action"], action["result"]) == (
            "budget",
            "destroy",
            "verified",
        )
        assert RECOVERY <= action["offset_s"] <= RECOVERY + 2 * TICK, action
        assert run.instances[key]["final_state"] == "gone"
    calls = [c for c in run.api_calls if c[1] == "vast-main"]
    assert all(at >= RECOVERY for at, *_rest in calls), calls


def test_the_outage_is_told_once_with_what_is_at_risk_and_its_end_once(run: Run) -> None:
    notes = outage_notes(run)
    assert [(n["severity"], n["account"], n["instance"]) for n in notes] == [
        ("warning", "vast-main", None),
        ("info", "vast-main", None),
    ]
    warned, recovered = notes
    assert isinstance(warned["offset_s"], int)
    assert OUTAGE_START + OUTAGE_AFTER - TICK <= warned["offset_s"] <= OUTAGE_START + OUTAGE_AFTER
    assert isinstance(recovered["offset_s"], int)
    assert RECOVERY <= recovered["offset_s"] <= RECOVERY + 2 * TICK
    bodies = {
        note.severity.value: note.body for _at, note in run.sent if note.rule == "account_health"
    }
    assert "2 instance(s) at $16.00/h" in bodies["warning"]
    assert "transient" in bodies["warning"]
    assert "recovered" in bodies["info"]


def test_the_outage_estimate_never_makes_anything_cost_more(run: Run) -> None:
    assert_spend_never_above_baseline(run)


def test_a_blip_shorter_than_outage_after_is_not_told(tmp_path: Path) -> None:
    data = scenario_data(NAME)
    data["accounts"][0]["events"][1]["at"] = "1h12m"  # a 7-minute outage
    data["duration"] = "1h20m"
    blip = run_scenario(data, tmp_path, f"{ENFORCE}\n[rules.budget]\ndaily_usd = 300.0\n")
    assert outage_notes(blip) == []
    assert blip.actions == []


def test_a_restart_during_the_outage_tells_it_no_second_time(tmp_path: Path) -> None:
    # Record first, act second: the warning is an outbox row keyed by the outage's episode, so
    # a daemon restarted in the middle of the outage neither repeats it nor loses the recovery.
    with simulating(NAME, tmp_path, CONFIG) as sim:
        restart_at = sim.scenario.start + timedelta(seconds=OUTAGE_START + OUTAGE_AFTER + 600)
        while sim.next_tick <= restart_at:
            sim.step()
        sim.restart()
        restarted = finish(sim)
    assert [(n["severity"], n["account"]) for n in outage_notes(restarted)] == [
        ("warning", "vast-main"),
        ("info", "vast-main"),
    ]
    delivered = [
        note.severity.value for _at, note in restarted.sent if note.rule == "account_health"
    ]
    assert delivered == ["warning", "info"]  # pushed once each, across the restart
    (action,) = restarted.actions_for(RUNPOD)
    assert CROSSING <= action["offset_s"] <= CROSSING + TICK


def test_an_account_removed_from_the_configuration_accrues_no_estimate(tmp_path: Path) -> None:
    # The database still holds a $50/h instance of an account that is no longer configured
    # (last listed at the start). It is not polled any more: its last rate must not keep
    # accruing as estimated spend, or it would trip the budget on the accounts still watched.
    data = scenario_data(NAME)
    data["accounts"][0]["events"] = []  # no outage here
    data["duration"] = "1h"
    with simulating(data, tmp_path, f"{ENFORCE}\n[rules.budget]\ndaily_usd = 30.0\n") as sim:
        start = sim.scenario.start
        old = InstanceSnapshot(
            provider="vast",
            account="vast-old",
            instance_id="1",
            name="left-behind",
            state=InstanceState.RUNNING,
            raw_state="running",
            observed_at=start,
            compute_usd_per_hour=50.0,
            storage_usd_per_hour=0.0,
        )
        sim.store.record_observation(
            AccountObservation(AccountSnapshot("vast", "vast-old", start), (old,)), start
        )
        run = finish(sim)
    # $24/h for one hour stays under $30: nothing is destroyed.
    assert run.actions == []
