"""GPU activity (activity_marks.py, activity.py): how each evaluation classifies an instance,
which marks it writes, and how the report splits the ledger's billed pieces by those marks."""

from __future__ import annotations

from datetime import datetime

import pytest

from tests.unit.rules.builders import at, instance, running, samples, span
from watchdog_gpu.activity import (
    ActivityFigure,
    ActivitySpan,
    activity_spans,
    activity_split,
    instance_activity_spans,
)
from watchdog_gpu.activity_marks import activity_changes, instance_activity
from watchdog_gpu.evidence import default_evidence
from watchdog_gpu.fleet import FleetView, InstanceView
from watchdog_gpu.model import Activity, ActivityMark, InstanceState
from watchdog_gpu.rules.idle_clock import IdleClockSettings, current_idle
from watchdog_gpu.spend import BillingPiece, pieces_spend, view_billing_pieces

SETTINGS = IdleClockSettings()  # the idle rule's defaults: max_sample_gap 3m, restart after 6m
EVIDENCE = default_evidence("vast-main", "vast")
BUSY, IDLE, BLIND = Activity.BUSY, Activity.IDLE, Activity.BLIND


def hours(minutes: float) -> float:
    return minutes / 60


def piece(
    start: float, end: float, rate: float | None = 2.0, state: InstanceState = InstanceState.RUNNING
) -> BillingPiece:
    return BillingPiece(at(start), at(end), rate, state=state)


def spans_of(*parts: tuple[float, float, Activity]) -> list[ActivitySpan]:
    return [ActivitySpan(at(low), at(high), activity) for low, high, activity in parts]


# -- the split of billed pieces by activity ---------------------------------------------------


def test_a_class_change_in_the_middle_of_a_piece_splits_its_hours_and_dollars_there() -> None:
    figure = activity_split(
        [piece(0, 120)], 1, spans_of((0, 45, BUSY), (45, 120, IDLE)), at(0), at(120)
    )
    assert figure.busy_gpu_hours == pytest.approx(hours(45))
    assert figure.idle_gpu_hours == pytest.approx(hours(75))
    assert figure.busy_usd == pytest.approx(2.0 * hours(45))
    assert figure.idle_usd == pytest.approx(2.0 * hours(75))
    assert figure.blind_usd == 0


def test_time_without_a_mark_is_blind_never_idle() -> None:
    # Marked only from minute 30 (the watchdog started then); the piece bills from 0 to 90.
    figure = activity_split([piece(0, 90)], 1, spans_of((30, 90, IDLE)), at(0), at(90))
    assert figure.blind_gpu_hours == pytest.approx(hours(30))
    assert figure.idle_gpu_hours == pytest.approx(hours(60))


def test_the_window_bounds_cut_both_pieces_and_activity() -> None:
    pieces = [piece(0, 60, 1.0), piece(60, 180, 3.0)]
    activity = spans_of((0, 100, BUSY), (100, 180, IDLE))
    figure = activity_split(pieces, 1, activity, at(30), at(150))
    assert figure.busy_usd == pytest.approx(1.0 * hours(30) + 3.0 * hours(40))
    assert figure.idle_usd == pytest.approx(3.0 * hours(50))
    assert figure.busy_gpu_hours + figure.idle_gpu_hours == pytest.approx(hours(120))


def test_gpu_hours_count_every_gpu_and_dollars_do_not() -> None:
    figure = activity_split([piece(0, 60, 8.0)], 4, spans_of((0, 60, IDLE)), at(0), at(60))
    assert figure.idle_gpu_hours == pytest.approx(4.0)
    assert figure.idle_usd == pytest.approx(8.0)


def test_a_stopped_instance_bills_its_disk_with_no_gpu_hours() -> None:
    pieces = [piece(0, 60, 2.0), piece(60, 120, 0.05, state=InstanceState.STOPPED)]
    figure = activity_split(pieces, 2, spans_of((0, 120, IDLE)), at(0), at(120))
    assert figure.idle_gpu_hours == pytest.approx(2.0)
    assert figure.idle_usd == pytest.approx(2.0)
    assert figure.no_gpu_usd == pytest.approx(0.05)


def test_time_at_an_unknown_rate_has_gpu_hours_and_no_dollars() -> None:
    figure = activity_split([piece(0, 60, None)], 1, spans_of((0, 60, BUSY)), at(0), at(60))
    assert figure.busy_gpu_hours == pytest.approx(1.0)
    assert figure == ActivityFigure(busy_gpu_hours=figure.busy_gpu_hours)


def test_the_dollars_by_activity_add_up_to_the_spend_of_the_same_pieces() -> None:
    pieces = [
        piece(-20, 0, 1.5),  # before the window
        piece(0, 37, 1.5),
        piece(37, 61, 0.04, state=InstanceState.PAUSED),
        piece(61, 200, 2.25),
    ]
    activity = spans_of((10, 20, BUSY), (20, 70, IDLE), (90, 150, BUSY), (150, 160, IDLE))
    figure = activity_split(pieces, 2, activity, at(0), at(180))
    spent = pieces_spend(pieces, at(0), at(180))
    total = figure.idle_usd + figure.blind_usd + figure.busy_usd + figure.no_gpu_usd
    assert round(total, 2) == round(spent.usd, 2)
    assert total == pytest.approx(spent.usd, abs=1e-9)


