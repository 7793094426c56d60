"""The daemon's start-up objects leave the garbage collector's full passes while it runs
(``gc_freeze.py``), and go back to it afterwards."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.scenario_texts import one_busy_instance
from watchdog_gpu.clock import SystemClock
from watchdog_gpu.daemon import EXIT_OK, Daemon, run_daemon
from watchdog_gpu.gc_freeze import BACKSTOP, CollectBetweenJobs, long_lived_frozen
from watchdog_gpu.sim.scenario import parse_scenario
from watchdog_gpu.sim.simulate import Simulation, simulation

ONE_ACCOUNT = one_busy_instance("frozen")


class Node:
    """A container the collector tracks; two of them make a reference cycle."""

    other: Node | None = None


def tracked(thing: object) -> bool:
    """Whether the collector's generations hold ``thing`` (frozen objects are in none)."""
    return any(candidate is thing for candidate in gc.get_objects())


def test_objects_alive_at_the_start_are_frozen_for_the_block_then_given_back() -> None:
    kept = Node()
    assert tracked(kept)

    with long_lived_frozen() as frozen:
        assert frozen > 0
        assert gc.get_freeze_count() > 0
        assert not tracked(kept)
        made_inside = Node()
        assert tracked(made_inside)  # what runs after start-up is collected as before

    assert gc.get_freeze_count() == 0
    assert tracked(kept)


def test_garbage_left_by_start_up_is_collected_not_frozen() -> None:
    first, second = Node(), Node()
    first.other, second.other = second, first
    gone = weakref.ref(first)
    del first, second  # a cycle: only the collector frees it

    with long_lived_frozen():
        assert gone() is None


def fail_while_frozen() -> None:
    with long_lived_frozen():
        assert gc.get_freeze_count() > 0
        raise RuntimeError("boom")


def test_an_error_in_the_block_still_gives_the_objects_back() -> None:
    with pytest.raises(RuntimeError, match="boom"):
        fail_while_frozen()

    assert gc.get_freeze_count() == 0


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[Simulation]:
    with simulation(parse_scenario(ONE_ACCOUNT), database=tmp_path / "wd.db") as running:
        yield running


def test_the_daemon_runs_with_its_start_up_objects_frozen(sim: Simulation) -> None:
    seen: dict[str, int | bool] = {}

    def started(daemon: Daemon) -> None:
        seen["frozen"] = gc.get_freeze_count()
        seen["assembly tracked"] = tracked(daemon.assembly)
        seen["full collections every"] = gc.get_threshold()[2]
        daemon.request_stop("test")

    code = run_daemon(
        sim.settings, SystemClock(), {}, build=lambda *_: sim.assembly, on_started=started
    )

    assert code == EXIT_OK
    assert seen["frozen"] > 0
    assert seen["assembly tracked"] is False  # alive when start-up ended: frozen
    assert seen["full collections every"] == BACKSTOP  # the jobs' passes do them
    assert gc.get_freeze_count() == 0  # given back at shutdown
    assert gc.get_threshold()[2] != BACKSTOP


# -- full collections between jobs ----------------------------------------------------------------


class HandClock:
    """Monotonic seconds moved by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def cycle() -> weakref.ref[Node]:
    """A reference cycle nothing else refers to: only the collector frees it."""
    first, second = Node(), Node()
    first.other, second.other = second, first
    return weakref.ref(first)


@pytest.fixture
def collector() -> Iterator[tuple[CollectBetweenJobs, HandClock]]:
    clock = HandClock()
    before = gc.get_threshold()
    try:
        yield CollectBetweenJobs(clock, min_interval=10.0, full_every=600.0), clock
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def test_between_jobs_garbage_is_collected_and_the_survivors_frozen(
    collector: tuple[CollectBetweenJobs, HandClock],
) -> None:
    jobs, clock = collector
    with jobs.active():
        kept = Node()
        gone = cycle()
        clock.now = 10.0
        assert jobs.after_job() is True
        assert gone() is None
        assert not tracked(kept)  # alive at the pass: set aside, not walked again
        made_after = Node()
        assert tracked(made_after)
    assert tracked(kept)  # given back when the block ends
    assert gc.get_freeze_count() == 0


def test_cpythons_own_full_collections_become_a_backstop_only_while_active(
    collector: tuple[CollectBetweenJobs, HandClock],
) -> None:
    jobs, _clock = collector
    young = gc.get_threshold()[:2]
    gc.set_threshold(*young, 10)
    with jobs.active():
        assert gc.get_threshold() == (*young, BACKSTOP)
    assert gc.get_threshold() == (*young, 10)


def test_passes_are_paced_and_need_the_block(
    collector: tuple[CollectBetweenJobs, HandClock],
) -> None:
    jobs, clock = collector
    clock.now = 100.0
    assert jobs.after_job() is False  # not active: a test's daemon leaves the collector alone
    assert gc.get_freeze_count() == 0
    with jobs.active():  # the block's start counts as a pass
        clock.now = 109.9
        assert jobs.after_job() is False
        clock.now = 110.0
        assert jobs.after_job() is True
        clock.now = 115.0
        assert jobs.after_job() is False
        assert jobs.passes == 1


def test_garbage_that_was_frozen_alive_waits_for_the_full_pass(
    collector: tuple[CollectBetweenJobs, HandClock],
) -> None:
    jobs, clock = collector
    with jobs.active():
        holder = [Node()]
        holder[0].other = Node()
        holder[0].other.other = holder[0]  # a cycle, alive through holder
        watched = weakref.ref(holder[0])
        clock.now = 10.0
        jobs.after_job()  # frozen while alive
        holder.clear()  # now garbage, but frozen: a plain pass does not see it
        clock.now = 20.0
        assert jobs.after_job() is True
        assert watched() is not None
        clock.now = 600.0  # full_every after the block's start: everything is walked
        assert jobs.after_job() is True
        assert jobs.full_passes == 1
        assert watched() is None
