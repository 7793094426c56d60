"""runs.current_run: a run is the provider's run; a blip inside it is blind time, not a new run."""

from __future__ import annotations

from datetime import datetime

import pytest

from tests.unit.rules.builders import at, instance, span
from watchdog_gpu.fleet import InstanceView
from watchdog_gpu.model import InstanceState
from watchdog_gpu.runs import current_run, running_since

RUNNING, STARTING, UNKNOWN = InstanceState.RUNNING, InstanceState.STARTING, InstanceState.UNKNOWN
STOPPED, GONE = InstanceState.STOPPED, InstanceState.GONE


def blipped(blind: InstanceState, started_at: datetime | None) -> InstanceView:
    """Running from 0, one poll listed ``blind`` at minute 45, running again from 46."""
    return instance(
        span(RUNNING, at(0), at(44)),
        span(blind, at(45), at(45), compute=None),
        span(RUNNING, at(46), at(90)),
        started_at=started_at,
    )


@pytest.mark.parametrize("blind", [UNKNOWN, GONE], ids=["unknown", "absent"])
@pytest.mark.parametrize("started_at", [at(-0.2), None], ids=["provider start", "no start"])
def test_a_blip_with_the_same_provider_start_is_blind_time_inside_the_same_run(
    blind: InstanceState, started_at: datetime | None
) -> None:
    run = current_run(blipped(blind, started_at))
    assert run is not None
    assert (run.started, run.running_since) == (at(0), at(0))
    assert len(run.spans) == 3
    assert run.billed_seconds(at(90)) == 90 * 60  # a blip bills: the host is still rented


def test_a_start_time_that_moved_across_the_gap_is_a_new_run() -> None:
    # The container restarted during the gap (Vast's uptime_mins starts again).
    assert running_since(blipped(UNKNOWN, at(45.5))) == at(46)


def test_a_stop_ends_the_run_even_with_an_old_provider_start() -> None:
    view = instance(
        span(RUNNING, at(0), at(30)),
        span(STOPPED, at(31), at(60)),
        span(RUNNING, at(61), at(90)),
        started_at=at(-5),  # a creation date passed off as a start: a stop still ends the run
    )
    assert running_since(view) == at(61)


def test_a_reboot_is_a_new_run_that_starts_with_its_billed_start_up() -> None:
    view = instance(
        span(RUNNING, at(0), at(30)),
        span(STARTING, at(31), at(40), raw_state="rebooting"),
        span(RUNNING, at(41), at(90)),
        started_at=at(40.5),
    )
    run = current_run(view)
    assert run is not None
    assert (run.started, run.running_since) == (at(31), at(41))


def test_a_starting_listing_the_provider_start_contradicts_is_no_reboot() -> None:
    view = instance(
        span(RUNNING, at(0), at(30)),
        span(STARTING, at(31), at(31), raw_state="rebooting"),
        span(RUNNING, at(32), at(90)),
        started_at=at(-1),
    )
    assert running_since(view) == at(0)


def test_without_a_provider_start_a_starting_listing_after_running_is_a_reboot() -> None:
    view = instance(
        span(RUNNING, at(0), at(30)),
        span(STARTING, at(31), at(35), raw_state="booting"),
        span(RUNNING, at(36), at(90)),
    )
    run = current_run(view)
    assert run is not None
    assert (run.started, run.running_since) == (at(31), at(36))


def test_a_reboot_no_listing_showed_starts_the_run_at_the_provider_start() -> None:
    view = instance(span(RUNNING, at(0), at(90)), started_at=at(50))
    assert running_since(view) == at(50)


def test_an_unknown_listing_right_after_running_continues_the_run_blind() -> None:
    view = instance(
        span(RUNNING, at(0), at(44)),
        span(UNKNOWN, at(45), at(46), compute=None),
    )
    run = current_run(view)
    assert run is not None
    assert run.blind
    assert run.running_since == at(0)
    assert running_since(view) is None  # not listed running now


def test_unknown_after_a_stop_is_no_run() -> None:
    view = instance(span(STOPPED, at(0), at(44)), span(UNKNOWN, at(45), at(46), compute=None))
    assert current_run(view) is None


def test_start_up_that_bills_no_compute_is_not_billed_time() -> None:
    view = instance(
        span(STARTING, at(0), at(9), compute=0.0, raw_state="loading"),
        span(RUNNING, at(10), at(60)),
    )
    run = current_run(view)
    assert run is not None
    assert run.started == at(0)
    assert run.billed_seconds(at(60)) == 50 * 60
