"""``watchdog-gpu run`` as a real subprocess against ``watchdog-gpu sim serve`` (another
subprocess) on loopback: READY=1 and WATCHDOG=1 on a real NOTIFY_SOCKET, rows in the SQLite
database, a dead-man's switch ping, a metrics scrape, and a clean exit 0 on SIGTERM or SIGINT.

The test waits for conditions with generous bounds; it asserts no durations.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import logfmt
import pytest

from tests.support.http_receiver import HttpReceiver, free_port
from tests.support.sim_world import SCENARIOS
from watchdog_gpu.store import Store, create_engine_for, sqlite_url

pytestmark = pytest.mark.slow

WAIT_SECONDS = 60.0
API_KEY = "sim-vast-main"  # the simulator's key for account vast-main


class NotifySocket:
    """A bound AF_UNIX datagram socket standing in for systemd; a thread collects fields."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.settimeout(0.2)
        self.fields: list[str] = []
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._collect, daemon=True)
        self._thread.start()

    def _collect(self) -> None:
        while not self._done.is_set():
            try:
                datagram = self.sock.recv(4096).decode()
            except TimeoutError:
                continue
            with self._lock:
                self.fields.extend(datagram.split("\n"))

    def seen(self, field: str) -> bool:
        with self._lock:
            return field in self.fields

    def seen_prefix(self, prefix: str) -> bool:
        with self._lock:
            return any(field.startswith(prefix) for field in self.fields)

    def close(self) -> None:
        self._done.set()
        self._thread.join(timeout=5)
        self.sock.close()


def wait_until(condition: Callable[[], bool], what: str, process: subprocess.Popen[str]) -> None:
    pause = threading.Event()
    for _ in range(int(WAIT_SECONDS / 0.1)):
        if condition():
            return
        if process.poll() is not None:
            pytest.fail(f"the daemon exited ({process.returncode}) before {what}")
        pause.wait(0.1)
    pytest.fail(f"gave up waiting for {what}")


def child_environment(tmp_path: Path, **extra: str) -> dict[str, str]:
    environ = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("WATCHDOG_GPU_")
        and name not in {"NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "CREDENTIALS_DIRECTORY"}
    }
    environ["HOME"] = str(tmp_path / "home")
    environ.update(extra)
    return environ


@contextmanager
def sim_serve(
    tmp_path: Path, scenario: Path = SCENARIOS / "forgotten_4090.toml"
) -> Iterator[dict[str, str]]:
    """``watchdog-gpu sim serve`` of ``scenario`` at 60x speed; yields its URLs by provider."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "watchdog_gpu",
            "sim",
            "serve",
            "--scenario",
            str(scenario),
            "--speed",
            "60",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=child_environment(tmp_path),
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line, "sim serve printed no URLs"
        yield json.loads(line)
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()


DEAD_MANS_SWITCH = 'dead_mans_switch_url = { env = "WD_TEST_PING_URL" }\n'
NO_PROBE = "[probe]\nenabled = false\n"


def write_config(
    tmp_path: Path,
    vast_url: str,
    metrics_port: int,
    *,
    watchdog: str = DEAD_MANS_SWITCH,
    sections: str = NO_PROBE,
    account: str = "",
) -> Path:
    """A config polling the simulator's vast-main every 2 s (key in ``$WD_TEST_VAST_KEY``) with
    metrics on ``metrics_port``; ``watchdog`` lines go to ``[watchdog]``, ``sections`` before the
    account, ``account`` after it (e.g. its ``[accounts.ssh]``)."""
    config = tmp_path / "config.toml"
    config.write_text(
        f"""
[watchdog]
poll_interval = "2s"
probe_interval = "2s"
database_url = "{sqlite_url(tmp_path / "state" / "watchdog-gpu.db")}"
{watchdog}
[metrics]
listen_address = "127.0.0.1"
port = {metrics_port}

{sections}
[[accounts]]
name = "vast-main"
provider = "vast"
api_key = {{ env = "WD_TEST_VAST_KEY" }}
api_url = "{vast_url}"
{account}""",
        encoding="utf-8",
    )
    return config


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT])
def test_the_daemon_runs_against_the_simulator_and_stops_cleanly_on_a_signal(
    tmp_path: Path, stop_signal: signal.Signals
) -> None:
    notify = NotifySocket(tmp_path / "notify.sock")
    metrics_port = free_port()
    with sim_serve(tmp_path) as urls, HttpReceiver() as receiver:
        ping_path = "/ping/5f3c1d2e-token"
        config = write_config(tmp_path, urls["vast"], metrics_port)
        environ = child_environment(
            tmp_path,
            NOTIFY_SOCKET=str(notify.path),
            WATCHDOG_USEC="1000000",
            WD_TEST_VAST_KEY=API_KEY,
            WD_TEST_PING_URL=f"http://127.0.0.1:{receiver.port}{ping_path}",
        )
        daemon = subprocess.Popen(
            [sys.executable, "-m", "watchdog_gpu", "run", "--config", str(config)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=environ,
        )
        engine = create_engine_for(sqlite_url(tmp_path / "state" / "watchdog-gpu.db"))
        try:
            wait_until(lambda: notify.seen("READY=1"), "READY=1", daemon)
            store = Store(engine)
            wait_until(lambda: bool(store.latest_instances()), "instances in the database", daemon)
            wait_until(lambda: notify.seen("WATCHDOG=1"), "a watchdog ping", daemon)
            wait_until(lambda: bool(receiver.received(ping_path)), "a dead-man's ping", daemon)
            wait_until(
                lambda: notify.seen_prefix("STATUS=1 account, 1 instance"),
                "a status line with the instance",
                daemon,
            )
            scrape = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).text

            daemon.send_signal(stop_signal)
            _, stderr = daemon.communicate(timeout=WAIT_SECONDS)
        finally:
            if daemon.poll() is None:
                daemon.kill()
                daemon.communicate(timeout=10)
            engine.dispose()
            notify.close()

    assert daemon.returncode == 0, stderr
    [instance] = store.latest_instances()
    assert (instance.snapshot.account, instance.snapshot.instance_id) == ("vast-main", "9001")
    assert notify.seen("STOPPING=1")
    assert all(request.method == "GET" for request in receiver.received(ping_path))
    assert "watchdog_gpu_up 1.0" in scrape
    assert 'watchdog_gpu_polls_total{account="vast-main",outcome="ok",provider="vast"}' in scrape
    assert f"stopping reason={stop_signal.name}" in stderr
    assert "msg=stopped" in stderr
    # the real daemon's lines are logfmt a real parser reads: facts are fields, not msg text
    lines = [logfmt.parse_line(line) for line in stderr.splitlines() if line.startswith("time=")]
    assert lines
    assert all({"time", "level", "logger", "msg"} <= line.keys() for line in lines)
    started = next(line for line in lines if line["msg"] == "started")
    assert (started["accounts"], started["mode"]) == ("1", "monitor")
    stopping = next(line for line in lines if line["msg"] == "stopping")
    assert stopping["reason"] == stop_signal.name
    assert "Traceback" not in stderr
    assert API_KEY not in stderr
    assert "5f3c1d2e-token" not in stderr
