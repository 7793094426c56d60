"""idle_gpu's next point: when an idle clock will reach the warning point, then the action
point, if the GPUs stay idle and observed — the instant the daemon evaluates again (wake.py)."""

from __future__ import annotations

from datetime import timedelta

from tests.unit.rules.builders import at, fleet, running, samples
from watchdog_gpu.fleet import InstanceView
from watchdog_gpu.rules import evaluate_rules
from watchdog_gpu.rules.idle_gpu import IdleGpuConfig, evaluate_timed

CONFIG = IdleGpuConfig()  # idle 30 min, warned 10 min ahead, 3 min sample gap


def idle_from(minute: float, until: float, instance_id: str = "9001") -> InstanceView:
    """Busy to ``minute``, then idle; a sample a minute up to ``until`` (the newest row)."""
    data = samples(
        at(0),
        at(until),
        sm=lambda moment, _gpu: 95.0 if moment <= at(minute) else 0.0,
        instance_id=instance_id,
    )
    return running(at(0), at(until), samples=data, instance_id=instance_id)


def test_before_the_warning_point_the_next_point_is_the_warning_point() -> None:
    # Idle from 121 (the first idle sample): 20 observed minutes at 141.
    view = idle_from(120, until=130)
    outcome = evaluate_timed(fleet(at(130), view), at(130), CONFIG)
    assert outcome.findings == ()  # no finding yet: the instant comes from the clock itself
    assert outcome.next_change == at(141)


def test_rows_still_on_the_way_put_the_point_before_now() -> None:
    # The newest row is from 140 (19 observed minutes); at 142 the rows of 140-142 are on their
    # way: the point (141) has passed on the host, and an evaluation once they are in decides it.
    outcome = evaluate_timed(fleet(at(142), idle_from(120, 140)), at(142), CONFIG)
    assert outcome.findings == ()
    assert outcome.next_change == at(141)


def test_after_the_warning_point_the_next_point_is_the_action_point() -> None:
    outcome = evaluate_timed(fleet(at(145), idle_from(120, 145)), at(145), CONFIG)
    (finding,) = outcome.findings
    assert finding.due_at == at(151)
    assert outcome.next_change == at(151)


def test_once_both_points_are_reached_nothing_is_timed() -> None:
    outcome = evaluate_timed(fleet(at(160), idle_from(120, 160)), at(160), CONFIG)
    assert len(outcome.findings) == 1
    assert outcome.next_change is None


def test_a_blind_instance_has_no_next_point() -> None:
    # No row for more than max_sample_gap: nothing is due until rows come again.
    outcome = evaluate_timed(fleet(at(135), idle_from(120, 130)), at(135), CONFIG)
    assert outcome.next_change is None


def test_a_busy_instance_has_no_next_point_and_without_warning_both_points_are_one() -> None:
    busy = idle_from(500, 130)
    assert evaluate_timed(fleet(at(130), busy), at(130), CONFIG).next_change is None
    unwarned = CONFIG.model_copy(update={"warn_before": timedelta(0)})
    outcome = evaluate_timed(fleet(at(130), idle_from(120, 130)), at(130), unwarned)
    assert outcome.next_change == at(151)


def test_the_earliest_point_of_the_fleet_is_the_evaluations_next_change() -> None:
    # "1" is warned already (idle from 101: action point 131), "2" not yet (warning point 136).
    early, late = idle_from(100, 130, "1"), idle_from(115, 130, "2")
    view = fleet(at(130), early, late)
    assert evaluate_timed(view, at(130), CONFIG).next_change == at(131)
    assert evaluate_rules(view, at(130), {}).next_change == at(131)
    assert evaluate_timed(fleet(at(130), late), at(130), CONFIG).next_change == at(136)
