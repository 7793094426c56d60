"""The daemon (``watchdog-gpu run``): scheduled jobs, a supervising main thread, sd_notify.

The caller has validated the configuration; here the engine is assembled, the metrics endpoint
started, the jobs scheduled (:mod:`watchdog_gpu.schedule`) and systemd told ``READY=1``; the main
thread then supervises (:mod:`watchdog_gpu.supervisor`). Shutdown lets the job in flight finish
and never interrupts a provider call: ``docs/architecture.md``, "Shutdown".
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from datetime import datetime, timedelta
from types import FrameType
from typing import Any

from apscheduler.events import (
    EVENT_JOB_ERROR,
    EVENT_JOB_EXECUTED,
    EVENT_JOB_MAX_INSTANCES,
    EVENT_JOB_MISSED,
)
from apscheduler.jobstores.base import JobLookupError

from watchdog_gpu import systemd_notify
from watchdog_gpu.clock import Clock
from watchdog_gpu.config import Settings
from watchdog_gpu.daemon_lock import hold_database_lock, stand_by_until_leading, watch_leadership
from watchdog_gpu.daemon_metrics import (
    MetricsAddressError,
    MetricsObserver,
    start_metrics_or_explain,
)
from watchdog_gpu.errors import ConfigError, DatabaseInUseError, SchemaTooNewError, StoreError
from watchdog_gpu.gc_freeze import CollectBetweenJobs, long_lived_frozen
from watchdog_gpu.heap_release import HeapRelease
from watchdog_gpu.heartbeat import DeadMansSwitch, dead_mans_switch_from_settings
from watchdog_gpu.jobs import ACT, DELIVER, EVALUATE, WAKE, DaemonObserver, Jobs, Progress
from watchdog_gpu.schedule import add_jobs, build_scheduler, job_specs
from watchdog_gpu.store.leadership import PostgresLeadership
from watchdog_gpu.store.lock import database_lock
from watchdog_gpu.supervisor import Supervisor, plural, stall_limits, supervisor_interval
from watchdog_gpu.wake import Wakes
from watchdog_gpu.wiring import Assembly, assemble_daemon

log = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
# Internal: _serve's result when the leadership was lost (run_daemon stands by again).
LEADERSHIP_LOST = -1
REJOIN_DELAY_SECONDS = 3.0

SHUTDOWN_CHECK_SECONDS = 10.0
MAX_SHUTDOWN_EXTENSION = timedelta(minutes=15)


class Daemon:
    """The scheduler, the jobs and the supervisor over one assembled engine.

    ``start()`` schedules and starts the jobs, ``serve()`` supervises until :attr:`stop` is
    set, ``shutdown()`` drains and closes. ``run_daemon`` wires it to signals and sd_notify.
    ``clock`` is the engine's time (what the rules see). APScheduler runs on the wall clock:
    first runs and wake-ups are instants from ``wall_clock`` (default ``clock``, which must then
    follow real time, a :class:`~watchdog_gpu.clock.SystemClock`). ``time_scale`` is how many
    seconds of ``clock`` pass per wall-clock second: 1 for ``watchdog-gpu run``; the speed of an
    :class:`~watchdog_gpu.sim.clock.AcceleratedClock` for ``watchdog-gpu demo``, whose
    configured intervals stay in the clock's time and are waited for ``time_scale`` times
    faster. Runs on a virtual clock that jumps call the :class:`~watchdog_gpu.jobs.Jobs`
    functions directly.
    """

    def __init__(
        self,
        settings: Settings,
        assembly: Assembly,
        clock: Clock,
        environ: Mapping[str, str],
        *,
        observer: DaemonObserver | None = None,
        dead_mans_switch: DeadMansSwitch | None = None,
        on_close: Callable[[], None] | None = None,
        time_scale: float = 1.0,
        wall_clock: Clock | None = None,
        heap_release: HeapRelease | None = None,
        collector: CollectBetweenJobs | None = None,
    ) -> None:
        if not time_scale > 0:
            raise ValueError("time_scale must be greater than 0")
        if time_scale != 1.0 and wall_clock is None:
            raise ValueError("a time_scale other than 1 needs the wall clock for the scheduler")
        self.settings = settings
        self.assembly = assembly
        self.clock = clock
        self.wall_clock = wall_clock or clock
        self.time_scale = time_scale
        self.environ = environ
        self.dead_mans_switch = dead_mans_switch
        self.on_close = on_close
        # The assembly's event: setting it also cancels the retry waits of provider calls in
        # flight, so a stop during an outage does not wait out their retry budgets.
        self.stop = assembly.stop
        self.progress = Progress(clock)
        self.scheduled_from: float | None = None  # see start()
        self._woken: dict[str, datetime] = {}  # job → the run time its last wake-up asked for
        self.observer = observer
        # Freed heap back to the OS after the jobs (heap_release.py: why), paced in real time.
        self.heap_release = heap_release or HeapRelease.from_libc(self.wall_clock.monotonic)
        # The cyclic collector's full passes between the jobs (gc_freeze.py: why), real time.
        self.collector = collector or CollectBetweenJobs(self.wall_clock.monotonic)
        self.scheduler = build_scheduler(len(assembly.providers))
        self.jobs = Jobs(
            assembly.watchdog,
            clock,
            self.progress,
            poll_interval=settings.watchdog.poll_interval,
            observer=observer,
            dead_mans_switch=dead_mans_switch,
            stop=self.stop,
            wake_act=self.wake_act,
            wake_deliver=self.wake_deliver,
            wakes=wakes_for(settings, assembly),
            waker=self,
            act_at=self.act_at,
            job_scope=assembly.job_scope,
        )
        self.supervisor = Supervisor(
            self.progress,
            list(assembly.providers),
            stall_limits(settings, time_scale=time_scale),
            lambda: self.jobs.summary,
            environ,
        )

    def start(self) -> None:
        """Schedule every job (first runs from now) and start the scheduler threads."""
        self.scheduler.add_listener(
            self._on_scheduler_event, EVENT_JOB_ERROR | EVENT_JOB_MISSED | EVENT_JOB_MAX_INSTANCES
        )
        # After a failed job too: an outage that fails every job must not stop the passes.
        self.scheduler.add_listener(self._after_job, EVENT_JOB_EXECUTED | EVENT_JOB_ERROR)
        # The wall clock's instant the schedule counts from, read just before it (an accelerated
        # night begins here: each job then runs at or just after its own instant of the night).
        self.scheduled_from = self.wall_clock.monotonic()
        specs = job_specs(
            self.jobs, self.settings, self.wall_clock.now(), time_scale=self.time_scale
        )
        add_jobs(self.scheduler, specs)
        self.scheduler.start()

    def _after_job(self, _event: Any) -> None:
        # What the job left behind collected (gc_freeze.py), then the freed heap back to the
        # OS (heap_release.py); each paces itself.
        self.collector.after_job()
        self.heap_release.after_job()

    def wake_act(self) -> None:
        """Run the act job now (after an evaluation), unless it is running already."""
        self._wake(ACT)

    def act_at(self, at: datetime) -> None:
        """Run the act job at ``at`` (the engine's time) when its interval would run it later;
        it then goes on on its interval."""
        job = self.scheduler.get_job(ACT) if self.scheduler.running else None
        if job is None or self.stop.is_set():
            return
        delay = max(at - self.clock.now(), timedelta(0)) / self.time_scale
        moment = self.wall_clock.now() + delay
        scheduled: datetime | None = getattr(job, "next_run_time", None)
        if scheduled is None or moment < scheduled:
            self._woken[ACT] = moment  # met by a running act job: it joins it (see _wake)
            self.scheduler.modify_job(ACT, next_run_time=moment)

    def wake_deliver(self) -> None:
        """Run the delivery job now (after an evaluation or an act pass that may have enqueued
        messages), unless it is running already."""
        self._wake(DELIVER)

    def next_evaluation(self) -> datetime | None:
        """When the evaluate job runs next, in the engine's time (None: not scheduled)."""
        job = self.scheduler.get_job(EVALUATE) if self.scheduler.running else None
        run_at: datetime | None = getattr(job, "next_run_time", None)
        if run_at is None:
            return None
        return self.clock.now() + (run_at - self.wall_clock.now()) * self.time_scale

    def wake_at(self, at: datetime | None) -> None:
        """Run :meth:`Jobs.wake` once at ``at`` (the engine's time), replacing the pending
        wake; ``None`` cancels it (``wake.py``). In the default pool: one evaluation at a time."""
        if at is None:
            with suppress(JobLookupError):  # none pending, or it just started running
                self.scheduler.remove_job(WAKE)
            return
        if not self.scheduler.running or self.stop.is_set():
            return
        delay = max(at - self.clock.now(), timedelta(0)) / self.time_scale
        self.scheduler.add_job(
            self.jobs.wake,
            "date",
            run_date=self.wall_clock.now() + delay,
            id=WAKE,
            name=WAKE,
            executor="default",
            replace_existing=True,
            max_instances=1,
            # A wake made late (a suspended laptop, a busy pool) still runs once: it only
            # evaluates earlier than the next tick would.
            misfire_grace_time=max(1, round(self.settings.watchdog.poll_interval.total_seconds())),
        )

    def _wake(self, job_id: str) -> None:
        if self.progress.stats(job_id).running_since_monotonic is not None:
            return
        if self.scheduler.running:
            moment = self.wall_clock.now()
            self._woken[job_id] = moment
            self.scheduler.modify_job(job_id, next_run_time=moment)

    def _wake_met_a_running_job(self, job_id: str, event: Any) -> bool:
        """The scheduler dropped the run a wake asked for because the job was still running:
        what "run now, unless it is running already" means, not a late job. (The progress
        check in :meth:`_wake` cannot close the gap between the pool taking the job and its
        body starting; on the demo's accelerated clock that gap is hit often.)"""
        woken = self._woken.get(job_id)
        return woken is not None and woken in getattr(event, "scheduled_run_times", ())

    def _on_scheduler_event(self, event: Any) -> None:
        job_id = str(event.job_id)
        if event.code == EVENT_JOB_MISSED:
            kind = "missed"
            self.progress.missed(job_id)
            log.warning("job run missed (too late to run) job=%s", job_id)
        elif event.code == EVENT_JOB_MAX_INSTANCES and (
            job_id == WAKE or self._wake_met_a_running_job(job_id, event)
        ):
            log.debug("wake-up joined the running job job=%s", job_id)
            return
        elif event.code == EVENT_JOB_MAX_INSTANCES:
            kind = "skipped"
            self.progress.skipped(job_id)
            log.warning("job run skipped: the previous run is still going job=%s", job_id)
        else:  # the jobs catch everything: this is a bug in the boundary itself
            kind = "error"
            log.error("job raised job=%s error=%s", job_id, type(event.exception).__name__)
        if self.observer is not None:
            try:
                self.observer.on_job_event(job_id, kind)
            except Exception:
                log.exception("observer failed")

    def serve(self) -> None:
        """Supervise on the calling thread until :attr:`stop` is set."""
        poll = self.settings.watchdog.poll_interval / self.time_scale
        interval = supervisor_interval(self.environ, poll)
        self.supervisor.run(self.stop, interval)

    def request_stop(self, reason: str) -> None:
        if self.stop.is_set():
            log.warning(
                "already stopping; waiting for the job in flight to finish (SIGKILL aborts it) "
                "signal=%s",
                reason,
            )
            return
        log.info("stopping reason=%s", reason)
        self.stop.set()

    def shutdown(self) -> None:
        """Stop scheduling, let running jobs finish, close every client and the database."""
        self.stop.set()
        systemd_notify.stopping("stopping: waiting for running jobs", environ=self.environ)
        if self.scheduler.running:
            self._drain()
        self._close()
        log.info("stopped")

    def _drain(self) -> None:
        drain = threading.Thread(
            target=self.scheduler.shutdown, kwargs={"wait": True}, name="scheduler-shutdown"
        )
        drain.start()
        extended = timedelta(0)
        while True:
            drain.join(SHUTDOWN_CHECK_SECONDS)
            if not drain.is_alive():
                return
            running = sorted(
                job
                for job, stats in self.progress.snapshot().items()
                if stats.running_since_monotonic is not None
            )
            log.info("waiting for running jobs to finish jobs=%s", ",".join(running) or "-")
            if extended < MAX_SHUTDOWN_EXTENSION:
                step = timedelta(seconds=3 * SHUTDOWN_CHECK_SECONDS)
                systemd_notify.extend_timeout(step.total_seconds(), environ=self.environ)
                extended += timedelta(seconds=SHUTDOWN_CHECK_SECONDS)

    def _close(self) -> None:
        closers: list[tuple[str, Callable[[], None]]] = [("engine", self.assembly.close)]
        if self.dead_mans_switch is not None:
            closers.append(("dead-man's switch", self.dead_mans_switch.close))
        if self.on_close is not None:
            closers.append(("metrics", self.on_close))
        closers.append(("database", self.assembly.store.engine.dispose))
        for what, close in closers:
            try:
                close()
            except Exception:
                log.exception("closing failed what=%s", what)


def wakes_for(settings: Settings, assembly: Assembly) -> Wakes | None:
    """Wakes between ticks (``wake.py``) when the GPUs are streamed: their rows come in
    batches. Not with burst probes: a wake would cost an SSH round to every host."""
    if assembly.prober is None or settings.probe.mode != "stream":
        return None
    return Wakes()


@contextmanager
def stop_on_signals(daemon_stop: Callable[[str], None]) -> Iterator[None]:
    """Route SIGTERM and SIGINT to ``daemon_stop(name)`` (main thread only) while inside."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        daemon_stop(signal.Signals(signum).name)

    previous = {
        number: signal.signal(number, handler) for number in (signal.SIGTERM, signal.SIGINT)
    }
    try:
        yield
    finally:
        for number, old in previous.items():
            signal.signal(number, old)


def run_daemon(
    settings: Settings,
    clock: Clock,
    environ: Mapping[str, str],
    *,
    build: Callable[[Settings, Clock, Mapping[str, str]], Assembly] = assemble_daemon,
    time_scale: float = 1.0,
    wall_clock: Clock | None = None,
    on_started: Callable[[Daemon], None] | None = None,
) -> int:
    """Run until SIGTERM/SIGINT. Given valid settings (secrets checked), the clock and the
    environment. Returns 0 after a clean stop; 2 for a configuration problem found while
    building (e.g. an unusable SSH key or notification URL; listed on stderr), when another
    daemon holds the database's lock, a newer watchdog-gpu wrote the database or the metrics
    address cannot be bound (the port is taken); 1 when the database cannot be opened or
    migrated.

    ``time_scale`` and ``wall_clock``: see :class:`Daemon` (the demo's accelerated night).
    ``on_started(daemon)`` is called once the jobs run, before the main thread supervises; it
    may keep the daemon to stop it later (``daemon.request_stop(reason)``)."""
    quiet_scheduler_logs()
    database_url = settings.watchdog.effective_database_url(environ)
    # One handler for the whole life of `run` (standing by, starting, running): a SIGTERM that
    # comes as a standby takes over is never lost between the two.
    stops = StopRequests()
    with stop_on_signals(stops.request):
        while True:
            leadership: PostgresLeadership | None = None
            try:
                lock = database_lock(database_url, role="run", node=settings.watchdog.node_name)
                if isinstance(lock, PostgresLeadership):
                    leadership = lock
                    if not stand_by_until_leading(
                        leadership,
                        environ,
                        stops.event,
                        metrics=settings.metrics,
                        lease_seconds=settings.watchdog.leader_lease.total_seconds(),
                    ):
                        return EXIT_OK  # stopped while standing by
                else:
                    lock = hold_database_lock(database_url)
            except (DatabaseInUseError, MetricsAddressError) as error:
                if leadership is not None:
                    leadership.release()
                print(f"cannot start: {error}", file=sys.stderr)
                return EXIT_USAGE
            except StoreError as error:
                log.error("cannot start: %s", error)
                return EXIT_FAILURE
            try:
                code = _run_locked(
                    settings,
                    clock,
                    environ,
                    stops,
                    build=build,
                    time_scale=time_scale,
                    wall_clock=wall_clock,
                    on_started=on_started,
                    leadership=leadership,
                )
            finally:
                lock.release()
            if code != LEADERSHIP_LOST:
                return code
            # A node that lost the lead (a database outage, a cut connection, a lease expired
            # while it was frozen) stands by again in this process: exiting would meet
            # systemd's start limit after a few outages and leave the team a node short.
            log.warning(
                "leadership lost: standing by again node=%s", leadership and leadership.node
            )
            stops.detach()
            # Give a live standby (it retries every second) the first chance to lead.
            if stops.event.wait(REJOIN_DELAY_SECONDS):
                return EXIT_OK


class StopRequests:
    """SIGTERM/SIGINT as they come (see :func:`stop_on_signals`): ``event`` is set by the first,
    and each is passed on to the daemon once there is one (those that came before it was built
    are passed on when it is attached)."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.reasons: list[str] = []
        self._daemon: Daemon | None = None

    def request(self, reason: str) -> None:
        self.event.set()
        if self._daemon is None:
            self.reasons.append(reason)
        else:
            self._daemon.request_stop(reason)

    def attach(self, daemon: Daemon) -> None:
        self._daemon = daemon
        for reason in self.reasons:
            daemon.request_stop(reason)

    def detach(self) -> None:
        """The daemon stopped (its leadership was lost): signals wait for the next one."""
        self._daemon = None


def _run_locked(
    settings: Settings,
    clock: Clock,
    environ: Mapping[str, str],
    stops: StopRequests,
    *,
    build: Callable[[Settings, Clock, Mapping[str, str]], Assembly],
    time_scale: float,
    wall_clock: Clock | None,
    on_started: Callable[[Daemon], None] | None,
    leadership: PostgresLeadership | None = None,
) -> int:
    lost: list[str] = []
    daemon_or_code = _start(
        settings, clock, environ, build, time_scale=time_scale, wall_clock=wall_clock
    )
    if isinstance(daemon_or_code, int):
        return daemon_or_code
    daemon = daemon_or_code
    stops.attach(daemon)  # a signal during start-up stops it right away
    if leadership is not None:
        daemon.assembly.store.fence = leadership.fence
        daemon.assembly.fence_provider_calls()
        # Each check renews the lease a standby watches: at least four times a lease.
        check_every = min(
            5.0,
            settings.watchdog.leader_lease.total_seconds() / 4,
            settings.watchdog.poll_interval.total_seconds() / time_scale / 2,
        )
        threading.Thread(
            target=watch_leadership,
            args=(leadership, daemon.stop, daemon.request_stop, lost, max(check_every, 0.2)),
            name="leadership",
            daemon=True,
        ).start()
    # Start-up is done (configuration, wiring, the migrated database, metrics): what it built
    # lives until shutdown, and leaves the garbage collector's full passes; what the jobs
    # build is collected between them (gc_freeze.py).
    with long_lived_frozen(), daemon.collector.active():
        return _serve(daemon, settings, environ, lost, on_started)


def _serve(
    daemon: Daemon,
    settings: Settings,
    environ: Mapping[str, str],
    lost: list[str],
    on_started: Callable[[Daemon], None] | None,
) -> int:
    try:
        daemon.start()
        accounts = len(daemon.assembly.providers)
        log.info(
            "started accounts=%d mode=%s poll_interval=%ss probe=%s metrics=%s",
            accounts,
            settings.watchdog.mode,
            int(settings.watchdog.poll_interval.total_seconds()),
            "enabled" if daemon.assembly.prober is not None else "disabled",
            "enabled" if daemon.observer is not None else "disabled",
        )
        systemd_notify.ready(
            f"started: {plural(accounts, 'account')}, mode {settings.watchdog.mode}",
            environ=environ,
        )
        if on_started is not None:
            on_started(daemon)
        daemon.serve()
    finally:
        daemon.shutdown()
    return LEADERSHIP_LOST if lost else EXIT_OK


def _start(
    settings: Settings,
    clock: Clock,
    environ: Mapping[str, str],
    build: Callable[[Settings, Clock, Mapping[str, str]], Assembly],
    *,
    time_scale: float = 1.0,
    wall_clock: Clock | None = None,
) -> Daemon | int:
    """Build everything the daemon needs, or the exit code when that fails (after closing what
    was already built)."""
    opened: list[Callable[[], None]] = []
    try:
        dead_mans_switch = dead_mans_switch_from_settings(settings, environ)
        if dead_mans_switch is not None:
            opened.append(dead_mans_switch.close)
        assembly = build(settings, clock, environ)
        opened.append(assembly.close)
        opened.append(assembly.store.engine.dispose)
        observer: MetricsObserver | None = None
        stop_endpoint: Callable[[], None] | None = None
        if settings.metrics.enabled:
            observer, stop_endpoint = start_metrics_or_explain(settings, assembly, clock)
    except MetricsAddressError as error:
        _close_all(opened)
        # A taken port stays taken across restarts: exit 2 (RestartPreventExitStatus=2).
        print(f"cannot start: {error}", file=sys.stderr)
        return EXIT_USAGE
    except ConfigError as error:
        _close_all(opened)
        print_config_problems(error)
        return EXIT_USAGE
    except (SchemaTooNewError, DatabaseInUseError) as error:
        _close_all(opened)
        # Restarting cannot help (systemd: RestartPreventExitStatus=2): say it where the
        # operator looks, the terminal or the journal.
        print(f"cannot start: {error}", file=sys.stderr)
        return EXIT_USAGE
    except (StoreError, OSError) as error:
        _close_all(opened)
        # The reason only: a traceback adds nothing the message does not say.
        log.error("cannot start: %s", error)
        return EXIT_FAILURE
    return Daemon(
        settings,
        assembly,
        clock,
        environ,
        observer=observer,
        dead_mans_switch=dead_mans_switch,
        on_close=stop_endpoint,
        time_scale=time_scale,
        wall_clock=wall_clock,
    )


def _close_all(closers: list[Callable[[], None]]) -> None:
    for close in reversed(closers):
        try:
            close()
        except Exception:
            log.exception("closing failed during a failed start")


def quiet_scheduler_logs() -> None:
    """APScheduler logs every run at INFO and its misses at WARNING; the daemon's listener logs
    what matters (missed and skipped runs) in its own words, so only its errors pass."""
    logging.getLogger("apscheduler").setLevel(logging.ERROR)


def print_config_problems(error: ConfigError) -> None:
    count = len(error.problems)
    print(f"invalid configuration ({count} problem{'s' if count != 1 else ''}):", file=sys.stderr)
    for problem in error.problems:
        print(f"  {problem}", file=sys.stderr)
