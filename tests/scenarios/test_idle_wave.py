"""Scenario: a wave of 30 idle instances is deferred, not blocked (idle_wave.toml).

30 instances of a finished sweep go idle within one minute; four others keep training. With
``max_actions_per_tick = 3`` and ``max_actions_per_hour = 15`` the fuse's rate limits defer what
is beyond them: three destroys per tick, fifteen in any rolling hour, the costliest first, until
all 30 are gone. One notification (a warning, not a critical trip) says destroys were deferred; the
fuse never latches and no human is needed. The busy four are never touched.
"""

from __future__ import annotations

from collections import Counter

import pytest

from tests.scenarios.helpers import (
    ENFORCE,
    Run,
    assert_spend_never_above_baseline,
    offset,
    run_scenario,
)

NAME = "idle_wave"
PER_TICK, PER_HOUR = 3, 15
CONFIG = (
    f"{ENFORCE}\n[safety]\nmax_actions_per_tick = {PER_TICK}\nmax_actions_per_hour = {PER_HOUR}\n"
)
WAVE = 30
HOUR = 3600


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return run_scenario(NAME, tmp_path_factory.mktemp(NAME), CONFIG)


def test_every_idle_instance_of_the_wave_is_destroyed_and_none_blocked(run: Run) -> None:
    assert len(run.actions) == WAVE
    assert {action["result"] for action in run.actions} == {"verified"}
    assert len(run.api_calls) == WAVE
    for key, figures in run.instances.items():
        expected = "running" if key.split("/")[1].startswith("97") else "gone"
        assert figures["final_state"] == expected, key


def test_the_rate_limits_hold_per_tick_and_per_rolling_hour(run: Run) -> None:
    offsets = sorted(action["offset_s"] for action in run.actions)
    assert max(Counter(offsets).values()) == PER_TICK
    for start in offsets:
        assert sum(1 for o in offsets if start <= o < start + HOUR) <= PER_HOUR
    first_due = offset("20m") + offset("30m")  # idle from 20m, idle_minutes 30
    assert offsets[0] <= first_due + 60
    assert offsets[PER_HOUR] >= offsets[0] + HOUR  # the 16th waits for the rolling hour


def test_one_notification_says_destroys_were_deferred_and_nothing_is_critical(run: Run) -> None:
    fleet_notes = [note for note in run.notifications if note["instance"] is None]
    (deferred,) = fleet_notes
    assert deferred["severity"] == "warning"
    assert "deferred" in deferred["title"]
    # Deferral begins once a tick's allowance is used up: the streaming probe dates each
    # instance's idleness to its second, so the wave's due times spread over the minute it went
    # idle, and the evaluations woken between two ticks as they fall due (wake.py) share their
    # tick's allowance — the first one after the limit was reached defers, within that tick.
    per_tick = Counter(action["offset_s"] for action in run.actions)
    full = min(at for at, count in per_tick.items() if count == PER_TICK)
    assert full < deferred["offset_s"] < full + 60
    assert not [a for a in run.actions if full < a["offset_s"] < full + 53]
    assert [note for note in run.notifications if note["severity"] == "critical"] == []


def test_each_destroy_still_follows_its_own_warning(run: Run) -> None:
    for action in run.actions:
        instance = f"{action['account']}/{action['instance']}"
        warnings = [
            note
            for note in run.notifications_for(instance)
            if note["severity"] == "warning" and note["offset_s"] < action["offset_s"]
        ]
        assert warnings, instance


def test_the_warnings_of_one_tick_are_one_push(run: Run) -> None:
    # The first evaluation that warns about several instances (the streaming probe dates each
    # one's idleness to its second, and an evaluation is woken as their warning points fall
    # due, a few seconds apart at the least: wake.py) sends them in one push.
    per_tick = Counter(note["offset_s"] for note in run.notifications)
    first = min(at for at, count in per_tick.items() if count > 1)
    pushes = {note["push"] for note in run.notifications if note["offset_s"] == first}
    assert len(pushes) == 1


def test_the_wave_never_makes_the_watchdog_cost_money(run: Run) -> None:
    assert_spend_never_above_baseline(run)
