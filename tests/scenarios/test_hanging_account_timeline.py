"""Scenario: simulate's timeline while one provider hangs (hanging_account_timeline.toml).

Each tick spends a minute on the hanging account's retries before anything else happens. The
simulator must stamp what follows at the virtual instant it happened — as the daemon's jobs each
read the clock — so the JSON's action is the call the provider received, and a "destroyed in 10
min" warning reached the phone ten minutes (at most a tick more) before that call, not 544 s.
"""

from __future__ import annotations

import pytest

from tests.scenarios.helpers import Run, offset, run_scenario, tick_seconds

NAME = "hanging_account_timeline"
INSTANCE = "vast-main/9001"
WARN_BEFORE = offset("10m")  # idle_gpu.warn_before default


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return run_scenario(NAME, tmp_path_factory.mktemp(NAME))


def test_the_hanging_account_is_reported_and_its_busy_instance_is_left_alone(run: Run) -> None:
    # The precondition: the Lambda account never answered, so every tick waited for it.
    health = [note for note in run.notifications if note["account"] == "lambda-hung"]
    assert health
    assert all(note["rule"] == "account_health" for note in health), health
    assert run.actions_for("lambda-hung/0920b6b1a2c34d5e") == []


def test_the_action_is_stamped_when_the_provider_received_the_call(run: Run) -> None:
    (action,) = run.actions_for(INSTANCE)
    assert (action["rule"], action["action"], action["result"]) == (
        "idle_gpu",
        "destroy",
        "verified",
    )
    ((called_at, _account, _instance, kind),) = run.api_calls
    assert kind == "destroy"
    assert action["offset_s"] == called_at, (action, run.api_calls)
    assert action["called_offset_s"] == called_at
    assert called_at <= action["verified_offset_s"]


def test_the_warning_reached_the_phone_warn_before_ahead_of_the_call(run: Run) -> None:
    (action,) = run.actions_for(INSTANCE)
    (warning,) = [
        note
        for note in run.notifications_for(INSTANCE)
        if note["severity"] == "warning" and "will be destroyed" in note["title"]
    ]
    lead = action["offset_s"] - warning["offset_s"]
    assert WARN_BEFORE <= lead <= WARN_BEFORE + tick_seconds(NAME), (warning, action)


def test_the_messages_are_stamped_when_the_phone_received_them(run: Run) -> None:
    assert [note["offset_s"] for note in run.notifications] == [at for at, _ in run.sent]
    (action,) = run.actions_for(INSTANCE)
    (destroyed,) = [
        n for n in run.notifications_for(INSTANCE) if n["title"].startswith("Destroyed")
    ]
    # The "destroyed" message tells of a verified kill: it cannot reach the phone before it.
    assert destroyed["offset_s"] >= action["verified_offset_s"]
