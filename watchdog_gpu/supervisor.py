"""The supervisor: the main thread's judgement of whether the daemon's jobs make progress.

systemd's watchdog (``WatchdogSec=``) restarts a service that stops sending ``WATCHDOG=1``. A
ping from a thread that merely exists would prove nothing, so the supervisor pings only when the
jobs that matter succeeded recently: some account's poll (a single failing account is not a
hang; the others carry on and its staleness shows in the tick's health and the metrics) and the
evaluation. Times are monotonic (``Clock.monotonic``), which does not advance while a laptop
sleeps, so waking up does not look like a hang. Every beat also sends ``STATUS=`` with a
one-line summary for ``systemctl status``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta

from watchdog_gpu import systemd_notify
from watchdog_gpu.config import Settings
from watchdog_gpu.jobs import EVALUATE, FleetSummary, Progress, poll_job_id

log = logging.getLogger(__name__)

# Without systemd's watchdog the supervisor still refreshes STATUS= this often.
DEFAULT_SUPERVISOR_INTERVAL = timedelta(seconds=30)
STALL_INTERVALS = 3
# On top of 3 intervals: the longest an evaluation may legitimately take (rules over a big
# fleet, the dead-man's switch timeout).
EVALUATE_ALLOWANCE = timedelta(seconds=60)


@dataclass(frozen=True, slots=True)
class StallLimits:
    """How long the polls (all accounts together) and the evaluation may go without a
    success before the daemon counts as hung."""

    poll: timedelta
    evaluate: timedelta


def stall_limits(settings: Settings, *, time_scale: float = 1.0) -> StallLimits:
    """Three poll intervals, plus the longest one poll may take (its retry budget and a request
    timeout) for the polls, plus :data:`EVALUATE_ALLOWANCE` for the evaluation.

    The limits are in the engine clock's seconds (what :class:`Progress` measures). Under a
    ``time_scale`` (engine seconds per wall-clock second, the demo's speed) the allowances that
    pass in real time — an HTTP request timeout, the evaluation's own run time — are multiplied
    by it; the intervals and the retry budget (slept on the engine's clock) are not.
    """
    interval = settings.watchdog.poll_interval
    slowest_poll = max(
        (a.retry_budget + a.request_timeout * time_scale for a in settings.accounts),
        default=timedelta(0),
    )
    return StallLimits(
        poll=STALL_INTERVALS * interval + slowest_poll,
        evaluate=STALL_INTERVALS * interval + EVALUATE_ALLOWANCE * time_scale,
    )


@dataclass(frozen=True, slots=True)
class Health:
    """The supervisor's verdict: empty ``stalled`` means the jobs make progress."""

    stalled: tuple[str, ...] = ()

    @property
    def healthy(self) -> bool:
        return not self.stalled


class Supervisor:
    """Decides whether the jobs make progress, and tells systemd (``WATCHDOG=1``, ``STATUS=``).

    Given the progress record, the accounts whose poll jobs count, the stall limits, a
    function returning the current fleet summary, and the environment (``NOTIFY_SOCKET``).
    """

    def __init__(
        self,
        progress: Progress,
        accounts: list[str],
        limits: StallLimits,
        summary: Callable[[], FleetSummary],
        environ: Mapping[str, str],
    ) -> None:
        self.progress = progress
        self.accounts = accounts
        self.limits = limits
        self.summary = summary
        self.environ = environ
        self._was_healthy = True

    def check(self) -> Health:
        """Stalled when no account's poll job succeeded within ``limits.poll`` (a single failing
        account is not a hang: the others carry on and its staleness shows in the tick's health
        and the metrics) or the evaluate job did not succeed within ``limits.evaluate``."""
        stalled = []
        if self.accounts:
            since_poll = min(
                self.progress.seconds_since_success(poll_job_id(a)) for a in self.accounts
            )
            if since_poll > self.limits.poll.total_seconds():
                stalled.append(f"poll: no account polled for {since_poll:.0f}s")
        since_evaluate = self.progress.seconds_since_success(EVALUATE)
        if since_evaluate > self.limits.evaluate.total_seconds():
            stalled.append(f"evaluate: no success for {since_evaluate:.0f}s")
        return Health(tuple(stalled))

    def status_text(self, health: Health) -> str:
        """``3 accounts, 12 instances, 0 pending actions, last tick 12:03:04`` (UTC), with the
        stalled jobs appended when there are any."""
        summary = self.summary()
        last = "never" if summary.last_tick_at is None else f"{summary.last_tick_at:%H:%M:%S}"
        text = (
            f"{plural(summary.accounts, 'account')}, {plural(summary.instances, 'instance')}, "
            f"{plural(summary.pending_actions, 'pending action')}, last tick {last}"
        )
        if not health.healthy:
            text += "; STALLED: " + "; ".join(health.stalled)
        return text

    def beat(self) -> Health:
        """One supervision step: ping the watchdog only when healthy; always update STATUS."""
        health = self.check()
        if health.healthy:
            systemd_notify.watchdog_ping(environ=self.environ)
            if not self._was_healthy:
                log.warning("jobs make progress again; watchdog pings resume")
        else:
            log.error(
                "jobs stalled, not pinging the systemd watchdog stalled=%r",
                "; ".join(health.stalled),
            )
        self._was_healthy = health.healthy
        systemd_notify.status(self.status_text(health), environ=self.environ)
        return health

    def run(self, stop: threading.Event, interval_seconds: float) -> None:
        """Beat every ``interval_seconds`` until ``stop`` is set."""
        while not stop.wait(interval_seconds):
            self.beat()


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def supervisor_interval(environ: Mapping[str, str], poll_interval: timedelta) -> float:
    """``WATCHDOG_USEC/2`` under systemd's watchdog, else 30 s (or the poll interval if
    shorter)."""
    interval = systemd_notify.watchdog_interval(environ)
    if interval is not None:
        return interval
    return min(DEFAULT_SUPERVISOR_INTERVAL, poll_interval).total_seconds()
