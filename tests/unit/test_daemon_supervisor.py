"""The supervisor's progress logic on a virtual clock, talking to a real AF_UNIX datagram socket
that stands in for systemd (``$NOTIFY_SOCKET``)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from watchdog_gpu.clock import VirtualClock
from watchdog_gpu.config import AccountConfig, Settings, WatchdogSection
from watchdog_gpu.jobs import EVALUATE, FleetSummary, Progress, poll_job_id
from watchdog_gpu.secrets import SecretReference
from watchdog_gpu.supervisor import (
    StallLimits,
    Supervisor,
    stall_limits,
    supervisor_interval,
)

START = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
LIMITS = StallLimits(poll=timedelta(minutes=3), evaluate=timedelta(minutes=4))


class FakeSystemd:
    """A bound SOCK_DGRAM socket and the NOTIFY_SOCKET value pointing at it."""

    def __init__(self, sock: socket.socket, address: str) -> None:
        self.sock = sock
        self.environ = {"NOTIFY_SOCKET": address}

    def receive(self) -> list[str]:
        return self.sock.recv(4096).decode().split("\n")

    def pending(self) -> list[list[str]]:
        """Every datagram waiting right now (without blocking)."""
        received = []
        self.sock.setblocking(False)
        try:
            while True:
                received.append(self.sock.recv(4096).decode().split("\n"))
        except BlockingIOError:
            return received
        finally:
            self.sock.setblocking(True)
            self.sock.settimeout(5)


@pytest.fixture
def fake_systemd(tmp_path: Path) -> Iterator[FakeSystemd]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.settimeout(5)
        path = tmp_path / "notify.sock"
        sock.bind(str(path))
        yield FakeSystemd(sock, str(path))


def make_supervisor(
    clock: VirtualClock,
    environ: dict[str, str],
    accounts: tuple[str, ...] = ("vast-a", "runpod-b"),
    summary: FleetSummary | None = None,
) -> tuple[Supervisor, Progress]:
    progress = Progress(clock)
    shown = summary or FleetSummary(len(accounts), 12, 0, START)
    return Supervisor(progress, list(accounts), LIMITS, lambda: shown, environ), progress


def test_a_fresh_daemon_is_healthy_and_pings_with_a_status_line(
    fake_systemd: FakeSystemd,
) -> None:
    clock = VirtualClock(START)
    supervisor, _ = make_supervisor(
        clock, fake_systemd.environ, ("a", "b", "c"), FleetSummary(3, 12, 0, START)
    )

    assert supervisor.beat().healthy

    assert fake_systemd.receive() == ["WATCHDOG=1"]
    assert fake_systemd.receive() == [
        "STATUS=3 accounts, 12 instances, 0 pending actions, last tick 12:00:00"
    ]


def test_no_ping_once_no_poll_succeeded_within_the_limit(fake_systemd: FakeSystemd) -> None:
    clock = VirtualClock(START)
    supervisor, progress = make_supervisor(clock, fake_systemd.environ)
    clock.advance(LIMITS.evaluate - timedelta(seconds=1))
    progress.succeeded(EVALUATE, clock.now())
    clock.advance(timedelta(seconds=2))

    health = supervisor.beat()

    assert health.stalled == ("poll: no account polled for 241s",)
    [status] = fake_systemd.pending()
    assert status[0].startswith("STATUS=")
    assert "STALLED: poll: no account polled for 241s" in status[0]


def test_no_ping_once_the_evaluation_did_not_succeed_within_the_limit(
    fake_systemd: FakeSystemd,
) -> None:
    clock = VirtualClock(START)
    supervisor, progress = make_supervisor(clock, fake_systemd.environ)
    clock.advance(LIMITS.evaluate + timedelta(seconds=1))
    progress.succeeded(poll_job_id("vast-a"), clock.now())

    health = supervisor.beat()

    assert health.stalled == ("evaluate: no success for 241s",)
    assert all(datagram != ["WATCHDOG=1"] for datagram in fake_systemd.pending())


def test_one_account_failing_to_poll_is_not_a_hang_while_another_polls(
    fake_systemd: FakeSystemd,
) -> None:
    clock = VirtualClock(START)
    supervisor, progress = make_supervisor(clock, fake_systemd.environ)
    for _ in range(10):  # ten minutes: only runpod-b's poll job succeeds
        clock.advance(timedelta(minutes=1))
        progress.succeeded(poll_job_id("runpod-b"), clock.now())
        progress.succeeded(EVALUATE, clock.now())
        progress.started(poll_job_id("vast-a"))
        progress.failed(poll_job_id("vast-a"), "RuntimeError")

    assert supervisor.beat().healthy
    assert fake_systemd.receive() == ["WATCHDOG=1"]


def test_pings_resume_when_the_jobs_make_progress_again(
    fake_systemd: FakeSystemd, caplog: pytest.LogCaptureFixture
) -> None:
    clock = VirtualClock(START)
    supervisor, progress = make_supervisor(clock, fake_systemd.environ)
    clock.advance(timedelta(minutes=5))
    assert not supervisor.beat().healthy
    fake_systemd.pending()

    progress.succeeded(poll_job_id("vast-a"), clock.now())
    progress.succeeded(EVALUATE, clock.now())

    assert supervisor.beat().healthy
    assert fake_systemd.receive() == ["WATCHDOG=1"]
    assert "jobs stalled" in caplog.text
    assert "watchdog pings resume" in caplog.text


def test_a_daemon_without_accounts_is_judged_by_its_evaluation_alone(
    fake_systemd: FakeSystemd,
) -> None:
    clock = VirtualClock(START)
    supervisor, progress = make_supervisor(clock, fake_systemd.environ, accounts=())
    clock.advance(timedelta(hours=1))
    progress.succeeded(EVALUATE, clock.now())

    assert supervisor.beat().healthy


def test_the_status_line_before_the_first_tick_and_in_the_singular(
    fake_systemd: FakeSystemd,
) -> None:
    clock = VirtualClock(START)
    supervisor, _ = make_supervisor(
        clock, fake_systemd.environ, ("a",), FleetSummary(1, 1, 1, None)
    )

    supervisor.beat()

    assert fake_systemd.pending()[1] == [
        "STATUS=1 account, 1 instance, 1 pending action, last tick never"
    ]


def test_without_notify_socket_the_supervisor_still_judges_and_sends_nothing() -> None:
    clock = VirtualClock(START)
    supervisor, _ = make_supervisor(clock, {})
    clock.advance(timedelta(hours=1))

    assert not supervisor.beat().healthy


def test_run_beats_until_the_stop_event_is_set(fake_systemd: FakeSystemd) -> None:
    clock = VirtualClock(START)
    supervisor, _ = make_supervisor(clock, fake_systemd.environ)
    stop = threading.Event()
    thread = threading.Thread(target=supervisor.run, args=(stop, 0.01))
    thread.start()

    assert fake_systemd.receive() == ["WATCHDOG=1"]  # it beats on its own
    stop.set()
    thread.join(timeout=10)

    assert not thread.is_alive()


def test_stall_limits_are_three_poll_intervals_plus_the_slowest_poll_and_an_allowance() -> None:
    accounts = [
        AccountConfig(name="a", provider="vast", api_key=SecretReference.plain("key-a-1234")),
        AccountConfig(
            name="b",
            provider="runpod",
            api_key=SecretReference.plain("key-b-1234"),
            retry_budget=timedelta(seconds=120),
            request_timeout=timedelta(seconds=20),
        ),
    ]
    settings = Settings(
        watchdog=WatchdogSection(poll_interval=timedelta(minutes=2)), accounts=accounts
    )

    limits = stall_limits(settings)

    assert limits.poll == timedelta(minutes=6, seconds=140)
    assert limits.evaluate == timedelta(minutes=7)


def test_the_supervisor_beats_at_half_the_systemd_watchdog_interval() -> None:
    poll = timedelta(seconds=60)
    assert supervisor_interval({"WATCHDOG_USEC": "90000000"}, poll) == 45.0
    assert supervisor_interval({}, poll) == 30.0
    assert supervisor_interval({}, timedelta(seconds=2)) == 2.0
    assert supervisor_interval({"WATCHDOG_USEC": "90000000", "WATCHDOG_PID": "1"}, poll) == 30.0
