"""The daemon's jobs and their bookkeeping: what each scheduled run does, and whether it worked.

Each job is one phase of the engine (:class:`~watchdog_gpu.tick.Watchdog`) run at its own pace:
a poll per account, the probe round, evaluate, act, notification delivery and retention. A job
reads ``now`` from the clock once, runs its phase, and catches every exception at its boundary:
one failing account, host or notifier never stops the others, and the scheduler never sees an
exception. :class:`Progress` records per job when it last succeeded (monotonic time, so a laptop
waking from sleep does not look like a hang) and counts errors, missed and skipped runs; the
supervisor reads it to decide whether to keep pinging systemd's watchdog.

Jobs return early without doing anything once the stop event is set: runs already queued when
SIGTERM arrives must not start new work (an action not started now is resumed at the next start,
because actions are recorded before they run).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Protocol, TypeVar

from watchdog_gpu.clock import Clock
from watchdog_gpu.model import OPEN_ACTION_STATUSES, ActionStatus, ProbeOutcome
from watchdog_gpu.reports import DeliveryReport, ExecutorReport, TickReport
from watchdog_gpu.tick import Watchdog
from watchdog_gpu.wake import Wakes

log = logging.getLogger(__name__)

T = TypeVar("T")

POLL_PREFIX = "poll:"
PROBE = "probe"
EVALUATE = "evaluate"
ACT = "act"
DELIVER = "deliver"
PRUNE = "prune"
WAKE = "wake"  # a one-shot probe + evaluate between two ticks (wake.py)
VERIFYING = (ActionStatus.CALLED, ActionStatus.UNVERIFIED)  # kills whose re-listing is due
DIGEST = "digest"  # the spend digest, when [notify.digest] is on (digest.py)

# A poll result older than this many poll intervals no longer counts as "polled" for health.
STALE_POLL_INTERVALS = 3


def poll_job_id(account: str) -> str:
    return f"{POLL_PREFIX}{account}"


@dataclass(frozen=True, slots=True)
class JobStats:
    """One job's record. Times in ``*_monotonic`` come from ``Clock.monotonic()``."""

    runs: int = 0
    successes: int = 0
    errors: int = 0
    missed: int = 0  # the scheduler dropped a run (later than misfire_grace_time)
    skipped: int = 0  # a run was due while the previous one still ran (max_instances)
    running_since_monotonic: float | None = None
    last_success_monotonic: float | None = None
    last_success_at: datetime | None = None
    last_outcome: str = ""  # "ok", a provider error kind, or the exception type


