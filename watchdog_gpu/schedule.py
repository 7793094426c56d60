"""The daemon's schedule: which job runs how often, in which thread pool, and first when.

The job table, the misfire policy and why each pool is separate: ``docs/architecture.md``,
"The daemon's jobs". ``wake`` is a one-shot job an evaluation adds
(:meth:`~watchdog_gpu.daemon.Daemon.wake_at`): it takes the streamed rows first, since the
evaluate job alone sees the rows the probe job took 15 s earlier.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler

from watchdog_gpu.config import Settings
from watchdog_gpu.jobs import ACT, DELIVER, DIGEST, EVALUATE, PROBE, PRUNE, Jobs, poll_job_id

DELIVER_INTERVAL = timedelta(seconds=15)
PRUNE_INTERVAL = timedelta(hours=1)
PRUNE_FIRST_DELAY = timedelta(minutes=5)
# The digest job only compares the clock with the digest's time (the outbox remembers what was
# sent), so a minute's check is cheap and sends a digest at most a minute late.
DIGEST_INTERVAL = timedelta(minutes=1)
MAX_POLL_WORKERS = 8


def phase_intervals(settings: Settings) -> dict[str, timedelta]:
    """How often each kind of job runs (the engine's time); a poll job per account is "poll"."""
    poll = settings.watchdog.poll_interval
    return {
        "poll": poll,
        PROBE: settings.watchdog.probe_interval,
        EVALUATE: poll,
        ACT: poll,
        DELIVER: DELIVER_INTERVAL,
        PRUNE: PRUNE_INTERVAL,
    }


@dataclass(frozen=True, slots=True)
class JobSpec:
    """One scheduled job: what runs, how often, where, and when first."""

    job_id: str
    func: Callable[..., object]
    args: tuple[str, ...]
    interval: timedelta
    first_run: datetime
    executor: str

    @property
    def misfire_grace_seconds(self) -> int:
        # With coalesce, only the newest due run is considered, and it is at most one interval
        # old when the scheduler looks. But the scheduler's own wait is on the monotonic clock,
        # which stands still during suspend: after a wake-up it may sleep up to one more
        # interval before it looks. Two intervals of grace make that late run happen, once.
        return max(1, math.ceil(2 * self.interval.total_seconds()))


def job_specs(
    jobs: Jobs, settings: Settings, start: datetime, *, time_scale: float = 1.0
) -> list[JobSpec]:
    """Every job of the daemon for ``settings``, first runs counted from ``start`` (a wall-clock
    instant: the scheduler's).

    ``time_scale`` is how many seconds of the engine's clock pass per wall-clock second: 1 for
    ``watchdog-gpu run``; the speed of the accelerated clock for ``watchdog-gpu demo``. The
    configured intervals stay in the engine's time ("poll every 60 s" of a simulated night), so
    every interval and offset here is divided by it. Raises ValueError unless it is above 0.
    """
    if not time_scale > 0:
        raise ValueError("time_scale must be greater than 0")

    def wall(interval: timedelta) -> timedelta:
        return interval / time_scale

    every = phase_intervals(settings)
    poll = every["poll"]
    evaluate_offset = min(poll / 2, timedelta(seconds=30))
    specs = [
        JobSpec(poll_job_id(name), jobs.poll, (name,), wall(poll), start, "poll")
        for name in jobs.watchdog.providers
    ]
    probe_offset = min(poll / 4, timedelta(seconds=15))
    act_offset = evaluate_offset + poll / 2
    specs += [
        JobSpec(PROBE, jobs.probe, (), wall(every[PROBE]), start + wall(probe_offset), "probe"),
        JobSpec(
            EVALUATE,
            jobs.evaluate,
            (),
            wall(every[EVALUATE]),
            start + wall(evaluate_offset),
            "default",
        ),
        # Woken by each evaluation; the interval is the fallback when evaluations fail.
        JobSpec(ACT, jobs.act, (), wall(every[ACT]), start + wall(act_offset), "act"),
        JobSpec(
            DELIVER, jobs.deliver, (), wall(_deliver_every(every, time_scale)), start, "notify"
        ),
        JobSpec(
            PRUNE,
            jobs.prune,
            (),
            wall(every[PRUNE]),
            start + wall(PRUNE_FIRST_DELAY),
            "default",
        ),
    ]
    if settings.notify.digest.enabled:
        specs.append(JobSpec(DIGEST, jobs.digest, (), wall(DIGEST_INTERVAL), start, "notify"))
    return specs


def _deliver_every(every: dict[str, timedelta], time_scale: float) -> timedelta:
    """The delivery job's own cadence (it is also woken after each evaluate and act). On an
    accelerated clock (the demo's 720x) the 15 s retry cadence would be 21 ms of real time,
    shorter than one delivery pass, and the scheduler would skip most runs as "still running";
    there it follows the poll interval instead, like the jobs that wake it."""
    if time_scale <= 1:
        return every[DELIVER]
    return max(every[DELIVER], every["poll"])


def build_scheduler(poll_workers: int) -> Any:
    """A UTC ``BackgroundScheduler`` with one thread pool per kind of work."""
    pools = {
        "default": 1,  # evaluate and prune: one writer of decisions at a time
        "poll": max(1, min(poll_workers, MAX_POLL_WORKERS)),
        "probe": 1,  # the prober runs its own bounded pool of SSH sessions
        "act": 1,  # one executor per database (the outbox claims assume it)
        "notify": 1,
    }
    executors = {
        name: ThreadPoolExecutor(size, pool_kwargs={"thread_name_prefix": f"job-{name}"})
        for name, size in pools.items()
    }
    return BackgroundScheduler(
        timezone="UTC",
        executors=executors,
        job_defaults={"coalesce": True, "max_instances": 1},
    )


def add_jobs(scheduler: Any, specs: list[JobSpec]) -> None:
    for spec in specs:
        scheduler.add_job(
            spec.func,
            "interval",
            seconds=spec.interval.total_seconds(),
            args=list(spec.args),
            id=spec.job_id,
            name=spec.job_id,
            executor=spec.executor,
            next_run_time=spec.first_run,
            max_instances=1,
            coalesce=True,
            misfire_grace_time=spec.misfire_grace_seconds,
        )
