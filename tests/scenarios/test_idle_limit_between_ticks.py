"""Scenario: an idle limit inside the stream's batch window (idle_limit_between_ticks.toml).

At a tick a host's newest rows are still on the host (sent 5 s at a time), and the idle clock
counts only observed time, so a limit just after a tick used to be decided a whole tick later.
The watchdog now evaluates again once the rows covering the limit are in (wake.py): the warning
and the destroy come within ``batch_seconds + 2`` s of their instants — never before them — the
destroy still ``warn_before`` after the warning; and a GPU busy again in the last seconds before
its limit (rows still on the host at the limit) is not destroyed by that evaluation.
"""

from __future__ import annotations

import pytest

from tests.scenarios.helpers import Run, assert_spend_never_above_baseline, offset, run_scenario
from watchdog_gpu.wake import ROWS_LAG

NAME = "idle_limit_between_ticks"
FORGOTTEN, ADVERSARY = "vast-main/9201", "vast-main/9202"
IDLE_FROM = offset("10m2s")
IDLE, WARN_BEFORE = offset("30m"), offset("10m")  # idle_gpu's defaults
LAG = round(ROWS_LAG.total_seconds())  # batch_seconds (5) + 2 s


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return run_scenario(NAME, tmp_path_factory.mktemp(NAME))


def warnings_for(run: Run, instance: str) -> list[int]:
    return [
        note["offset_s"]
        for note in run.notifications_for(instance)
        if note["severity"] == "warning" and "will be destroyed" in note["title"]
    ]


def test_the_limit_falls_just_after_a_tick_inside_the_batch_window() -> None:
    limit = IDLE_FROM + IDLE
    assert 0 < limit % 60 < 5  # a tick sees rows at most ~5 s old: not those of the limit


def test_the_destroy_is_decided_within_batch_plus_2_s_of_the_limit_never_before(run: Run) -> None:
    (action,) = run.actions_for(FORGOTTEN)
    assert (action["rule"], action["action"], action["result"]) == (
        "idle_gpu",
        "destroy",
        "verified",
    )
    onset = action["idle_onset_offset_s"]
    assert IDLE_FROM <= onset <= IDLE_FROM + 1  # the first idle row, to the second
    assert onset + IDLE <= action["offset_s"] <= onset + IDLE + LAG


def test_the_warning_likewise_and_the_destroy_follows_it_by_warn_before(run: Run) -> None:
    (action,) = run.actions_for(FORGOTTEN)
    onset = action["idle_onset_offset_s"]
    (warned,) = warnings_for(run, FORGOTTEN)
    assert onset + IDLE - WARN_BEFORE <= warned <= onset + IDLE - WARN_BEFORE + LAG
    assert action["offset_s"] - warned == WARN_BEFORE


def test_a_gpu_busy_again_seconds_before_its_limit_is_not_destroyed(run: Run) -> None:
    # Warned like the other (its 20 idle minutes were observed), then busy four seconds before
    # the limit: the rows of those seconds were on the host at the limit, and the evaluation
    # woken for it waited for them.
    assert warnings_for(run, ADVERSARY)
    assert run.actions_for(ADVERSARY) == []
    assert run.instances[ADVERSARY]["final_state"] == "running"
    resolved = [n for n in run.notifications_for(ADVERSARY) if n["severity"] == "info"]
    assert resolved, run.notifications_for(ADVERSARY)


def test_the_watchdog_never_costs_money(run: Run) -> None:
    assert_spend_never_above_baseline(run)