class Progress:
    """Thread-safe per-job records (the jobs write, the supervisor and metrics read)."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._jobs: dict[str, JobStats] = {}
        self.started_monotonic = clock.monotonic()

    def _update(self, job_id: str, change: Callable[[JobStats], JobStats]) -> None:
        # Read, change and write under one lock: jobs of different threads update counters.
        with self._lock:
            self._jobs[job_id] = change(self._jobs.get(job_id, JobStats()))

    def started(self, job_id: str) -> None:
        at = self._clock.monotonic()
        self._update(job_id, lambda s: replace(s, runs=s.runs + 1, running_since_monotonic=at))

    def succeeded(self, job_id: str, now: datetime, outcome: str = "ok") -> None:
        at = self._clock.monotonic()
        self._update(
            job_id,
            lambda s: replace(
                s,
                successes=s.successes + 1,
                running_since_monotonic=None,
                last_success_monotonic=at,
                last_success_at=now,
                last_outcome=outcome,
            ),
        )

    def failed(self, job_id: str, outcome: str) -> None:
        self._update(
            job_id,
            lambda s: replace(
                s, errors=s.errors + 1, running_since_monotonic=None, last_outcome=outcome
            ),
        )

    def missed(self, job_id: str) -> None:
        self._update(job_id, lambda s: replace(s, missed=s.missed + 1))

    def skipped(self, job_id: str) -> None:
        self._update(job_id, lambda s: replace(s, skipped=s.skipped + 1))

    def stats(self, job_id: str) -> JobStats:
        with self._lock:
            return self._jobs.get(job_id, JobStats())

    def snapshot(self) -> dict[str, JobStats]:
        with self._lock:
            return dict(self._jobs)

    def seconds_since_success(self, job_id: str) -> float:
        """Seconds since ``job_id`` last succeeded, or since this record began if it never did."""
        last = self.stats(job_id).last_success_monotonic
        reference = self.started_monotonic if last is None else last
        return max(0.0, self._clock.monotonic() - reference)


class DaemonObserver(Protocol):
    """What the jobs report as they go (metrics implement it; every method must not raise)."""

    def on_poll(self, account: str, result: str, now: datetime) -> None: ...

    def on_probe(self, outcomes: Sequence[ProbeOutcome], now: datetime) -> None: ...

    def on_tick(self, report: TickReport) -> None: ...

    def on_executor(self, report: ExecutorReport, now: datetime) -> None: ...

    def on_delivery(self, report: DeliveryReport | None, now: datetime) -> None: ...

    def on_job_event(self, job_id: str, event: str) -> None:
        """``event``: ``error`` (the job raised), ``missed`` or ``skipped``."""

    def on_job_done(self, job_id: str, seconds: float) -> None:
        """A run of ``job_id`` finished (worked or failed) after ``seconds``."""


class NullObserver:
    """Reports nowhere (metrics disabled)."""

    def on_poll(self, account: str, result: str, now: datetime) -> None:
        pass

    def on_probe(self, outcomes: Sequence[ProbeOutcome], now: datetime) -> None:
        pass

    def on_tick(self, report: TickReport) -> None:
        pass

    def on_executor(self, report: ExecutorReport, now: datetime) -> None:
        pass

    def on_delivery(self, report: DeliveryReport | None, now: datetime) -> None:
        pass

    def on_job_event(self, job_id: str, event: str) -> None:
        pass

    def on_job_done(self, job_id: str, seconds: float) -> None:
        pass


class WakeScheduler(Protocol):
    """Where a wake is scheduled (the daemon's scheduler), in the engine's time."""

    def next_evaluation(self) -> datetime | None:
        """When the evaluate job runs next (None: unknown)."""

    def wake_at(self, at: datetime | None) -> None:
        """Run :meth:`Jobs.wake` once at ``at``, replacing the pending wake; None cancels it."""


class Pinger(Protocol):
    """The dead-man's switch (:class:`watchdog_gpu.heartbeat.DeadMansSwitch`)."""

    def ping(self) -> bool: ...

    def fail(self, reason: str) -> bool: ...


@dataclass(frozen=True, slots=True)
class FleetSummary:
    """What the status line says, as of the last evaluation."""

    accounts: int
    instances: int
    pending_actions: int
    last_tick_at: datetime | None = None


class Jobs:
    """The job functions the scheduler calls. Given the engine, the clock, the progress record,
    the poll interval (to judge stale polls), and optionally an observer (metrics), the
    dead-man's switch, the stop event, ``wake_act`` (run the act job now), ``wake_deliver``
    (run the delivery job now: a warning enqueued by an evaluation must not wait for the delivery
    job's own interval, or it reaches the user that much less ahead of the action), and
    ``wakes`` with the ``waker`` that schedules them: after each evaluation, a wake
    (:meth:`wake`) when a verdict falls due before the next tick (``wake.py``)."""

    def __init__(
        self,
        watchdog: Watchdog,
        clock: Clock,
        progress: Progress,
        *,
        poll_interval: timedelta,
        observer: DaemonObserver | None = None,
        dead_mans_switch: Pinger | None = None,
        stop: threading.Event | None = None,
        wake_act: Callable[[], None] | None = None,
        wake_deliver: Callable[[], None] | None = None,
        wakes: Wakes | None = None,
        waker: WakeScheduler | None = None,
        act_at: Callable[[datetime], None] | None = None,
        job_scope: Callable[[], AbstractContextManager[object]] = nullcontext,
    ) -> None:
        """``act_at(at)``: run the act job at ``at`` (engine time) if it would run later;
        ``job_scope()``: the context each job runs in (``Assembly.job_scope``)."""
        self.watchdog = watchdog
        self.clock = clock
        self.progress = progress
        self.poll_interval = poll_interval
        self.observer: DaemonObserver = observer or NullObserver()
        self.dead_mans_switch = dead_mans_switch
        self.stop = stop or threading.Event()
        self.wake_act = wake_act
        self.wake_deliver = wake_deliver
        self.act_at = act_at
        self.job_scope = job_scope
        self.wakes = wakes if waker is not None else None
        self.waker = waker
        # One probe round at a time: the probe job's and a wake's (their pools differ).
        self._probe_lock = threading.Lock()
        # One listing of an account at a time: its poll job's and a wake's (wake.py, listing).
        self._poll_locks = {account: threading.Lock() for account in watchdog.providers}
        self._poll_results: dict[str, tuple[str, float]] = {}
        self._lock = threading.Lock()
        self.summary = FleetSummary(len(watchdog.providers), 0, 0)

    # -- the boundary -----------------------------------------------------------------------

    def _run(self, job_id: str, body: Callable[[datetime], T]) -> T | None:
        """Run ``body(now)`` as job ``job_id``: skip when stopping, record the outcome, never
        raise. Returns the body's result, or None when skipped or failed."""
        if self.stop.is_set():
            log.debug("job skipped, stopping job=%s", job_id)
            return None
        self.progress.started(job_id)
        started = self.clock.monotonic()
        with self.job_scope():
            now = self.clock.now()
            try:
                result = body(now)
            except Exception as error:  # the boundary: log, count, carry on with the other jobs
                kind = str(getattr(error, "kind", "")) or type(error).__name__
                log.exception("job failed job=%s error_kind=%s", job_id, kind)
                self.progress.failed(job_id, kind)
                self._observe_done(job_id, started)
                self._observe(lambda: self.observer.on_job_event(job_id, "error"))
                return None
        self.progress.succeeded(job_id, now)
        self._observe_done(job_id, started)
        return result

    def _observe_done(self, job_id: str, started: float) -> None:
        seconds = self.clock.monotonic() - started
        self._observe(lambda: self.observer.on_job_done(job_id, seconds))

    def _observe(self, call: Callable[[], None]) -> None:
        # Metrics must never break a job: a failing collector is logged, nothing more.
        try:
            call()
        except Exception:
            log.exception("observer failed")

    # -- the jobs ---------------------------------------------------------------------------

    def poll(self, account: str) -> str | None:
        """List and record one account. Returns "ok", the provider error kind (a handled
        outcome: the job itself succeeded), or None when the job failed or was skipped."""

        def body(now: datetime) -> str:
            try:
                result = self.watchdog.poll_account(account, now)
            except Exception as error:
                self._note_poll(account, type(error).__name__)
                raise
            self._note_poll(account, result)
            self._observe(lambda: self.observer.on_poll(account, result, now))
            return result

        with self._poll_locks.get(account) or threading.Lock():
            return self._run(poll_job_id(account), body)

    def _note_poll(self, account: str, result: str) -> None:
        with self._lock:
            self._poll_results[account] = (result, self.clock.monotonic())

    def polled(self) -> dict[str, str]:
        """Every account's latest poll result; "stale" when older than 3 poll intervals,
        "not_polled" before the first."""
        limit = STALE_POLL_INTERVALS * self.poll_interval.total_seconds()
        now = self.clock.monotonic()
        with self._lock:
            results = dict(self._poll_results)
        polled = {}
        for account in self.watchdog.providers:
            result, at = results.get(account, ("not_polled", now))
            polled[account] = result if now - at <= limit else "stale"
        return polled

    def probe(self) -> list[ProbeOutcome] | None:
        """Probe every running instance over SSH and record the samples."""

        def body(now: datetime) -> list[ProbeOutcome]:
            outcomes = self.watchdog.probe(now)
            self._observe(lambda: self.observer.on_probe(outcomes, now))
            return outcomes

        with self._probe_lock:
            return self._run(PROBE, body)

    def evaluate(self) -> TickReport | None:
        """Rules and planner over the recorded state; then wake the act and delivery jobs,
        schedule a wake when a verdict falls due before the next tick, refresh the status summary
        and, when the tick was healthy, ping the dead-man's switch."""
        return self._evaluate(wake=False)

    def wake(self) -> TickReport | None:
        """A wake between two ticks (``wake.py``): take the streamed rows (a probe round), then
        evaluate as :meth:`evaluate` does — sharing the fuse's per-tick allowance with the tick
        before it."""
        if self.stop.is_set():
            return None
        listing = False
        if self.wakes is not None:
            listing = self.wakes.listing
            self.wakes.ran(self.clock.now())
        if listing:  # a decision on listed state falls due: list every account first
            for account in self.watchdog.providers:
                self.poll(account)
        self.probe()
        return self._evaluate(wake=True)

    def _evaluate(self, *, wake: bool) -> TickReport | None:
        def body(now: datetime) -> TickReport:
            report = TickReport(now, polled=self.polled())
            if wake:
                self.watchdog.evaluate(now, report, wake=True)
            else:
                self.watchdog.evaluate(now, report)
            self._observe(lambda: self.observer.on_tick(report))
            log.debug(
                "evaluated findings=%d healthy=%s",
                len(report.findings),
                str(report.healthy).lower(),
            )
            return report

        report = self._run(EVALUATE, body)
        if report is None:
            if not wake and not self.stop.is_set() and self.dead_mans_switch is not None:
                failed = self.progress.stats(EVALUATE).last_outcome
                self.dead_mans_switch.fail(f"watchdog-gpu evaluation failed: {failed}")
            return None
        self._wake(self.wake_act, ACT)
        self._wake(self.wake_deliver, DELIVER)
        self._schedule_wake(report)
        self._refresh_summary(report.now)
        if not wake:  # the dead-man's switch hears from the ticks (once per interval)
            self._report_health(report)
        return report

    def _report_health(self, report: TickReport) -> None:
        """Tell the dead-man's switch how the tick went: a ping when healthy, else a failure
        naming the accounts that could not be listed and the rules that failed."""
        if report.healthy:
            if self.dead_mans_switch is not None:
                self.dead_mans_switch.ping()
            return
        unhealthy = {a: r for a, r in report.polled.items() if r != "ok"}
        reason = "accounts={} failed_rules={}".format(
            ",".join(f"{a}:{r}" for a, r in sorted(unhealthy.items())) or "-",
            ",".join(sorted(report.failed_rules)) or "-",
        )
        log.info("tick not healthy, dead-man's switch told of failure %s", reason)
        if self.dead_mans_switch is not None:
            self.dead_mans_switch.fail(f"watchdog-gpu tick not healthy: {reason}")

    def _wake(self, wake: Callable[[], None] | None, job_id: str) -> None:
        if wake is None or self.stop.is_set():
            return
        try:
            wake()
        except Exception:  # the woken job still runs on its own interval
            log.exception("waking a job failed job=%s", job_id)

    def _schedule_wake(self, report: TickReport) -> None:
        """After an evaluation: the wake its ``next_change`` calls for replaces the pending one
        (or cancels it). A failure only costs the wake: the next tick still evaluates."""
        if self.wakes is None or self.waker is None or self.stop.is_set():
            return
        try:
            at = self.wakes.after_evaluation(
                now=report.now,
                next_change=report.next_change,
                next_due=report.next_due,
                next_listed=report.next_listed,
                probed_at=report.probed_at,
                next_tick=self.waker.next_evaluation(),
            )
            self.waker.wake_at(at)
        except Exception:
            log.exception("scheduling a wake failed")
            return
        if at is not None:
            log.debug("wake scheduled at=%s for=%s", at.isoformat(), report.next_change)

    def _refresh_summary(self, now: datetime) -> None:
        store = self.watchdog.store
        try:
            instances = store.instance_count()
            pending = len(store.list_actions(OPEN_ACTION_STATUSES))
        except Exception:  # the status line is cosmetic: keep the previous numbers
            log.exception("status summary failed")
            return
        self.summary = FleetSummary(len(self.watchdog.providers), instances, pending, now)

    def act(self) -> ExecutorReport | None:
        """Verify and execute due actions from the outbox; then wake the delivery job (the
        action's message is in the outbox)."""

        def body(now: datetime) -> ExecutorReport:
            report = self.watchdog.act(now)
            self._observe(lambda: self.observer.on_executor(report, now))
            return report

        report = self._run(ACT, body)
        if report is not None and report.outcomes:
            self._wake(self.wake_deliver, DELIVER)
        self._act_at_next_verification()
        return report

    def _act_at_next_verification(self) -> None:
        """Verify a stop or destroy when its re-listing is due (``verify_interval``), not at the
        act job's next interval: the verification's listing ends the instance's billing in the
        ledger (executor.py)."""
        if self.act_at is None or self.stop.is_set():
            return
        try:
            called = self.watchdog.store.list_actions(statuses=VERIFYING)
            due = min((a.next_attempt_at for a in called if a.next_attempt_at), default=None)
            if due is not None:
                self.act_at(due)
        except Exception:  # the act job still runs on its own interval
            log.exception("scheduling the next verification failed")

    def deliver(self) -> DeliveryReport | None:
        """Deliver due notifications from the outbox."""

        def body(now: datetime) -> DeliveryReport | None:
            report = self.watchdog.deliver(now)
            self._observe(lambda: self.observer.on_delivery(report, now))
            return report

        return self._run(DELIVER, body)

    def digest(self) -> bool | None:
        """Enqueue the spend digest when a period fell due (digest.py), then wake delivery."""

        def body(now: datetime) -> bool:
            enqueued = self.watchdog.enqueue_digest(now)
            if enqueued:
                self._wake(self.wake_deliver, DELIVER)
            return enqueued

        return self._run(DIGEST, body)

    def prune(self) -> int | None:
        """Delete samples and snapshots older than the retention."""
        return self._run(PRUNE, self.watchdog.prune)
