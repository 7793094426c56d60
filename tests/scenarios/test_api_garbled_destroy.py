"""Scenario: a destroy the provider carries out but answers with garbage
(api_garbled_destroy.toml).

"Verify every kill": a call whose answer cannot be read has an unknown outcome, so the watchdog
re-lists until it knows. Here the instance is gone after the call: the action must end verified,
with no "could not destroy" alarm about an instance that no longer exists.
"""

from __future__ import annotations

import pytest

from tests.scenarios.helpers import (
    Run,
    assert_spend_never_above_baseline,
    offset,
    run_scenario,
)

NAME = "api_garbled_destroy"
INSTANCE = "vast-main/9001"
GARBLED_FROM = offset("40m")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return run_scenario(NAME, tmp_path_factory.mktemp(NAME))


def test_the_scenario_sends_the_destroy_while_answers_are_garbled(run: Run) -> None:
    # The precondition: exactly one destroy reached the provider, during the garbled answers.
    ((at, _account, _instance, kind),) = run.api_calls
    assert kind == "destroy"
    assert at >= GARBLED_FROM
    assert run.instances[INSTANCE]["final_state"] == "gone"


def test_a_destroy_with_an_unreadable_answer_is_verified_by_re_listing(run: Run) -> None:
    (action,) = run.actions_for(INSTANCE)
    assert action["result"] == "verified", action


def test_no_alarm_claims_a_destroy_failed_when_the_instance_is_gone(run: Run) -> None:
    critical = [
        note["title"] for note in run.notifications_for(INSTANCE) if note["severity"] == "critical"
    ]
    assert critical == []


def test_a_garbled_answer_never_makes_the_watchdog_cost_money(run: Run) -> None:
    assert_spend_never_above_baseline(run)
