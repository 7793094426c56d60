"""The daemon's life in-process: start the real scheduler over the real engine (simulated
providers in-process, real SQLite), supervise, stop, drain the job in flight, close.

The scheduler runs on real time with one-second intervals; the tests wait for conditions (with a
generous bound), never for durations.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from apscheduler.events import (
    EVENT_JOB_MAX_INSTANCES,
    EVENT_JOB_MISSED,
    JobSubmissionEvent,
)

from tests.support.scenario_texts import one_busy_instance
from watchdog_gpu.clock import SystemClock
from watchdog_gpu.config import Settings
from watchdog_gpu.daemon import Daemon
from watchdog_gpu.gc_freeze import CollectBetweenJobs
from watchdog_gpu.jobs import ACT, EVALUATE, NullObserver, poll_job_id
from watchdog_gpu.providers.base import BaseProvider
from watchdog_gpu.reports import ExecutorReport
from watchdog_gpu.sim.scenario import parse_scenario
from watchdog_gpu.sim.simulate import Simulation, simulation

ONE_ACCOUNT = one_busy_instance("lifecycle", tick="1s", instance_name="train")
WAIT_SECONDS = 60.0


class Datagrams:
    """A bound AF_UNIX datagram socket standing in for systemd; a thread collects datagrams."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.settimeout(0.2)
        self.environ = {"NOTIFY_SOCKET": str(path)}
        self.received: list[str] = []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._collect, daemon=True)
        self._thread.start()

    def _collect(self) -> None:
        while not self._done.is_set():
            try:
                self.received.extend(self.sock.recv(4096).decode().split("\n"))
            except TimeoutError:
                continue

    def close(self) -> None:
        self._done.set()
        self._thread.join(timeout=5)
        self.sock.close()


@pytest.fixture
def datagrams(tmp_path: Path) -> Iterator[Datagrams]:
    receiver = Datagrams(tmp_path / "notify.sock")
    yield receiver
    receiver.close()


@pytest.fixture
def sim() -> Iterator[Simulation]:
    with simulation(parse_scenario(ONE_ACCOUNT)) as running:
        yield running


def fast_settings(sim: Simulation) -> Settings:
    watchdog = sim.settings.watchdog.model_copy(
        update={"poll_interval": timedelta(seconds=1), "probe_interval": timedelta(seconds=1)}
    )
    return sim.settings.model_copy(update={"watchdog": watchdog})


def all_clients_closed(sim: Simulation) -> bool:
    providers = list(sim.assembly.providers.values())
    assert all(isinstance(provider, BaseProvider) for provider in providers)
    return all(
        provider.http.client.is_closed
        for provider in providers
        if isinstance(provider, BaseProvider)
    )


def wait_until(condition: Callable[[], bool], what: str) -> None:
    pause = threading.Event()
    for _ in range(int(WAIT_SECONDS / 0.05)):
        if condition():
            return
        pause.wait(0.05)
    pytest.fail(f"gave up waiting for {what}")


def test_the_daemon_polls_evaluates_acts_pings_and_stops_cleanly(
    sim: Simulation, datagrams: Datagrams, caplog: pytest.LogCaptureFixture
) -> None:
    environ = {**datagrams.environ, "WATCHDOG_USEC": "200000"}
    daemon = Daemon(fast_settings(sim), sim.assembly, SystemClock(), environ)
    progress = daemon.progress

    def stop_after_progress() -> None:
        wait_until(
            lambda: progress.stats(EVALUATE).successes >= 2 and progress.stats(ACT).successes >= 1,
            "two evaluations and an act",
        )
        wait_until(lambda: "WATCHDOG=1" in datagrams.received, "a watchdog ping")
        daemon.request_stop("SIGTERM")
        daemon.request_stop("SIGTERM")  # a second signal only logs

    helper = threading.Thread(target=stop_after_progress)
    daemon.start()
    helper.start()
    try:
        daemon.serve()
    finally:
        daemon.shutdown()
        helper.join(timeout=WAIT_SECONDS)

    assert not daemon.scheduler.running
    assert progress.stats(poll_job_id("vast-main")).successes >= 1
    assert [r.snapshot.instance_id for r in sim.store.latest_instances()] == ["9001"]
    assert "STOPPING=1" in datagrams.received
    assert any(line.startswith("STATUS=1 account, 1 instance") for line in datagrams.received)
    assert "already stopping" in caplog.text
    assert all_clients_closed(sim)


