"""Scenario: SIGTERM while a provider is down (shutdown_during_outage.toml).

A real ``watchdog-gpu run`` subprocess polls a ``watchdog-gpu sim serve`` subprocess whose Vast
API answers HTTP 500 to everything, with a 10-minute retry budget per call. Before the fix the
stop waited for the poll's retries (up to the budget; 165 s were seen, past systemd's 90 s stop
timeout). Now the stop cancels the retry wait: the daemon exits 0 well before the budget could
have run out, the poll is recorded as failed (nothing half-written), and nothing is lost — the
in-process test below shows a destroy cut short the same way goes back to pending and is carried
out after the restart.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from tests.integration.test_daemon_run import (
    NotifySocket,
    child_environment,
    sim_serve,
    wait_until,
    write_config,
)
from tests.scenarios.helpers import SCENARIOS
from tests.support.http_receiver import free_port
from tests.support.sim_world import ServedWorld, served_world
from watchdog_gpu.executor import Executor
from watchdog_gpu.model import (
    AccountObservation,
    AccountSnapshot,
    ActionKind,
    ActionStatus,
    InstanceSnapshot,
    InstanceState,
    PlannedAction,
)
from watchdog_gpu.providers import PROVIDERS, BaseProvider, new_http_client
from watchdog_gpu.providers.http import stoppable_sleep
from watchdog_gpu.safety import SafetyConfig
from watchdog_gpu.store import Store, create_engine_for, sqlite_url

SCENARIO = SCENARIOS / "shutdown_during_outage.toml"
API_KEY = "sim-vast-main"
RETRY_BUDGET = "10m"
# Far less than the retry budget: a daemon still inside its retries would not have exited.
EXIT_BOUND_SECONDS = 60.0


def write_outage_config(tmp_path: Path, vast_url: str) -> Path:
    """Enforce mode, no probes, metrics on a free port, a long retry budget per call."""
    return write_config(
        tmp_path,
        vast_url,
        free_port(),
        watchdog='mode = "enforce"\n',
        account=f'retry_budget = "{RETRY_BUDGET}"\n',
    )


class StderrLines:
    """Collects a child's stderr lines on a thread (so the test can wait for one)."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        self._lock = threading.Lock()
        assert process.stderr is not None
        self._stream = process.stderr
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        for line in self._stream:
            with self._lock:
                self.lines.append(line)

    def seen(self, text: str) -> bool:
        with self._lock:
            return any(text in line for line in self.lines)

    def text(self) -> str:
        """Everything the child wrote (call once it exited); closes the pipe."""
        self._thread.join(timeout=10)
        self._stream.close()
        with self._lock:
            return "".join(self.lines)


@pytest.mark.slow
def test_sigterm_during_a_provider_outage_stops_at_once_and_loses_nothing(
    tmp_path: Path,
) -> None:
    notify = NotifySocket(tmp_path / "notify.sock")
    with sim_serve(tmp_path, SCENARIO) as urls:
        config = write_outage_config(tmp_path, urls["vast"])
        environ = child_environment(
            tmp_path, NOTIFY_SOCKET=str(notify.path), WD_TEST_VAST_KEY=API_KEY
        )
        daemon = subprocess.Popen(
            [sys.executable, "-m", "watchdog_gpu", "run", "--config", str(config)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=environ,
        )
        stderr = StderrLines(daemon)
        try:
            wait_until(lambda: notify.seen("READY=1"), "READY=1", daemon)
            wait_until(lambda: stderr.seen("provider call retried"), "a retried poll", daemon)
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(timeout=EXIT_BOUND_SECONDS)
        finally:
            if daemon.poll() is None:
                daemon.kill()
                daemon.wait(timeout=10)
            notify.close()
    log = stderr.text()
    assert daemon.returncode == 0, log
    assert "retry cancelled: watchdog-gpu is stopping" in log
    assert "msg=stopped" in log
    assert "Traceback" not in log
    assert API_KEY not in log
    engine = create_engine_for(sqlite_url(tmp_path / "state" / "watchdog-gpu.db"))
    try:
        (account,) = Store(engine).latest_accounts()
    finally:
        engine.dispose()
    assert account.view.last_poll_error_kind == "transient"


def served_adapter(served: ServedWorld, stop: threading.Event) -> BaseProvider:
    """Our Vast adapter on the served world, its retry waits stoppable by ``stop`` (as the
    daemon's wiring builds it), with a long retry budget."""
    clock = served.clock
    return PROVIDERS["vast"](
        "vast-main",
        new_http_client(served.url("vast")),
        API_KEY,
        sleep=stoppable_sleep(clock.sleep, stop),
        monotonic=clock.monotonic,
        retry_budget_seconds=600,
    )


def running_snapshot(now: datetime) -> InstanceSnapshot:
    return InstanceSnapshot(
        provider="vast",
        account="vast-main",
        instance_id="9001",
        name="training",
        state=InstanceState.RUNNING,
        raw_state="running",
        observed_at=now,
        compute_usd_per_hour=1.2,
        storage_usd_per_hour=0.0,
    )


def test_a_destroy_whose_retries_a_stop_cancels_is_carried_out_after_the_restart(
    store: Store,
) -> None:
    with served_world(SCENARIO) as served:
        now = served.clock.now()
        store.record_observation(
            AccountObservation(AccountSnapshot("vast", "vast-main", now), (running_snapshot(now),)),
            now,
        )
        key = "budget:vast-main/9001:2026-03-02T20:00:00+00:00:destroy"
        action = PlannedAction(
            key,
            "vast-main",
            "9001",
            "budget",
            ActionKind.DESTROY,
            False,
            "budget",
            now,
            key.removesuffix(":destroy"),
        )
        assert store.enqueue_action(action)
        stop = threading.Event()
        stop.set()  # the daemon is stopping while the provider answers 500
        Executor(store, {"vast-main": served_adapter(served, stop)}, SafetyConfig()).run(now)
        row = store.get_action(key)
        assert row is not None
        assert row.status == ActionStatus.PENDING  # not failed: it is resumed after a restart
        assert row.last_error is not None
        assert "retry cancelled" in row.last_error
        view = served.world.instance("vast-main", "9001")
        assert view is not None
        assert view.state == "running"

        served.world.set_api_mode("vast-main", "ok")  # after the restart the API works again
        restarted = Executor(
            store, {"vast-main": served_adapter(served, threading.Event())}, SafetyConfig()
        )
        for minutes in (10, 12, 14):
            served.clock.set(now + timedelta(minutes=minutes))
            restarted.run(now + timedelta(minutes=minutes))
        row = store.get_action(key)
        assert row is not None
        assert row.status == ActionStatus.VERIFIED
        gone = served.world.instance("vast-main", "9001")
        assert gone is None or gone.state == "gone"
