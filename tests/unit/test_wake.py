"""Wakes (wake.py): one pending wake, the earliest; none for rows already in, none at or after
the next tick; at least the minimum spacing apart."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise

from watchdog_gpu.wake import MIN_SPACING, ROWS_LAG, Wakes

T = datetime(2026, 3, 2, 21, 0, tzinfo=UTC)
S = timedelta(seconds=1)
TICK = T + 60 * S


def test_the_lag_and_spacing_follow_the_stream_batches() -> None:
    assert ROWS_LAG == 7 * S  # batch_seconds (5) + 2 s
    assert MIN_SPACING == 5 * S


def test_a_change_before_the_next_tick_wakes_once_its_rows_are_in() -> None:
    wakes = Wakes()
    # A limit 3 s before the tick: its rows are still on the host at the tick.
    wake = wakes.after_evaluation(now=T, next_change=T - 3 * S, probed_at=T, next_tick=TICK)
    assert wake == T + 4 * S
    assert wakes.pending == wake
    later = wakes.after_evaluation(now=T, next_change=T + 20 * S, probed_at=T, next_tick=TICK)
    assert later == T + 27 * S


def test_no_wake_for_rows_already_in_or_at_or_after_the_next_tick() -> None:
    wakes = Wakes()
    # Rows up to T - 7 s are in: a change dated before then that did not happen means blind.
    for change in (T - 8 * S, T + 53 * S, None):
        wake = wakes.after_evaluation(now=T, next_change=change, probed_at=T, next_tick=TICK)
        assert wake is None, change
    assert wakes.pending is None


def test_each_evaluation_replaces_the_pending_wake() -> None:
    wakes = Wakes()
    assert wakes.after_evaluation(now=T, next_change=T + 30 * S, probed_at=T, next_tick=TICK)
    # A tick (or wake) that already decided it reports the next change instead: one pending.
    replaced = wakes.after_evaluation(
        now=T + S, next_change=T + 50 * S, probed_at=T + S, next_tick=TICK + 10 * S
    )
    assert replaced == wakes.pending == T + 57 * S
    none = wakes.after_evaluation(now=T + S, next_change=None, probed_at=T + S, next_tick=TICK)
    assert none is None
    assert wakes.pending is None


def test_wakes_keep_the_minimum_spacing_however_many_limits_are_staggered() -> None:
    wakes = Wakes()
    runs = []
    now = T
    limit = T - 5 * S  # 1,000 limits, one every 0.1 s, the first 5 s before the tick
    for _ in range(1000):
        wake = wakes.after_evaluation(now=now, next_change=limit, probed_at=now, next_tick=TICK)
        if wake is None:
            break
        runs.append(wake)
        now = wake
        wakes.ran(now)
        # This wake decided every limit whose rows are in; the next one is 0.1 s after them.
        limit = max(limit, now - ROWS_LAG) + S / 10
    assert len(runs) > 1
    assert min(b - a for a, b in pairwise(runs)) >= MIN_SPACING
    assert len(runs) <= 60 / 5 + 1
    assert wakes.pending is None


def test_a_warned_actions_due_time_wakes_at_it_rows_need_no_waiting_for() -> None:
    wakes = Wakes()
    at = wakes.after_evaluation(
        now=T, next_change=T + 30 * S, next_due=T + 20 * S, probed_at=T, next_tick=TICK
    )
    assert at == T + 20 * S
    at = wakes.after_evaluation(
        now=T, next_change=T + 10 * S, next_due=T + 20 * S, probed_at=T, next_tick=TICK
    )
    assert at == T + 17 * S


def test_a_decision_on_listed_state_wakes_at_itself_and_lists_first() -> None:
    wakes = Wakes()
    wake = wakes.after_evaluation(
        now=T, next_change=None, next_listed=T + 20 * S, probed_at=T, next_tick=TICK
    )
    assert wake == T + 20 * S  # no rows to wait for
    assert wakes.listing
    # An idle point earlier than it: the wake for the rows comes first and lists nothing.
    wakes = Wakes()
    wake = wakes.after_evaluation(
        now=T, next_change=T + 3 * S, next_listed=T + 20 * S, probed_at=T, next_tick=TICK
    )
    assert wake == T + 10 * S
    assert not wakes.listing
    wakes.ran(wake)
    assert not wakes.listing
    # Coalesced: a listed due time before the wake the spacing allows is listed at that wake.
    wake = wakes.after_evaluation(
        now=wake, next_change=None, next_listed=wake + 2 * S, probed_at=wake, next_tick=TICK
    )
    assert wake == T + 15 * S
    assert wakes.listing
    wakes.ran(wake)
    assert not wakes.listing
    # None at or after the next tick (which lists anyway).
    late = wakes.after_evaluation(
        now=T, next_change=None, next_listed=TICK, probed_at=T, next_tick=TICK
    )
    assert late is None
    assert not wakes.listing
