"""Scenario: weak evidence tries to get a busy pod destroyed (weak_evidence.toml).

Each pod runs a job busy 2 s every 9 min, between RunPod's polls, so the API's utilisation
figure reads 0 % at every poll. The SSH probe is made to see nothing (output that is no dmon
rows) or almost nothing (50 s of rows every 10 min). Before evidence had a strength, the idle
readings filled the holes and both pods were destroyed half an hour in; now a reading proves
busy, never idle (docs/safety.md, "Evidence strength"), the holes stay blind, and neither is
destroyed: each is alerted as looking idle per the provider.
"""

from __future__ import annotations

import pytest

from tests.scenarios.helpers import Run, assert_spend_never_above_baseline, run_scenario

NAME = "weak_evidence"
GARBAGE = "runpod-main/garbagepod01"
FLAPPING = "runpod-main/flappod00001"
CONTROL = "runpod-main/busypod00001"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return run_scenario(NAME, tmp_path_factory.mktemp(NAME))


def test_no_busy_pod_is_destroyed(run: Run) -> None:
    assert run.actions == []
    assert run.api_calls == ()
    for pod in (GARBAGE, FLAPPING, CONTROL):
        assert run.instances[pod]["final_state"] == "running", pod


def test_unparseable_ssh_and_idle_readings_give_an_alert_not_a_destroy_warning(run: Run) -> None:
    rules = [(n["rule"], n["title"]) for n in run.notifications_for(GARBAGE)]
    assert {rule for rule, _title in rules} == {"idle_gpu", "unobserved"}
    (idle,) = [title for rule, title in rules if rule == "idle_gpu"]
    assert "not destroyed: looks idle per the provider" in idle
    assert "unparseable" in next(title for rule, title in rules if rule == "unobserved")


def test_a_few_idle_rows_with_blind_stretches_between_them_prove_nothing(run: Run) -> None:
    idle = [n for n in run.notifications_for(FLAPPING) if n["rule"] == "idle_gpu"]
    assert idle, run.notifications
    assert all("will be destroyed" not in note["title"] for note in idle)
    assert all(
        "not destroyed" in note["title"] or note["title"].startswith("Resolved") for note in idle
    )


def test_the_pod_the_probe_sees_working_gets_no_message(run: Run) -> None:
    assert run.notifications_for(CONTROL) == []


def test_the_watchdog_never_costs_more_than_none(run: Run) -> None:
    assert_spend_never_above_baseline(run)
