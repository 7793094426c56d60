"""The daemon's schedule: jobs, intervals, thread pools, first runs and misfire handling, as
configured on a real (not started) APScheduler ``BackgroundScheduler``."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from apscheduler.events import EVENT_JOB_MISSED
from apscheduler.triggers.interval import IntervalTrigger

from watchdog_gpu.clock import SystemClock
from watchdog_gpu.config import AccountConfig, NotifySection, Settings, WatchdogSection
from watchdog_gpu.digest import DigestConfig
from watchdog_gpu.jobs import ACT, DELIVER, DIGEST, EVALUATE, PROBE, PRUNE, Jobs, Progress
from watchdog_gpu.schedule import (
    DELIVER_INTERVAL,
    DIGEST_INTERVAL,
    PRUNE_INTERVAL,
    JobSpec,
    add_jobs,
    build_scheduler,
    job_specs,
)
from watchdog_gpu.secrets import SecretReference
from watchdog_gpu.sim.scenario import parse_scenario
from watchdog_gpu.sim.simulate import simulation

START = datetime(2026, 3, 2, 20, 0, tzinfo=UTC)

TWO_ACCOUNTS = """
name = "schedule"
start = "2026-03-02T20:00:00Z"
duration = "1h"
tick = "60s"

[[accounts]]
name = "vast-a"
provider = "vast"

[[accounts]]
name = "runpod-b"
provider = "runpod"
"""


@pytest.fixture
def jobs() -> Iterator[Jobs]:
    with simulation(parse_scenario(TWO_ACCOUNTS)) as sim:
        yield Jobs(
            sim.assembly.watchdog,
            sim.clock,
            Progress(sim.clock),
            poll_interval=sim.settings.watchdog.poll_interval,
        )


def test_one_poll_job_per_account_and_one_of_each_other_job(jobs: Jobs) -> None:
    specs = job_specs(jobs, _settings(jobs), START)

    assert [spec.job_id for spec in specs] == [
        "poll:vast-a",
        "poll:runpod-b",
        PROBE,
        EVALUATE,
        ACT,
        DELIVER,
        PRUNE,
    ]
    assert [spec.args for spec in specs[:2]] == [("vast-a",), ("runpod-b",)]


def test_the_digest_job_runs_every_minute_on_the_notify_pool_only_when_the_digest_is_on(
    jobs: Jobs,
) -> None:
    off = _settings(jobs)
    on = off.model_copy(
        update={"notify": NotifySection(digest=DigestConfig(every="daily", at="08:00"))}
    )

    assert DIGEST not in [spec.job_id for spec in job_specs(jobs, off, START)]
    [digest] = [spec for spec in job_specs(jobs, on, START) if spec.job_id == DIGEST]
    assert (digest.interval, digest.executor, digest.first_run) == (
        DIGEST_INTERVAL,
        "notify",
        START,
    )


def test_slow_kinds_of_work_run_in_separate_thread_pools(jobs: Jobs) -> None:
    executors = {spec.job_id: spec.executor for spec in job_specs(jobs, _settings(jobs), START)}

    assert executors["poll:vast-a"] == executors["poll:runpod-b"] == "poll"
    distinct = {executors[PROBE], executors[EVALUATE], executors[ACT], executors[DELIVER]}
    assert distinct == {"probe", "default", "act", "notify"}
    assert executors["poll:vast-a"] not in distinct


def test_evaluation_runs_after_the_first_polls_and_intervals_follow_the_config(
    jobs: Jobs,
) -> None:
    specs = {spec.job_id: spec for spec in job_specs(jobs, _settings(jobs), START)}
    minute = timedelta(seconds=60)

    assert specs["poll:vast-a"].first_run == START
    assert START < specs[PROBE].first_run < specs[EVALUATE].first_run < specs[ACT].first_run
    assert specs[EVALUATE].first_run == START + timedelta(seconds=30)
    assert specs["poll:vast-a"].interval == specs[EVALUATE].interval == minute
    assert specs[PROBE].interval == minute
    assert specs[DELIVER].interval == DELIVER_INTERVAL
    assert specs[PRUNE].interval == PRUNE_INTERVAL


def test_a_late_run_is_coalesced_into_one_with_two_intervals_of_grace(jobs: Jobs) -> None:
    scheduler = build_scheduler(poll_workers=2)
    add_jobs(scheduler, job_specs(jobs, _settings(jobs), START))

    added = {job.id: job for job in scheduler.get_jobs()}

    assert set(added) == {"poll:vast-a", "poll:runpod-b", PROBE, EVALUATE, ACT, DELIVER, PRUNE}
    for job in added.values():
        assert isinstance(job.trigger, IntervalTrigger)
        interval = job.trigger.interval.total_seconds()
        assert job.max_instances == 1
        assert job.coalesce is True
        assert job.misfire_grace_time == 2 * interval
    assert added[EVALUATE].trigger.interval == timedelta(seconds=60)
    assert added[PRUNE].misfire_grace_time == 7200


def test_every_executor_a_job_names_exists_and_the_scheduler_runs_in_utc(jobs: Jobs) -> None:
    scheduler = build_scheduler(poll_workers=2)
    add_jobs(scheduler, job_specs(jobs, _settings(jobs), START))

    assert str(scheduler.timezone) == "UTC"
    for job in scheduler.get_jobs():
        # APScheduler only looks executors up when a run is due; a typo would fail silently.
        assert scheduler._lookup_executor(job.executor) is not None


def _settings(jobs: Jobs) -> Settings:
    return Settings(
        watchdog=WatchdogSection(
            poll_interval=timedelta(seconds=60), probe_interval=timedelta(seconds=60)
        ),
        accounts=[
            AccountConfig(name=name, provider="vast", api_key=SecretReference.plain("sim-key"))
            for name in jobs.watchdog.providers
        ],
    )


@pytest.mark.slow
def test_a_scheduler_held_up_for_longer_than_an_interval_runs_the_job_once_when_it_resumes() -> (
    None
):
    # A stand-in for a laptop's suspend: the scheduler is paused while runs fall due. The newest
    # due run is 1.5 s late when it resumes: APScheduler's default grace (1 s) would drop it as
    # missed and wait for the next interval.
    runs: list[datetime] = []
    missed: list[str] = []
    clock = SystemClock()
    scheduler = build_scheduler(poll_workers=1)
    scheduler.add_listener(lambda event: missed.append(event.job_id), EVENT_JOB_MISSED)
    spec = JobSpec(
        "poll:a", lambda: runs.append(clock.now()), (), timedelta(seconds=2), clock.now(), "poll"
    )
    add_jobs(scheduler, [spec])
    scheduler.start(paused=True)
    try:
        threading.Event().wait(3.5)  # due at +0 s and +2 s meanwhile
        scheduler.resume()
        for _ in range(200):
            if runs:
                break
            threading.Event().wait(0.05)
    finally:
        scheduler.shutdown(wait=True)  # every run submitted so far has finished

    assert missed == []
    assert len(runs) == 1
