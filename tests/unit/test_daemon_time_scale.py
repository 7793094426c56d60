"""The daemon's time scale: configured intervals stay in the engine clock's time and the
scheduler waits them ``time_scale`` times faster on the wall clock (``watchdog-gpu demo``).

The daemon test runs the real scheduler over the real engine (loopback simulator servers, real
SQLite) on an accelerated clock; it waits for conditions with a generous bound, never for
durations.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.support.scenario_texts import one_busy_instance
from watchdog_gpu.clock import SystemClock
from watchdog_gpu.config import AccountConfig, Settings, WatchdogSection
from watchdog_gpu.daemon import Daemon
from watchdog_gpu.jobs import ACT, DELIVER, EVALUATE, PROBE, PRUNE, Jobs, Progress, poll_job_id
from watchdog_gpu.schedule import DELIVER_INTERVAL, PRUNE_FIRST_DELAY, PRUNE_INTERVAL, job_specs
from watchdog_gpu.secrets import SecretReference
from watchdog_gpu.sim.clock import AcceleratedClock
from watchdog_gpu.sim.scenario import parse_scenario
from watchdog_gpu.sim.servers import start_servers
from watchdog_gpu.sim.simulate import simulation
from watchdog_gpu.sim.ssh import SimulatedSshRunner
from watchdog_gpu.sim.world import SimulatedWorld
from watchdog_gpu.store import Store, sqlite_url
from watchdog_gpu.supervisor import EVALUATE_ALLOWANCE, stall_limits
from watchdog_gpu.wiring import assemble, open_store

WALL_START = datetime(2026, 12, 2, 17, 0, tzinfo=UTC)
NIGHT = one_busy_instance(
    "time-scale", start="2030-01-01T22:00:00Z", duration="8h", instance_name="train"
)
WAIT_SECONDS = 60.0


def settings_for(poll: timedelta, **account: object) -> Settings:
    return Settings(
        watchdog=WatchdogSection(poll_interval=poll, probe_interval=poll),
        accounts=[
            AccountConfig(
                name="vast-main",
                provider="vast",
                api_key=SecretReference.plain("sim-vast-main"),
                **account,
            )
        ],
    )


@pytest.fixture
def jobs() -> Iterator[Jobs]:
    with simulation(parse_scenario(NIGHT)) as sim:
        yield Jobs(
            sim.assembly.watchdog,
            sim.clock,
            Progress(sim.clock),
            poll_interval=sim.settings.watchdog.poll_interval,
        )


def test_an_accelerated_schedule_waits_every_interval_and_offset_divided_by_the_scale(
    jobs: Jobs,
) -> None:
    settings = settings_for(timedelta(seconds=60))
    real = {spec.job_id: spec for spec in job_specs(jobs, settings, WALL_START)}
    fast = {spec.job_id: spec for spec in job_specs(jobs, settings, WALL_START, time_scale=60.0)}

    assert set(fast) == set(real)
    for job_id, spec in fast.items():
        if job_id != DELIVER:  # on an accelerated clock delivery follows the poll interval
            assert spec.interval == real[job_id].interval / 60
        assert spec.first_run - WALL_START == (real[job_id].first_run - WALL_START) / 60
        assert spec.executor == real[job_id].executor
    assert fast[poll_job_id("vast-main")].interval == timedelta(seconds=1)
    assert fast[EVALUATE].first_run == WALL_START + timedelta(seconds=0.5)
    assert real[DELIVER].interval == DELIVER_INTERVAL
    assert fast[DELIVER].interval == max(DELIVER_INTERVAL, timedelta(seconds=60)) / 60
    assert fast[PRUNE].interval == PRUNE_INTERVAL / 60
    assert fast[PRUNE].first_run == WALL_START + PRUNE_FIRST_DELAY / 60
    assert fast[PROBE].first_run < fast[EVALUATE].first_run < fast[ACT].first_run


def test_the_schedule_of_watchdog_gpu_run_is_unchanged_by_default(jobs: Jobs) -> None:
    settings = settings_for(timedelta(seconds=60))
    default = job_specs(jobs, settings, WALL_START)
    explicit = job_specs(jobs, settings, WALL_START, time_scale=1.0)

    assert [(s.job_id, s.interval, s.first_run) for s in default] == [
        (s.job_id, s.interval, s.first_run) for s in explicit
    ]
    assert {s.job_id: s.interval for s in default}[EVALUATE] == timedelta(seconds=60)


@pytest.mark.parametrize("scale", [0.0, -2.0])
def test_a_time_scale_must_be_above_zero(jobs: Jobs, scale: float) -> None:
    with pytest.raises(ValueError, match="time_scale"):
        job_specs(jobs, settings_for(timedelta(seconds=60)), WALL_START, time_scale=scale)


def test_stall_limits_scale_only_what_passes_in_real_time() -> None:
    settings = settings_for(
        timedelta(seconds=60),
        request_timeout=timedelta(seconds=30),
        retry_budget=timedelta(seconds=60),
    )

    plain = stall_limits(settings)
    fast = stall_limits(settings, time_scale=100.0)

    # Intervals and the retry budget are slept on the engine's clock; the request timeout and
    # the evaluation's own run time pass in real time, i.e. 100 times as much engine time.
    assert plain.poll == timedelta(seconds=3 * 60 + 60 + 30)
    assert fast.poll == timedelta(seconds=3 * 60 + 60 + 30 * 100)
    assert plain.evaluate == timedelta(seconds=3 * 60) + EVALUATE_ALLOWANCE
    assert fast.evaluate == timedelta(seconds=3 * 60) + EVALUATE_ALLOWANCE * 100


def test_a_scaled_daemon_needs_the_wall_clock_for_its_scheduler(tmp_path: Path) -> None:
    scenario = parse_scenario(NIGHT)
    clock = AcceleratedClock(60.0, start=scenario.start)
    with start_servers(SimulatedWorld(scenario, clock)) as servers:
        settings = settings_for(timedelta(seconds=60), api_url=servers.urls["vast"])
        settings = settings.model_copy(
            update={"metrics": settings.metrics.model_copy(update={"enabled": False})}
        )
        assembly = assemble(settings, clock, {}, store=_store(tmp_path))
        try:
            with pytest.raises(ValueError, match="wall clock"):
                Daemon(settings, assembly, clock, {}, time_scale=60.0)
            with pytest.raises(ValueError, match="time_scale"):
                Daemon(settings, assembly, clock, {}, time_scale=0.0, wall_clock=SystemClock())
        finally:
            assembly.close()
            assembly.store.engine.dispose()


def test_a_daemon_on_an_accelerated_clock_schedules_on_the_wall_clock_and_decides_in_its_own(
    tmp_path: Path,
) -> None:
    scenario = parse_scenario(NIGHT)
    wall = SystemClock()
    speed = 120.0  # a 60 s poll interval is waited for half a second
    clock = AcceleratedClock(speed, start=scenario.start, base=wall)
    world = SimulatedWorld(scenario, clock)
    with start_servers(world) as servers:
        settings = settings_for(timedelta(seconds=60), api_url=servers.urls["vast"])
        settings = settings.model_copy(
            update={"metrics": settings.metrics.model_copy(update={"enabled": False})}
        )
        assembly = assemble(
            settings, clock, {}, store=_store(tmp_path), runner=SimulatedSshRunner(world)
        )
        daemon = Daemon(settings, assembly, clock, {}, time_scale=speed, wall_clock=wall)
        started_at = wall.now()
        try:
            daemon.start()
            jobs = {job.id: job for job in daemon.scheduler.get_jobs()}
            # First runs are wall-clock instants (the virtual night is years ahead of them).
            for job in jobs.values():
                assert started_at <= job.next_run_time <= started_at + timedelta(minutes=1)
            assert jobs[EVALUATE].trigger.interval == timedelta(seconds=0.5)

            wait_until(lambda: daemon.progress.stats(EVALUATE).successes >= 3, "3 evaluations")
        finally:
            daemon.shutdown()

    # What the engine recorded is stamped with the accelerated clock's time.
    snapshot = assembly.store.instance_snapshot("vast-main", "9001")
    assert snapshot is not None
    assert snapshot.observed_at >= scenario.start
    # Three evaluations half a (real) second apart: well over a virtual minute has passed.
    assert daemon.jobs.summary.last_tick_at is not None
    assert daemon.jobs.summary.last_tick_at - scenario.start >= timedelta(seconds=60)


def _store(tmp_path: Path) -> Store:
    return open_store(sqlite_url(tmp_path / "watchdog-gpu.db"))


def wait_until(condition: Callable[[], bool], what: str) -> None:
    pause = threading.Event()
    for _ in range(int(WAIT_SECONDS / 0.05)):
        if condition():
            return
        pause.wait(0.05)
    pytest.fail(f"gave up waiting for {what}")
