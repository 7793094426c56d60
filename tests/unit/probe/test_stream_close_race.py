"""A session or connection finished while the stream manager or SSH runner closes is closed.

The doctor and the daemon close their stream manager while connector threads may still be in
the middle of an SSH connection; a channel those threads finish opening afterwards was queued
for a reader thread that had stopped, and its socket was only found (and warned about) by the
garbage collector, in whatever ran next."""

from __future__ import annotations

import io
import socket
import threading
from typing import cast

import paramiko
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from watchdog_gpu.clock import SystemClock
from watchdog_gpu.errors import ProbeError
from watchdog_gpu.model import ProbeStatus
from watchdog_gpu.probe.hostkeys import MemoryHostKeyStore
from watchdog_gpu.probe.runner import SshTarget
from watchdog_gpu.probe.ssh import ParamikoRunner
from watchdog_gpu.probe.streams import StreamManager


def new_key() -> paramiko.PKey:
    pem = ed25519.Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    )
    return paramiko.Ed25519Key.from_private_key(io.StringIO(pem.decode()))


class FakeChannel:
    def __init__(self) -> None:
        self.closed = threading.Event()

    def close(self) -> None:
        self.closed.set()


class SlowOpener:
    """Opens a channel only once the test lets it: after the manager began to close."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.channel = FakeChannel()

    def open_channel(self, target: SshTarget, command: str) -> paramiko.Channel:
        self.entered.set()
        self.release.wait(timeout=10)
        return cast(paramiko.Channel, self.channel)


def test_a_session_opened_after_close_is_closed_by_its_connector() -> None:
    opener = SlowOpener()
    manager = StreamManager(opener, clock=SystemClock())
    manager.sync([SshTarget("acct", "i-1", "127.0.0.1", 22)])
    assert opener.entered.wait(timeout=10), "the connector never started"

    manager.close()
    opener.release.set()

    assert opener.channel.closed.wait(timeout=10), "the late session was left open"


def test_a_connection_finished_after_the_runners_close_is_closed_not_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A real TCP connection to a loopback listener; the SSH steps are stood in for, the first
    # one held until the runner has been closed.
    listener = socket.create_server(("127.0.0.1", 0))
    port = int(listener.getsockname()[1])
    runner = ParamikoRunner([new_key()], MemoryHostKeyStore())
    negotiating, release = threading.Event(), threading.Event()
    transports: list[paramiko.Transport] = []

    def negotiate(target: SshTarget, transport: paramiko.Transport) -> None:
        transports.append(transport)
        negotiating.set()
        release.wait(timeout=10)

    monkeypatch.setattr(runner, "_negotiate", negotiate)
    for step in ("_check_host_key", "_authenticate", "_pin_if_new"):
        monkeypatch.setattr(runner, step, lambda target, transport: None)
    errors: list[ProbeError] = []

    def connect() -> None:
        try:
            runner._connect(SshTarget("acct", "i-1", "127.0.0.1", port))
        except ProbeError as error:
            errors.append(error)

    connector = threading.Thread(target=connect)
    connector.start()
    try:
        assert negotiating.wait(timeout=10)
        runner.close()
        release.set()
        connector.join(timeout=10)
    finally:
        release.set()
        listener.close()

    assert [e.status for e in errors] == [ProbeStatus.UNREACHABLE.value]
    assert "closed while connecting" in str(errors[0])
    assert runner.kept_connections() == 0
    assert transports[0].sock.fileno() == -1  # its socket is closed, not left to the collector
