"""Scenario: the user stops a pod one second before its idle destroy
(stop_before_idle_destroy.toml).

The idle destroy is decided at a wake on the listing of the tick before, which still shows the
pod running. A destructive call is made only on the state a fresh listing shows: the executor
lists the account again right before the call, finds the pod stopped, and leaves the decision to
the planner, whose next evaluation no longer holds the idle finding (the pod does not run). The
user's stop is respected — the disk they meant to keep is not deleted — and stopped_disk then
applies to the stopped pod as configured.
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

NAME = "stop_before_idle_destroy"
INSTANCE = "runpod-main/keepdisk0001"
STOPPED_AT = offset("1h0m6s")
STOPPED_DISK_AFTER = offset("1h")
CONFIG = f'{ENFORCE}\n[rules.stopped_disk]\nafter = "1h"\nwarn_before = "10m"\n'


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return run_scenario(NAME, tmp_path_factory.mktemp(NAME), CONFIG)


def test_the_idle_destroy_decided_on_the_old_listing_is_not_sent(run: Run) -> None:
    idle = [action for action in run.actions_for(INSTANCE) if action["rule"] == "idle_gpu"]
    # Decided a second after the stop, on the listing of the tick before: cancelled, not called.
    assert [(a["offset_s"] > STOPPED_AT, a["result"]) for a in idle] == [(True, "cancelled")]
    assert all(call[3] != "destroy" or call[0] > STOPPED_AT + 3000 for call in run.api_calls)


def test_the_stopped_pod_is_left_to_stopped_disk_as_configured(run: Run) -> None:
    later = [action for action in run.actions_for(INSTANCE) if action["rule"] == "stopped_disk"]
    assert len(later) == 1, run.actions
    (action,) = later
    assert (action["action"], action["result"]) == ("destroy", "verified")
    assert_within_tick(action["offset_s"], STOPPED_AT + STOPPED_DISK_AFTER, tick_seconds(NAME))
    assert [call[3] for call in run.api_calls] == ["destroy"]
    assert run.api_calls[0][0] == action["offset_s"]


def test_the_idle_warning_is_resolved_not_followed_by_a_destroyed_message(run: Run) -> None:
    idle = [note for note in run.notifications_for(INSTANCE) if note["rule"] == "idle_gpu"]
    assert [note["severity"] for note in idle] == ["warning", "info"]
    assert "will be destroyed" in idle[0]["title"]
    assert idle[1]["title"].startswith("Resolved")


def test_the_watchdog_never_costs_more_than_none(run: Run) -> None:
    assert_spend_never_above_baseline(run)
