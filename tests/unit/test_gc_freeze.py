"""The daemon's start-up objects leave the garbage collector's full passes while it runs
(``gc_freeze.py``), and go back to it afterwards."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.monotonic import HandMonotonic
from tests.support.scenario_texts import one_busy_instance
from watchdog_gpu.clock import SystemClock
from watchdog_gpu.daemon import EXIT_OK, Daemon, run_daemon
from watchdog_gpu.gc_freeze import FullCollections, full_collections_on_schedule, long_lived_frozen
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
        daemon.request_stop("test")

    code = run_daemon(
        sim.settings, SystemClock(), {}, build=lambda *_: sim.assembly, on_started=started
    )

    assert code == EXIT_OK
    assert seen["frozen"] > 0
    assert seen["assembly tracked"] is False  # alive when start-up ended: frozen
    assert gc.get_freeze_count() == 0  # given back at shutdown


def full_collections_while(keep: list[object]) -> int:
    """How many full (generation 2) collections CPython starts by itself while ``keep`` gets
    enough surviving containers to promote through the young generations many times over."""
    started: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and info["generation"] == 2:
            started.append(1)

    gc.callbacks.append(count)
    try:
        for _ in range(200_000):
            keep.append([])  # a tracked container that survives
    finally:
        gc.callbacks.remove(count)
    return len(started)


def test_on_schedule_cpython_starts_no_full_collection_and_the_threshold_comes_back() -> None:
    before = gc.get_threshold()
    kept: list[object] = []
    with long_lived_frozen(), full_collections_on_schedule():
        assert gc.get_threshold()[:2] == before[:2]  # the young generations keep theirs
        assert full_collections_while(kept) == 0
    assert gc.get_threshold() == before
    # Without the schedule the same growth does start full collections (the check above can
    # fail): the surviving objects outgrow a quarter of the old generation.
    with long_lived_frozen():
        assert full_collections_while(kept) > 0


def test_overlapping_schedules_restore_the_threshold_only_when_the_last_ends() -> None:
    before = gc.get_threshold()
    first, second = full_collections_on_schedule(), full_collections_on_schedule()
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)  # one daemon of a test process stops, the other runs
    assert gc.get_threshold() != before
    second.__exit__(None, None, None)
    assert gc.get_threshold() == before


def test_a_full_collection_runs_after_a_job_once_the_interval_has_passed() -> None:
    clock, calls = HandMonotonic(), list[int]()

    def collect(generation: int) -> int:
        calls.append(generation)
        return 3

    collections = FullCollections(clock, interval=600.0, collect=collect)
    assert collections.after_job() is False  # start-up has just collected
    clock.now += 599.9
    assert collections.after_job() is False
    clock.now += 0.1
    assert collections.after_job() is True
    assert collections.after_job() is False
    clock.now += 600.0
    assert collections.after_job() is True
    assert calls == [2, 2]
    assert (collections.calls, collections.freed) == (2, 6)


def test_a_failing_collection_never_fails_the_job() -> None:
    clock = HandMonotonic()

    def collect(_generation: int) -> int:
        raise RuntimeError("boom")

    collections = FullCollections(clock, interval=1.0, collect=collect)
    clock.now += 1.0
    assert collections.after_job() is False
    assert collections.calls == 0


def test_garbage_promoted_to_the_old_generation_is_freed_by_the_scheduled_collection() -> None:
    clock = HandMonotonic()
    with long_lived_frozen(), full_collections_on_schedule():
        first, second = Node(), Node()
        first.other, second.other = second, first
        gone = weakref.ref(first)
        gc.collect(1)  # survives the young passes: now in the old generation
        del first, second
        gc.collect(1)  # young passes do not look at it
        assert gone() is not None
        collections = FullCollections(clock, interval=600.0)
        clock.now += 600.0
        assert collections.after_job() is True
        assert gone() is None
        assert collections.freed >= 2


def test_the_daemon_runs_a_due_full_collection_after_its_jobs(sim: Simulation) -> None:
    clock = HandMonotonic()
    calls: list[int] = []

    def collect(generation: int) -> int:
        calls.append(generation)
        return 0

    seen: dict[str, object] = {}

    def started(daemon: Daemon) -> None:
        seen["threshold"] = gc.get_threshold()[2]
        daemon.full_collections = FullCollections(clock, interval=600.0, collect=collect)
        daemon._after_job(None)
        clock.now += 600.0
        daemon._after_job(None)
        daemon.request_stop("test")

    code = run_daemon(
        sim.settings,
        SystemClock(),
        {},
        build=lambda *_: sim.assembly,
        on_started=started,
    )

    assert code == EXIT_OK
    assert seen["threshold"] == 1 << 30  # CPython's own full collections off while it runs
    assert calls == [2]