# -- reading the marks back -------------------------------------------------------------------


def test_an_idle_clock_that_started_before_the_marks_before_it_overrides_them() -> None:
    marks = [
        ActivityMark(BUSY, at(0)),
        ActivityMark(BLIND, at(50)),  # the rows of 40..55 had not arrived yet
        ActivityMark(IDLE, at(40)),  # they came: idle since 40
    ]
    assert activity_spans(marks, at(90)) == spans_of((0, 40, BUSY), (40, 90, IDLE))


def test_the_marks_hold_until_the_last_listing_and_after_it_is_blind() -> None:
    view = running(at(0), at(60))  # listed until 60, billed (estimated) after it
    marks = [ActivityMark(IDLE, at(10))]
    activity = instance_activity_spans(view, marks)
    assert activity == spans_of((10, 60, IDLE))
    figure = activity_split(view_billing_pieces(view, until=at(90)), 1, activity, at(0), at(90))
    assert figure.idle_gpu_hours == pytest.approx(hours(50))
    assert figure.blind_gpu_hours == pytest.approx(hours(40))


# -- classification at an evaluation ----------------------------------------------------------


def judged(view: InstanceView, now: datetime, previous: ActivityMark | None) -> ActivityMark:
    episode = current_idle(view, now, SETTINGS)
    return instance_activity(view, episode, previous, now=now, settings=SETTINGS, evidence=EVIDENCE)


def busy_until(minute: float, end: float) -> InstanceView:
    sm = lambda moment, _gpu: 95.0 if moment <= at(minute) else 0.0  # noqa: E731
    return running(at(0), at(end), samples=samples(at(0), at(end), sm=sm))


def test_an_idle_clock_is_idle_since_its_start_even_when_seen_later() -> None:
    view = busy_until(30, 40)  # busy samples up to 30, idle ones from 31 (one a minute)
    mark = judged(view, at(40), ActivityMark(BUSY, at(0)))
    assert mark == ActivityMark(IDLE, at(31))


def test_work_within_the_sample_gap_is_busy_and_an_unchanged_class_writes_nothing() -> None:
    view = busy_until(30, 32)  # idle for two minutes only: still busy
    previous = ActivityMark(BUSY, at(0))
    assert judged(view, at(32), previous) is previous


def test_busy_starts_at_the_first_busy_sample_after_the_previous_mark() -> None:
    sm = lambda moment, _gpu: 95.0 if moment >= at(47) else 0.0  # noqa: E731
    view = running(at(0), at(50), samples=samples(at(0), at(50), sm=sm))
    assert judged(view, at(50), ActivityMark(IDLE, at(10))) == ActivityMark(BUSY, at(47))


def test_no_usable_sample_lately_is_blind_from_the_newest_usable_one() -> None:
    view = running(at(0), at(60), samples=samples(at(0), at(20), sm=95.0))
    assert judged(view, at(60), ActivityMark(BUSY, at(0))) == ActivityMark(BLIND, at(20))


def test_a_long_gap_since_the_previous_evaluation_is_blind_from_it() -> None:
    view = busy_until(0, 120)  # idle from minute 0 on, samples throughout
    key = "vast-main/9001"
    fleet = FleetView(now=at(120), instances={key: view})
    recorded = {key: ActivityMark(IDLE, at(0))}
    episode = current_idle(view, at(120), SETTINGS)
    assert episode is not None
    written = activity_changes(
        fleet,
        {key: episode},
        recorded,
        now=at(120),
        settings=SETTINGS,
        previous_evaluation=at(60),  # nothing evaluated for an hour: the daemon was down
    )
    assert written[0] == (key, ActivityMark(BLIND, at(60)))
    assert [mark.activity for _key, mark in written] == [BLIND, IDLE]


def test_an_evaluation_that_changes_nothing_writes_nothing() -> None:
    view = busy_until(0, 60)
    key = "vast-main/9001"
    fleet = FleetView(now=at(60), instances={key: view})
    episode = current_idle(view, at(60), SETTINGS)
    assert episode is not None
    recorded = {key: ActivityMark(IDLE, episode.start)}
    written = activity_changes(
        fleet,
        {key: episode},
        recorded,
        now=at(60),
        settings=SETTINGS,
        previous_evaluation=at(59),
    )
    assert written == []


def test_a_gone_instance_gets_no_mark() -> None:
    view = instance(span(InstanceState.GONE, at(0), at(10)))
    fleet = FleetView(now=at(10), instances={"vast-main/9001": view})
    written = activity_changes(
        fleet, {}, {}, now=at(10), settings=SETTINGS, previous_evaluation=None
    )
    assert written == []
