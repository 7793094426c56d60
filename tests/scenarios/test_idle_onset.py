"""Scenario: exact idle onset and blind time with the streaming probe (idle_onset.toml).

Blind time is never idle time (``docs/safety.md``): every idle_gpu destroy comes no earlier than
``idle`` of *observed* idleness after the first idle second; the onset is exact to 2 s
even when jobs stop between ticks; SSH down for minutes in the middle of an idle stretch delays
the destroy by exactly that long (the clock pauses), ten minutes restart it; and an endpoint
busy five seconds every seven minutes is never destroyed. With the burst probe (``dmon -c 10``
each minute) that endpoint *is* destroyed: the scenario shows what streaming fixes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.scenarios.helpers import (
    ENFORCE,
    Run,
    assert_spend_never_above_baseline,
    offset,
    run_scenario,
    tick_seconds,
)

NAME = "idle_onset"
LIMIT = offset("30m")
TICK = tick_seconds(NAME)
# The first second each GPU was idle (the world's scripted change), and the blind time inside the
# counted stretch.
IDLE_FROM = {
    "9101": (offset("10m17s"), 0),
    "9102": (offset("23m43s"), 0),
    "9103": (offset("12m5s"), offset("28m50s") - offset("25m30s")),
}
RESTARTED = "9104"  # idle from 12m, SSH down 20m-30m: the clock restarts when SSH is back
SSH_BACK = offset("30m")
ENDPOINT = "9105"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return run_scenario(NAME, tmp_path_factory.mktemp(NAME))


def destroys(run: Run) -> dict[str, dict[str, object]]:
    return {
        action["instance"]: action
        for action in run.actions
        if action["rule"] == "idle_gpu" and action["action"] == "destroy"
    }


@pytest.mark.parametrize("instance", sorted(IDLE_FROM))
def test_the_onset_is_the_first_idle_second_to_within_two_seconds(run: Run, instance: str) -> None:
    idle_from, _blind = IDLE_FROM[instance]
    onset = destroys(run)[instance]["idle_onset_offset_s"]
    assert isinstance(onset, int)
    assert idle_from <= onset <= idle_from + 2


@pytest.mark.parametrize("instance", sorted(IDLE_FROM))
def test_no_destroy_before_idle_minutes_of_observed_idleness(run: Run, instance: str) -> None:
    idle_from, blind = IDLE_FROM[instance]
    action = destroys(run)[instance]
    earliest = idle_from + LIMIT + blind
    assert isinstance(action["offset_s"], int)
    assert earliest <= action["offset_s"] < earliest + TICK + 2, action
    assert action["result"] == "verified"


def test_a_long_blind_stretch_restarts_the_idle_clock(run: Run) -> None:
    action = destroys(run)[RESTARTED]
    assert action["idle_onset_offset_s"] in range(SSH_BACK, SSH_BACK + 3)
    assert isinstance(action["offset_s"], int)
    assert SSH_BACK + LIMIT <= action["offset_s"] < SSH_BACK + LIMIT + TICK + 2


def test_the_inference_endpoint_is_never_destroyed(run: Run) -> None:
    assert ENDPOINT not in destroys(run)
    assert run.instances[f"vast-main/{ENDPOINT}"]["final_state"] == "running"
    warned = [n for n in run.notifications_for(f"vast-main/{ENDPOINT}") if n["rule"] == "idle_gpu"]
    assert warned == []


def test_every_warning_precedes_its_destroy(run: Run) -> None:
    for instance, action in destroys(run).items():
        warnings = [
            note["offset_s"]
            for note in run.notifications_for(f"vast-main/{instance}")
            if note["rule"] == "idle_gpu" and note["severity"] == "warning"
        ]
        assert warnings, instance
        assert min(warnings) < action["offset_s"], instance


def test_the_watchdog_never_costs_more_than_none(run: Run) -> None:
    assert_spend_never_above_baseline(run)


def test_the_burst_probe_misses_the_endpoint_s_bursts(tmp_path: Path) -> None:
    """What streaming fixes: sampling 10 s a minute never sees the 5-second bursts between the
    ticks, so the burst probe calls the endpoint idle and destroys it."""
    run = run_scenario(NAME, tmp_path, f'{ENFORCE}\n[probe]\nmode = "burst"\n')
    assert ENDPOINT in destroys(run)
