"""Scenario: a destroy whose call failed is retried after the job started again
(api_blip_retry.toml).

The planner decides the destroy on fresh data; the provider call fails (HTTP 500) and the
executor schedules a retry. Before the retry the owner starts a new job and the GPU is busy for
minutes. The one promise — a busy instance is never killed — means the retry must not go out:
an action whose condition no longer holds is not carried out.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.scenarios.helpers import (
    Run,
    assert_spend_never_above_baseline,
    finish,
    offset,
    simulating,
)

NAME = "api_blip_retry"
INSTANCE = "vast-main/9001"
BUSY_AGAIN = offset("41m")


@pytest.fixture(scope="module")
def outcome(tmp_path_factory: pytest.TempPathFactory) -> tuple[Run, list[int]]:
    """The run, and the offsets at which a provider call for 9001 failed."""
    with simulating(NAME, tmp_path_factory.mktemp(NAME)) as sim:
        run = finish(sim)
        failed = [
            round((event.at - sim.scenario.start).total_seconds())
            for event in sim.store.list_audit_events()
            if event.kind == "provider_error" and event.instance_id == "9001"
        ]
        return run, failed


def test_the_scenario_makes_a_destroy_call_fail_before_the_job_restarts(
    outcome: tuple[Run, list[int]],
) -> None:
    # The precondition of the next test: without a failed call there is no retry to judge.
    run, failed = outcome
    (action,) = run.actions_for(INSTANCE)
    assert action["offset_s"] < BUSY_AGAIN
    assert failed, "no provider call for 9001 failed"
    assert min(failed) < BUSY_AGAIN, failed


def test_a_retry_never_destroys_an_instance_whose_gpu_is_busy_again(
    outcome: tuple[Run, list[int]],
) -> None:
    run, _failed = outcome
    late_calls = [call for call in run.api_calls if call[0] >= BUSY_AGAIN]
    assert late_calls == [], (
        f"destroy reached the provider at {[str(timedelta(seconds=c[0])) for c in late_calls]}, "
        f"after the GPU was busy again at {timedelta(seconds=BUSY_AGAIN)}"
    )
    assert run.instances[INSTANCE]["final_state"] == "running"


def test_a_failed_call_never_makes_the_watchdog_cost_money(
    outcome: tuple[Run, list[int]],
) -> None:
    assert_spend_never_above_baseline(outcome[0])
