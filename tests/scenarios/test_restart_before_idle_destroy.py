"""Scenario: the user restarts an idle pod for a new job a second before its idle destroy
(restart_before_idle_destroy.toml).

The new job loads its data first: its dmon rows look as idle as the old run's, and the destroy
is decided on the listing of the tick before, which shows the old run. The executor lists the
account again right before the call, sees the pod started again (a new run), and leaves the
decision to the planner, whose next evaluation judges the new run (not armed before
``arm_after``): the destroy is cancelled, the new job keeps its pod. Without the fresh listing
at the call the new job's pod was destroyed.
"""

from __future__ import annotations

import pytest

from tests.scenarios.helpers import Run, assert_spend_never_above_baseline, offset, run_scenario

NAME = "restart_before_idle_destroy"
INSTANCE = "runpod-main/restartpod01"
RESTARTED_AT = offset("1h0m5s")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return run_scenario(NAME, tmp_path_factory.mktemp(NAME))


def test_the_destroy_decided_on_the_old_run_is_cancelled_not_called(run: Run) -> None:
    assert [(a["rule"], a["result"]) for a in run.actions] == [("idle_gpu", "cancelled")]
    assert run.actions[0]["offset_s"] > RESTARTED_AT
    assert run.api_calls == ()
    assert run.instances[INSTANCE]["final_state"] == "running"


def test_the_warning_is_resolved(run: Run) -> None:
    idle = [note for note in run.notifications_for(INSTANCE) if note["rule"] == "idle_gpu"]
    assert [note["severity"] for note in idle] == ["warning", "info"]
    assert idle[1]["title"].startswith("Resolved")


def test_the_watchdog_never_costs_more_than_none(run: Run) -> None:
    assert_spend_never_above_baseline(run)
