"""Scenario: MIG under load (mig_under_load.toml).

In MIG mode ``dmon`` prints "-" for utilisation: "not available", never 0. 9301 serves on its
MIG slices for three hours (the compute-apps list shows processes): busy, never touched, no
alert. 9302 is in MIG mode without any process: unknown, which is never idle — no destroy and no
idle warning, only one blind-time (unobserved) alert.
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

NAME = "mig_under_load"
SERVING = "vast-main/9301"
EMPTY = "vast-main/9302"
UNOBSERVED_AFTER = offset("30m")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return run_scenario(NAME, tmp_path_factory.mktemp(NAME))


def test_a_mig_instance_under_load_is_never_touched(run: Run) -> None:
    assert run.actions == []
    assert run.api_calls == ()
    assert run.instances[SERVING]["final_state"] == "running"
    assert run.instances[EMPTY]["final_state"] == "running"


def test_a_mig_instance_under_load_raises_no_alert_at_all(run: Run) -> None:
    assert run.notifications_for(SERVING) == []


def test_a_mig_instance_without_processes_is_blind_not_idle(run: Run) -> None:
    notes = run.notifications_for(EMPTY)
    assert [(note["severity"], note["rule"]) for note in notes] == [("warning", "unobserved")]
    assert_within_tick(notes[0]["offset_s"], UNOBSERVED_AFTER, tick_seconds(NAME))


def test_mig_instances_cost_what_they_cost_without_a_watchdog(run: Run) -> None:
    assert_spend_never_above_baseline(run)
    for figures in run.instances.values():
        assert figures["spend_usd"] == figures["spend_without_watchdog_usd"]
