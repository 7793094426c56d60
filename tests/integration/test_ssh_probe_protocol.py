"""The paramiko runner against an in-process SSH server on 127.0.0.1 that misbehaves on purpose:
message orders and silences that OpenSSH produces only sometimes, or never on demand."""

from __future__ import annotations

import io
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import paramiko
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from paramiko import common

from watchdog_gpu.clock import SystemClock
from watchdog_gpu.errors import ProbeError
from watchdog_gpu.model import ProbeStatus
from watchdog_gpu.probe.hostkeys import MemoryHostKeyStore
from watchdog_gpu.probe.runner import SshTarget
from watchdog_gpu.probe.ssh import ParamikoRunner, SshTimeouts

Behaviour = Callable[[paramiko.Channel], None]
QUICK = SshTimeouts(
    connect_seconds=2,
    banner_seconds=0.5,
    handshake_seconds=2,
    auth_seconds=2,
    max_output_bytes=1 << 16,
)


def new_key() -> paramiko.PKey:
    pem = ed25519.Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    )
    return paramiko.Ed25519Key.from_private_key(io.StringIO(pem.decode()))


def exit_status_before_output(channel: paramiko.Channel) -> None:
    """The exit status first, the output a little later, then EOF and close (legal SSH)."""
    channel.send_exit_status(0)
    SystemClock().sleep(0.2)
    channel.sendall(b"first line\n")
    SystemClock().sleep(0.1)
    channel.sendall(b"last line\n")
    channel.shutdown_write()
    channel.close()


def close_without_exit_status(channel: paramiko.Channel) -> None:
    """A session killed by a signal: some output, EOF, close, and no exit status."""
    channel.sendall(b"partial\n")
    channel.shutdown_write()
    channel.close()


def endless_output(channel: paramiko.Channel) -> None:
    try:
        while not channel.closed:
            channel.sendall(b"x" * 4096)
    except (OSError, EOFError, paramiko.SSHException):
        pass


@dataclass
class ScriptedServer(paramiko.ServerInterface):
    client_key: paramiko.PKey
    behaviour: Behaviour
    commands: list[str] = field(default_factory=list)

    def get_allowed_auths(self, username: str) -> str:
        return "publickey"

    def check_auth_publickey(self, username: str, key: paramiko.PKey) -> int:
        accepted = key.asbytes() == self.client_key.asbytes()
        return common.AUTH_SUCCESSFUL if accepted else common.AUTH_FAILED

    def check_channel_request(self, kind: str, chanid: int) -> int:
        if kind == "session":
            return common.OPEN_SUCCEEDED
        return common.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED

    def check_channel_exec_request(self, channel: paramiko.Channel, command: bytes) -> bool:
        self.commands.append(command.decode())
        threading.Thread(target=self._later, args=(channel,), daemon=True).start()
        return True

    def _later(self, channel: paramiko.Channel) -> None:
        SystemClock().sleep(0.1)  # let the exec request's success reply go out first
        self.behaviour(channel)


@dataclass
class Listener:
    port: int
    client_key: paramiko.PKey


@pytest.fixture
def listen() -> Iterator[Callable[[Behaviour | None], Listener]]:
    """``listen(behaviour)`` starts a server whose exec requests run ``behaviour``; with
    ``None`` it accepts TCP connections and never says a word (no SSH banner)."""
    sockets: list[socket.socket] = []
    transports: list[paramiko.Transport] = []
    threads: list[threading.Thread] = []
    stop = threading.Event()

    def start(behaviour: Behaviour | None) -> Listener:
        server_socket = socket.create_server(("127.0.0.1", 0))
        server_socket.settimeout(0.05)  # accept() wakes up to notice the end of the test
        sockets.append(server_socket)
        host_key, client_key = new_key(), new_key()

        def serve() -> None:
            while not stop.is_set():
                try:
                    connection, _ = server_socket.accept()
                except TimeoutError:
                    continue
                sockets.append(connection)
                if behaviour is None:
                    continue
                transport = paramiko.Transport(connection)
                transports.append(transport)
                transport.add_server_key(host_key)
                transport.start_server(server=ScriptedServer(client_key, behaviour))

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        threads.append(thread)
        return Listener(server_socket.getsockname()[1], client_key)

    yield start
    stop.set()
    for thread in threads:
        thread.join(5)
    for transport in transports:
        transport.close()
    for open_socket in sockets:
        open_socket.close()


def test_output_that_arrives_after_the_exit_status_is_not_lost(
    listen: Callable[[Behaviour | None], Listener],
) -> None:
    listener = listen(exit_status_before_output)
    with ParamikoRunner([listener.client_key], MemoryHostKeyStore(), timeouts=QUICK) as runner:
        result = runner.run(SshTarget("acct", "i-1", "127.0.0.1", listener.port), "probe", 5.0)

    assert result.stdout == "first line\nlast line\n"
    assert result.exit_status == 0
    assert not result.timed_out


def test_a_session_closed_without_exit_status_reports_none(
    listen: Callable[[Behaviour | None], Listener],
) -> None:
    listener = listen(close_without_exit_status)
    with ParamikoRunner([listener.client_key], MemoryHostKeyStore(), timeouts=QUICK) as runner:
        result = runner.run(SshTarget("acct", "i-1", "127.0.0.1", listener.port), "probe", 5.0)

    assert result.stdout == "partial\n"
    assert result.exit_status is None


def test_endless_output_is_cut_at_the_size_limit(
    listen: Callable[[Behaviour | None], Listener],
) -> None:
    listener = listen(endless_output)
    with ParamikoRunner([listener.client_key], MemoryHostKeyStore(), timeouts=QUICK) as runner:
        result = runner.run(SshTarget("acct", "i-1", "127.0.0.1", listener.port), "probe", 30.0)

    assert result.output_truncated
    assert result.exit_status is None
    assert len(result.stdout) <= QUICK.max_output_bytes


def test_a_server_that_never_sends_a_banner_is_unreachable(
    listen: Callable[[Behaviour | None], Listener],
) -> None:
    listener = listen(None)
    runner = ParamikoRunner([listener.client_key], MemoryHostKeyStore(), timeouts=QUICK)
    with runner, pytest.raises(ProbeError) as failure:
        runner.run(SshTarget("acct", "i-1", "127.0.0.1", listener.port), "probe", 5.0)

    assert failure.value.status == ProbeStatus.UNREACHABLE.value
    assert runner.kept_connections() == 0
