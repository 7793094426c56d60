"""Scenario: a provider API outage and its recovery (api_outage.toml).

The Vast API fails from 40m to 1h20m — HTTP 500, stalled connections, or truncated JSON (which
the simulated provider answers *after* carrying out the request). SSH keeps working. What the
watchdog knows about the instances' states during the outage is stale, so it must not act on
it: nothing is stopped or destroyed during the outage, the busy instances are never touched
(9003 was restarted by its owner during the outage while the last listing still says
"stopped"), and once the API answers again the forgotten instance 9001 is destroyed.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.scenarios.helpers import (
    ENFORCE,
    Run,
    assert_spend_never_above_baseline,
    offset,
    run_scenario,
    scenario_data,
    tick_seconds,
)

NAME = "api_outage"
OUTAGE_START = offset("40m")
RECOVERY = offset("1h20m")
FORGOTTEN = "vast-main/9001"
TRAINING = "vast-main/9002"
RESUMED = "vast-main/9003"
CONFIG = f'{ENFORCE}\n[rules.stopped_disk]\nafter = "1h"\nwarn_before = "10m"\n'
FAULTS = ("error500", "timeout", "malformed")


def with_fault(fault: str) -> dict[str, Any]:
    data = scenario_data(NAME)
    outage = data["accounts"][0]["events"][0]
    assert outage["at"] == "40m"
    outage["api"] = fault
    return data


@pytest.fixture(scope="module", params=FAULTS)
def run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Run:
    fault = str(request.param)
    return run_scenario(with_fault(fault), tmp_path_factory.mktemp(f"{NAME}-{fault}"), CONFIG)


def describe(run: Run) -> list[tuple[Any, ...]]:
    return [(a["offset_s"], a["instance"], a["rule"], a["result"]) for a in run.actions]


def test_nothing_is_decided_or_done_during_the_outage(run: Run) -> None:
    during = [a for a in run.actions if OUTAGE_START <= a["offset_s"] < RECOVERY]
    calls = [c for c in run.api_calls if OUTAGE_START <= c[0] < RECOVERY]
    assert during == [], describe(run)
    assert calls == [], run.api_calls


def test_an_instance_restarted_during_the_outage_is_never_destroyed(run: Run) -> None:
    assert run.actions_for(RESUMED) == [], describe(run)
    assert run.instances[RESUMED]["final_state"] == "running"


def test_a_busy_instance_is_never_touched(run: Run) -> None:
    assert run.actions_for(TRAINING) == []
    assert run.instances[TRAINING]["final_state"] == "running"


def test_the_forgotten_instance_is_destroyed_after_the_recovery(run: Run) -> None:
    (action,) = run.actions_for(FORGOTTEN)
    assert (action["rule"], action["action"]) == ("idle_gpu", "destroy")
    # The first tick that lists the account again may overrun a little (stalled calls).
    assert RECOVERY <= action["offset_s"] <= RECOVERY + 2 * tick_seconds(NAME), describe(run)
    assert action["result"] == "verified"
    assert run.instances[FORGOTTEN]["final_state"] == "gone"


def test_the_outage_never_makes_the_watchdog_cost_money(run: Run) -> None:
    assert_spend_never_above_baseline(run)


def test_a_warning_given_on_stale_data_is_withdrawn_once_the_listing_works(run: Run) -> None:
    notes = run.notifications_for(RESUMED)
    warned = [note for note in notes if note["severity"] == "warning"]
    withdrawn = [note for note in notes if note["severity"] == "info"]
    assert [note["rule"] for note in warned] == ["stopped_disk"]
    assert len(withdrawn) == 1
    assert RECOVERY <= withdrawn[0]["offset_s"] <= RECOVERY + 2 * tick_seconds(NAME)
