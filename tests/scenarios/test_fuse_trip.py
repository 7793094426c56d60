"""Scenario: the blast-radius fuse trips on a wrong-looking pattern (fuse_trip.toml).

Ten busy training runs reach a 40-minute ``max_runtime`` limit in the same tick: a time-based
rule wanting all of the billing fleet at once (more than ``max_fleet_fraction``) looks like a
wrong policy, so the fuse holds all ten (result "blocked"), alerts critically — the trip and the
ten held destroys in one push — and then latches: nothing else is destroyed until a human resets
it. (An ordinary wave of idle instances is deferred instead: test_idle_wave.py.)
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

NAME = "fuse_trip"
RULES = '[rules.max_runtime]\nlimit = "40m"\nwarn_before = "10m"\n'
CONFIG = f"{ENFORCE}\n[safety]\nmax_fleet_fraction = 0.5\n{RULES}"
MONITOR = f'[watchdog]\nmode = "monitor"\n[safety]\nmax_fleet_fraction = 0.5\n{RULES}'
INSTANCES = 10
DUE_AT = offset("40m")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return run_scenario(NAME, tmp_path_factory.mktemp(NAME), CONFIG)


@pytest.fixture(scope="module")
def monitor(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return run_scenario(NAME, tmp_path_factory.mktemp(f"{NAME}-monitor"), MONITOR)


def test_all_ten_fall_due_in_the_same_tick_and_all_are_held(run: Run) -> None:
    assert len(run.actions) == INSTANCES
    (offset_s,) = {action["offset_s"] for action in run.actions}
    assert isinstance(offset_s, int)
    assert_within_tick(offset_s, DUE_AT, tick_seconds(NAME))
    assert {action["result"] for action in run.actions} == {"blocked"}
    assert run.api_calls == ()
    assert all(figures["final_state"] == "running" for figures in run.instances.values())


def test_the_trip_is_one_critical_push_naming_every_held_destroy(run: Run) -> None:
    (offset_s,) = {action["offset_s"] for action in run.actions}
    critical = [note for note in run.notifications if note["severity"] == "critical"]
    fleet_alerts = [note for note in critical if note["instance"] is None]
    assert [(note["offset_s"], note["title"]) for note in fleet_alerts] == [
        (offset_s, f"Fuse tripped: {INSTANCES} destructive actions held")
    ]
    assert len([note for note in critical if note["instance"] is not None]) == INSTANCES
    assert {note["offset_s"] for note in critical} == {offset_s}
    assert len({note["push"] for note in critical}) == 1  # one tick, one severity: one push


def test_the_latched_fuse_holds_everything_until_a_human_resets_it(run: Run) -> None:
    assert len(run.actions) == INSTANCES
    assert run.api_calls == ()


def test_the_fuse_never_makes_the_watchdog_cost_money(run: Run) -> None:
    assert_spend_never_above_baseline(run)


def test_in_monitor_mode_dry_runs_never_trip_the_fuse(monitor: Run) -> None:
    assert len(monitor.actions) == INSTANCES
    assert {(a["dry_run"], a["result"]) for a in monitor.actions} == {(True, "dry_run")}
    assert [note for note in monitor.notifications if note["severity"] == "critical"] == []
    assert monitor.api_calls == ()


def test_in_monitor_mode_one_tick_of_would_have_messages_is_one_push(monitor: Run) -> None:
    (offset_s,) = {action["offset_s"] for action in monitor.actions}
    at_due = [note for note in monitor.notifications if note["offset_s"] == offset_s]
    assert len(at_due) == INSTANCES
    assert {note["severity"] for note in at_due} == {"warning"}
    assert len({note["push"] for note in at_due}) == 1
    warned = [note for note in monitor.notifications if note["offset_s"] < offset_s]
    assert len(warned) == INSTANCES
    assert len({note["push"] for note in warned}) == 1