def test_shutdown_waits_for_the_action_in_flight(
    sim: Simulation, datagrams: Datagrams, monkeypatch: pytest.MonkeyPatch
) -> None:
    watchdog = sim.assembly.watchdog
    in_flight = threading.Event()
    release = threading.Event()
    finished: list[datetime] = []

    def slow_act(now: datetime) -> ExecutorReport:
        in_flight.set()
        release.wait(WAIT_SECONDS)  # a provider call that takes its time
        finished.append(now)
        return ExecutorReport()

    monkeypatch.setattr(watchdog, "act", slow_act)
    daemon = Daemon(fast_settings(sim), sim.assembly, SystemClock(), datagrams.environ)
    daemon.start()
    assert in_flight.wait(WAIT_SECONDS)

    stopper = threading.Thread(target=daemon.shutdown)
    stopper.start()
    stopper.join(timeout=0.5)
    still_draining = stopper.is_alive()
    release.set()
    stopper.join(timeout=WAIT_SECONDS)

    assert still_draining
    assert not stopper.is_alive()
    assert len(finished) == 1  # the action finished; no new one started after the stop
    assert daemon.progress.stats(ACT).successes == 1
    assert "STOPPING=1" in datagrams.received


def test_missed_and_skipped_runs_are_counted_logged_and_reported(
    sim: Simulation, caplog: pytest.LogCaptureFixture
) -> None:
    events: list[tuple[str, str]] = []

    class Observer(NullObserver):
        def on_job_event(self, job_id: str, event: str) -> None:
            events.append((job_id, event))

    daemon = Daemon(fast_settings(sim), sim.assembly, SystemClock(), {}, observer=Observer())
    when = sim.clock.now()

    daemon._on_scheduler_event(JobSubmissionEvent(EVENT_JOB_MISSED, "probe", "default", [when]))
    daemon._on_scheduler_event(JobSubmissionEvent(EVENT_JOB_MAX_INSTANCES, ACT, "default", [when]))

    assert daemon.progress.stats("probe").missed == 1
    assert daemon.progress.stats(ACT).skipped == 1
    assert events == [("probe", "missed"), (ACT, "skipped")]
    assert "job run missed" in caplog.text
    assert "previous run is still going job=act" in caplog.text
    daemon.shutdown()


def test_a_daemon_stopped_before_it_started_closes_everything(sim: Simulation) -> None:
    daemon = Daemon(fast_settings(sim), sim.assembly, SystemClock(), {})

    daemon.request_stop("SIGTERM")
    daemon.serve()  # returns at once: the stop event is set
    daemon.shutdown()

    assert not daemon.scheduler.running
    assert all_clients_closed(sim)


def test_the_cyclic_collector_runs_between_the_daemons_jobs(sim: Simulation) -> None:
    # gc_freeze.CollectBetweenJobs: a pass after the jobs (paced; here after every one).
    collector = CollectBetweenJobs(SystemClock().monotonic, min_interval=0.0)
    daemon = Daemon(fast_settings(sim), sim.assembly, SystemClock(), {}, collector=collector)
    progress = daemon.progress

    def stop_after_evaluations() -> None:
        wait_until(lambda: progress.stats(EVALUATE).successes >= 2, "two evaluations")
        daemon.request_stop("SIGTERM")

    helper = threading.Thread(target=stop_after_evaluations)
    with collector.active():
        daemon.start()
        helper.start()
        try:
            daemon.serve()
        finally:
            daemon.shutdown()
            helper.join(timeout=WAIT_SECONDS)

    assert collector.passes >= 2
