"""Scenario: a daemon restart in the middle of a grace period (restart_in_grace.toml).

The run is stepped tick by tick; at the restart point the engine is thrown away and rebuilt over
the same database, world and clock (``Simulation.restart()``), then the run continues. Compared
with an uninterrupted run it must decide and do exactly the same: the idle window is computed
from stored samples (no reset), and no action, call or message is repeated or lost.

The exact comparison runs with the burst probe, which loses nothing in an instant restart. The
streaming probe's rows of the seconds between the last tick and the restart die with the process
and the new streams start at the next tick: that minute is blind, so the idle clock pauses and
the destroy comes up to that much later — never earlier, never reset, nothing repeated
(``docs/safety.md``).
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from tests.scenarios.helpers import (
    ENFORCE,
    Run,
    assert_spend_never_above_baseline,
    finish,
    offset,
    run_scenario,
    simulating,
)

NAME = "restart_in_grace"
BURST = f'{ENFORCE}\n[probe]\nmode = "burst"\n'
WARNED_AT = offset("50m")  # both warnings (idle_gpu and paused_interruptible)
DUE_AT = offset("1h")


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return run_scenario(NAME, tmp_path_factory.mktemp(NAME), BURST)


@pytest.fixture(scope="module")
def uninterrupted_streaming(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return run_scenario(NAME, tmp_path_factory.mktemp(NAME))


def run_with_restart(
    tmp_path: Path, restart_after: int, config: str | None = BURST
) -> tuple[Run, list[str]]:
    """Step until the tick at ``restart_after`` has run, restart, finish. Also returns the
    notification keys delivered before the restart."""
    with simulating(NAME, tmp_path, config) as sim:
        restart_at = sim.scenario.start + timedelta(seconds=restart_after)
        while sim.next_tick <= restart_at:
            sim.step()
        before = [note.idempotency_key for _at, note in sim.capture.sent]
        sim.restart()
        return finish(sim), before


def notification_keys(run: Run) -> list[str]:
    """Every delivered message's key, sorted; a key delivered twice appears twice."""
    return sorted(run.notification_keys())


def test_the_uninterrupted_run_warns_then_destroys_both(uninterrupted: Run) -> None:
    # The reference the restarted runs are compared with: it must itself be right.
    assert [(a["instance"], a["offset_s"], a["result"]) for a in uninterrupted.actions] == [
        ("9701", DUE_AT, "verified"),
        ("9702", DUE_AT, "verified"),
    ]
    warnings = [n for n in uninterrupted.notifications if n["offset_s"] < DUE_AT]
    assert [(n["instance"], n["offset_s"]) for n in warnings] == [
        ("9701", WARNED_AT),
        ("9702", WARNED_AT),
    ]


def test_a_restart_inside_the_warning_window_changes_nothing(
    tmp_path: Path, uninterrupted: Run
) -> None:
    restarted, before = run_with_restart(tmp_path, offset("55m"))

    # The restart really happened inside the grace period: warned, nothing done yet.
    assert len([key for key in before if key.endswith(":warning")]) == 2
    assert not any(call[0] < offset("55m") for call in restarted.api_calls)

    assert restarted.actions == uninterrupted.actions
    assert restarted.api_calls == uninterrupted.api_calls
    assert notification_keys(restarted) == notification_keys(uninterrupted)
    assert len(set(restarted.notification_keys())) == len(restarted.notification_keys())
    assert restarted.instances == uninterrupted.instances
    assert_spend_never_above_baseline(restarted)


def test_a_restart_between_the_destroy_call_and_its_verification_changes_nothing(
    tmp_path: Path, uninterrupted: Run
) -> None:
    restarted, before = run_with_restart(tmp_path, DUE_AT)

    # The destroys were called in the tick before the restart, and not verified yet.
    assert [call[0] for call in restarted.api_calls] == [DUE_AT, DUE_AT]
    assert not any(key.endswith(":action") for key in before)

    assert restarted.actions == uninterrupted.actions
    assert restarted.api_calls == uninterrupted.api_calls
    assert notification_keys(restarted) == notification_keys(uninterrupted)
    assert len(set(restarted.notification_keys())) == len(restarted.notification_keys())
    assert restarted.instances == uninterrupted.instances
    assert_spend_never_above_baseline(restarted)


def test_the_uninterrupted_streaming_run_destroys_both_at_the_limit(
    uninterrupted_streaming: Run,
) -> None:
    by_instance = {a["instance"]: a["offset_s"] for a in uninterrupted_streaming.actions}
    assert by_instance["9702"] == DUE_AT  # paused_interruptible: no GPU rows involved
    # 9701's GPU went idle exactly on a tick: at the tick 30 min later the newest rows are a
    # few seconds old (the host sends them every 5 s, docs/probe.md), so the idle clock has
    # not quite counted 30 min: the destroy comes at that tick or the next, never earlier.
    assert DUE_AT <= by_instance["9701"] <= DUE_AT + offset("60s")


def test_a_streaming_restart_costs_at_most_its_blind_minute_and_repeats_nothing(
    tmp_path: Path, uninterrupted_streaming: Run
) -> None:
    restarted, _before = run_with_restart(tmp_path, offset("55m"), config=None)
    tick = offset("60s")
    by_instance = {a["instance"]: a for a in restarted.actions}
    # paused_interruptible does not depend on GPU rows: unchanged.
    assert by_instance["9702"]["offset_s"] == DUE_AT
    # idle_gpu: the blind minute around the restart pauses the clock, never resets it.
    assert DUE_AT < by_instance["9701"]["offset_s"] <= DUE_AT + 2 * tick
    assert by_instance["9701"]["idle_onset_offset_s"] == offset("30m")
    assert len(set(restarted.notification_keys())) == len(restarted.notification_keys())
    warnings = [k for k in restarted.notification_keys() if k.endswith(":warning")]
    assert len(warnings) == len(set(warnings)) == 2
    assert_spend_never_above_baseline(restarted)
