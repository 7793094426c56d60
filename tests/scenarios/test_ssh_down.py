"""Scenario: SSH down for hours (ssh_down.toml).

SSH goes down at 20 min, when the job has just ended, and stays down. Unknown is not idle:
idle_gpu must not act or warn. The unobserved rule must say, once, that the instance is blind
(30 min after the last usable sample) and must not claim the blindness is over while it lasts.
With ``[rules.max_runtime] limit = "3h"`` the hard TTL still destroys it at 3 h (warned 1 h
ahead); without one, nothing destroys it.
"""

from __future__ import annotations

from pathlib import Path

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

NAME = "ssh_down"
INSTANCE = "vast-main/9401"
SSH_DOWN_AT = offset("20m")
UNOBSERVED_AFTER = offset("30m")
LIMIT = offset("3h")
WARN_BEFORE = offset("1h")  # max_runtime.warn_before default
CONFIG = f'{ENFORCE}\n[rules.max_runtime]\nlimit = "3h"\n'


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return run_scenario(NAME, tmp_path_factory.mktemp(NAME), CONFIG)


def test_an_unreachable_instance_is_never_killed_as_idle(run: Run) -> None:
    assert [action["rule"] for action in run.actions] == ["max_runtime"]
    assert [note for note in run.notifications if note["rule"] == "idle_gpu"] == []


def test_the_owner_is_told_the_instance_is_blind(run: Run) -> None:
    alerts = [
        note
        for note in run.notifications_for(INSTANCE)
        if note["rule"] == "unobserved" and note["severity"] == "warning"
    ]
    assert alerts, run.notifications
    # Blind since the last good probe, one tick before SSH went down.
    assert_within_tick(alerts[0]["offset_s"], SSH_DOWN_AT + UNOBSERVED_AFTER, tick_seconds(NAME))


def test_the_blind_time_alert_is_sent_once_and_never_resolved_while_still_blind(run: Run) -> None:
    # The instance is blind from 20m until max_runtime destroys it: one alert, and no "resolved"
    # message before it is gone (a resolution would tell the owner the GPUs are visible again).
    (action,) = run.actions
    unobserved = [note for note in run.notifications_for(INSTANCE) if note["rule"] == "unobserved"]
    alerts = [note for note in unobserved if note["severity"] != "info"]
    early_resolutions = [
        note
        for note in unobserved
        if note["severity"] == "info" and note["offset_s"] < action["offset_s"]
    ]
    seen = [(note["offset_s"], note["severity"]) for note in unobserved]
    assert len(alerts) == 1, f"unobserved messages (offset_s, severity): {seen}"
    assert early_resolutions == [], f"unobserved messages (offset_s, severity): {seen}"


def test_max_runtime_still_destroys_it_at_its_limit(run: Run) -> None:
    (action,) = run.actions
    assert (action["rule"], action["action"], action["dry_run"]) == (
        "max_runtime",
        "destroy",
        False,
    )
    assert_within_tick(action["offset_s"], LIMIT, tick_seconds(NAME))
    assert action["result"] == "verified"
    assert run.instances[INSTANCE]["final_state"] == "gone"
    assert run.api_calls == ((action["offset_s"], "vast-main", "9401", "destroy"),)


def test_max_runtime_warns_an_hour_ahead(run: Run) -> None:
    (action,) = run.actions
    warnings = [
        note
        for note in run.notifications_for(INSTANCE)
        if note["rule"] == "max_runtime" and note["offset_s"] < action["offset_s"]
    ]
    assert [note["severity"] for note in warnings] == ["warning"]
    assert_within_tick(warnings[0]["offset_s"], LIMIT - WARN_BEFORE, tick_seconds(NAME))


def test_the_watchdog_never_costs_more_than_none(run: Run) -> None:
    assert_spend_never_above_baseline(run)


def test_without_a_time_limit_a_blind_instance_is_left_running(tmp_path: Path) -> None:
    run = run_scenario(NAME, tmp_path)
    assert run.actions == []
    assert run.api_calls == ()
    assert run.instances[INSTANCE]["final_state"] == "running"
    assert {note["rule"] for note in run.notifications} == {"unobserved"}
    assert_spend_never_above_baseline(run)
