"""Activity marks in the store (``store/activity.py``): each present instance's newest mark, the
marks appended, and the ones the report's view loads for its window."""

from __future__ import annotations

from datetime import timedelta

from tests.integration.store_builders import T0, instance, minutes, observation
from watchdog_gpu.model import Activity, ActivityMark
from watchdog_gpu.store import Store

KEY = "vast-main/i-1"


def mark(activity: Activity, at_minutes: float) -> ActivityMark:
    return ActivityMark(activity, T0 + minutes(at_minutes))


def test_every_present_instance_has_its_newest_mark_or_none(store: Store) -> None:
    store.record_observation(observation(instance("i-1"), instance("i-2")), T0)
    assert store.current_activity() == {KEY: None, "vast-main/i-2": None}
    written = store.record_activity(
        [(KEY, mark(Activity.BUSY, 0)), (KEY, mark(Activity.IDLE, 20))], T0 + minutes(25)
    )
    assert written == 2
    assert store.current_activity() == {KEY: mark(Activity.IDLE, 20), "vast-main/i-2": None}


def test_a_mark_of_an_instance_no_longer_present_is_not_written(store: Store) -> None:
    store.record_observation(observation(instance("i-1")), T0)
    store.record_observation(observation(at=T0 + minutes(1)), T0 + minutes(1))  # i-1 is gone
    assert store.record_activity([(KEY, mark(Activity.BLIND, 1))], T0 + minutes(1)) == 0
    assert store.current_activity() == {}


def test_the_view_of_a_window_holds_the_mark_before_it_and_the_ones_in_it_in_order(
    store: Store,
) -> None:
    store.record_observation(observation(instance("i-1")), T0)
    marks = [
        mark(Activity.BLIND, 0),
        mark(Activity.BUSY, 10),
        mark(Activity.BLIND, 50),
        mark(Activity.IDLE, 40),  # an idle clock from before the blind mark
        mark(Activity.BUSY, 90),
    ]
    for index, one in enumerate(marks):
        store.record_activity([(KEY, one)], T0 + minutes(index))
    end = T0 + minutes(120)
    store.record_observation(observation(instance("i-1", at=end)), end)
    view = store.load_fleet_view(end, timedelta(0), T0 + minutes(30), activity=True)
    # From 30 on: the busy mark of 10 (the newest one before the window) and every later one.
    assert view.activity[KEY] == tuple(marks[1:])
    assert store.load_fleet_view(end, timedelta(0), T0 + minutes(30)).activity == {}


def test_an_unknown_class_read_back_is_blind(store: Store) -> None:
    store.record_observation(observation(instance("i-1")), T0)
    store.record_activity([(KEY, mark(Activity.IDLE, 0))], T0)
    with store.engine.begin() as connection:
        connection.exec_driver_sql("UPDATE activity_marks SET activity = 'dozing'")
    assert store.current_activity() == {KEY: mark(Activity.BLIND, 0)}


def test_the_newest_evaluation_of_any_process_is_found(store: Store) -> None:
    assert store.latest_mark_at("evaluated") is None
    store.mark("old", "evaluated", T0)
    store.mark("old", "probed", T0 + minutes(5))
    assert store.latest_mark_at("evaluated") == T0
