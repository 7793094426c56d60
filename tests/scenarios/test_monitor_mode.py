"""Scenario: monitor mode (monitor_mode.toml).

The same scenario and rules run once with ``[watchdog] mode = "enforce"`` and once with
``mode = "monitor"``. Monitor mode must decide exactly what enforce mode decides — the same
rules, instances and instants, the same warnings and action messages — mark every action
dry-run, and change nothing: no provider call, every instance ends as its script leaves it, and
everything costs what it costs without a watchdog.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.scenarios.helpers import Run, assert_spend_never_above_baseline, load, run_scenario
from watchdog_gpu.plan import DRY_RUN_SUFFIX

NAME = "monitor_mode"
RULES = '\n[rules.stopped_disk]\nafter = "1h"\nwarn_before = "10m"\n'


def config(mode: str) -> str:
    return f'[watchdog]\nmode = "{mode}"\n{RULES}'


@pytest.fixture(scope="module")
def enforce(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return run_scenario(NAME, tmp_path_factory.mktemp(f"{NAME}-enforce"), config("enforce"))


@pytest.fixture(scope="module")
def monitor(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return run_scenario(NAME, tmp_path_factory.mktemp(f"{NAME}-monitor"), config("monitor"))


def decisions(run: Run) -> list[tuple[Any, ...]]:
    return [
        (a["offset_s"], a["account"], a["instance"], a["rule"], a["action"]) for a in run.actions
    ]


def scripted_final_states() -> dict[str, str]:
    """Each instance's last scripted state: where it ends when nobody calls the API."""
    states: dict[str, str] = {}
    for account in load(NAME).accounts:
        for instance in account.instances:
            scripted = [event.state for event in instance.events if event.state is not None]
            states[f"{account.name}/{instance.id}"] = scripted[-1]
    return states


def test_enforce_mode_destroys_the_three_leaks(enforce: Run) -> None:
    # The reference monitor mode is compared with: three rules, three verified destroys.
    assert enforce.json["mode"] == "enforce"
    assert sorted(a["rule"] for a in enforce.actions) == [
        "idle_gpu",
        "paused_interruptible",
        "stopped_disk",
    ]
    assert {(a["dry_run"], a["result"]) for a in enforce.actions} == {(False, "verified")}
    assert len(enforce.api_calls) == 3


def test_monitor_mode_decides_exactly_what_enforce_mode_decides(enforce: Run, monitor: Run) -> None:
    assert decisions(monitor) == decisions(enforce)


def test_monitor_mode_marks_every_action_dry_run(monitor: Run) -> None:
    assert monitor.json["mode"] == "monitor"
    assert monitor.actions
    assert {(a["dry_run"], a["result"]) for a in monitor.actions} == {(True, "dry_run")}


def test_monitor_mode_sends_the_same_warnings_and_action_messages(
    enforce: Run, monitor: Run
) -> None:
    # A dry run has its own action key (so switching to enforce mid-episode still acts); the
    # messages are otherwise keyed by the same episodes.
    dry_keys = sorted(key.replace(DRY_RUN_SUFFIX, "") for key in monitor.notification_keys())
    assert dry_keys == sorted(enforce.notification_keys())
    warnings = [(n["offset_s"], n["instance"], n["rule"]) for n in enforce.notifications]
    dry_warnings = [(n["offset_s"], n["instance"], n["rule"]) for n in monitor.notifications]
    before_actions = min(a["offset_s"] for a in enforce.actions)
    assert [w for w in dry_warnings if w[0] < before_actions] == [
        w for w in warnings if w[0] < before_actions
    ]


def test_monitor_mode_changes_nothing(monitor: Run) -> None:
    assert monitor.api_calls == ()
    finals = {key: figures["final_state"] for key, figures in monitor.instances.items()}
    assert finals == scripted_final_states()


def test_monitor_mode_costs_exactly_what_no_watchdog_costs(monitor: Run) -> None:
    assert_spend_never_above_baseline(monitor)
    for key, figures in monitor.instances.items():
        assert figures["spend_usd"] == figures["spend_without_watchdog_usd"], key
    assert monitor.json["totals"]["saved_usd"] == 0


def test_enforce_mode_saves_money_on_the_same_scenario(enforce: Run) -> None:
    assert_spend_never_above_baseline(enforce)
    assert enforce.json["totals"]["saved_usd"] > 0
