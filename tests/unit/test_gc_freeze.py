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
from watchdog_gpu.gc_freeze import long_lived_frozen
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
