"""sd_notify against a real AF_UNIX datagram socket standing in for systemd (path and abstract)."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from watchdog_gpu import systemd_notify


class FakeSystemd:
    """A bound SOCK_DGRAM socket and the NOTIFY_SOCKET value pointing at it."""

    def __init__(self, sock: socket.socket, address: str) -> None:
        self.sock = sock
        self.environ = {"NOTIFY_SOCKET": address}

    def receive(self) -> list[str]:
        return self.sock.recv(4096).decode().split("\n")


@pytest.fixture(params=["path", "abstract"])
def fake_systemd(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[FakeSystemd]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.settimeout(5)  # a broken send fails the test instead of hanging it
        if request.param == "path":
            path = tmp_path / "notify.sock"
            sock.bind(str(path))
            yield FakeSystemd(sock, str(path))
        else:
            name = f"watchdog-gpu-test-{uuid.uuid4().hex}"
            sock.bind("\0" + name)
            yield FakeSystemd(sock, "@" + name)


def test_ready_sends_ready_and_status_in_one_datagram(fake_systemd: FakeSystemd) -> None:
    sent = systemd_notify.ready("polling 3 accounts", environ=fake_systemd.environ)

    assert sent
    assert fake_systemd.receive() == ["READY=1", "STATUS=polling 3 accounts"]


def test_watchdog_status_stopping_and_extend_timeout_are_sent(fake_systemd: FakeSystemd) -> None:
    env = fake_systemd.environ

    assert systemd_notify.watchdog_ping(environ=env)
    assert systemd_notify.status("tick 42 ok", environ=env)
    assert systemd_notify.stopping("SIGTERM", environ=env)
    assert systemd_notify.extend_timeout(90, environ=env)

    assert fake_systemd.receive() == ["WATCHDOG=1"]
    assert fake_systemd.receive() == ["STATUS=tick 42 ok"]
    assert fake_systemd.receive() == ["STOPPING=1", "STATUS=SIGTERM"]
    assert fake_systemd.receive() == ["EXTEND_TIMEOUT_USEC=90000000"]


def test_a_status_text_cannot_forge_another_field(fake_systemd: FakeSystemd) -> None:
    systemd_notify.status("bad\nREADY=1", environ=fake_systemd.environ)

    assert fake_systemd.receive() == ["STATUS=bad READY=1"]
    with pytest.raises(ValueError, match="KEY=value"):
        systemd_notify.notify("STATUS=a\nREADY=1", environ=fake_systemd.environ)
    with pytest.raises(ValueError, match="KEY=value"):
        systemd_notify.notify("READY", environ=fake_systemd.environ)


def test_the_process_environment_is_used_by_default(
    fake_systemd: FakeSystemd, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NOTIFY_SOCKET", fake_systemd.environ["NOTIFY_SOCKET"])

    assert systemd_notify.watchdog_ping()
    assert fake_systemd.receive() == ["WATCHDOG=1"]


def test_without_systemd_nothing_is_sent() -> None:
    assert not systemd_notify.ready(environ={})
    assert not systemd_notify.watchdog_ping(environ={"NOTIFY_SOCKET": ""})
    assert not systemd_notify.status("x", environ={"NOTIFY_SOCKET": "vsock:2:1234"})


def test_a_vanished_socket_is_reported_not_raised(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    env = {"NOTIFY_SOCKET": str(tmp_path / "gone.sock")}

    assert not systemd_notify.ready(environ=env)
    assert "sd_notify failed error=FileNotFoundError" in caplog.text


def test_the_watchdog_interval_is_half_of_watchdog_sec_for_our_pid_only() -> None:
    me = os.getpid()

    assert systemd_notify.watchdog_interval({"WATCHDOG_USEC": "90000000"}) == 45.0
    assert (
        systemd_notify.watchdog_interval({"WATCHDOG_USEC": "90000000", "WATCHDOG_PID": str(me)})
        == 45.0
    )
    assert (
        systemd_notify.watchdog_interval(
            {"WATCHDOG_USEC": "90000000", "WATCHDOG_PID": "1234"}, pid=5678
        )
        is None
    )
    assert systemd_notify.watchdog_interval({}) is None
    assert systemd_notify.watchdog_interval({"WATCHDOG_USEC": "soon"}) is None
    assert systemd_notify.watchdog_interval({"WATCHDOG_USEC": "0"}) is None
