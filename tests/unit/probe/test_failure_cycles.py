"""Failed SSH connections leave no reference cycle through our code.

A long outage (a thousand hosts refusing every connection) must cost nothing that outlives each
failure: an exception kept in a frame its own traceback holds is a cycle that only the cyclic
collector frees, and a steady stream of them reaches its old generation (bench/README.md, "Measured
and not taken"). Each test drives the real code — the paramiko
runner, the burst prober, the stream manager — through real failures on 127.0.0.1 with the
collector off and ``gc.DEBUG_SAVEALL`` on, then looks at what only the collector could free.

paramiko's own cycles stay (not ours to change, the report of the change says which): every
``Transport`` holds bound methods of itself (``_handler_table``), and its thread saves the error
that ended it (``saved_exception``, whose traceback holds the thread's frame). None of them holds
a frame of ours; the cycles these tests catch did, and through it the caller's whole stack.
"""

from __future__ import annotations

import io
import socket
import threading
import types
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import paramiko
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from paramiko import common

import watchdog_gpu
from tests.support.cycles import cyclic_garbage
from watchdog_gpu.clock import SystemClock
from watchdog_gpu.errors import WatchdogError
from watchdog_gpu.model import InstanceSnapshot, InstanceState
from watchdog_gpu.probe.hostkeys import MemoryHostKeyStore
from watchdog_gpu.probe.prober import Prober
from watchdog_gpu.probe.runner import SshTarget
from watchdog_gpu.probe.ssh import ParamikoRunner, SshTimeouts
from watchdog_gpu.probe.stream_buffer import StreamState
from watchdog_gpu.probe.streams import StreamManager

FAILURES = 8
NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
QUICK = SshTimeouts(connect_seconds=2, banner_seconds=1, handshake_seconds=2, auth_seconds=2)
PACKAGE = str(Path(watchdog_gpu.__file__).parent)


def new_key() -> paramiko.PKey:
    pem = ed25519.Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    )
    return paramiko.Ed25519Key.from_private_key(io.StringIO(pem.decode()))


def closed_port() -> int:
    """A loopback port nothing listens on: connections to it are refused."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _our_frame(frame: types.FrameType) -> bool:
    return frame.f_code.co_filename.startswith(PACKAGE)


def ours(garbage: list[object]) -> list[str]:
    """The cyclic garbage that holds our code: its frames, tracebacks through them, our errors."""
    found = []
    for thing in garbage:
        if type(thing) is types.FrameType and _our_frame(thing):
            found.append(f"frame {thing.f_code.co_name} ({thing.f_code.co_filename})")
        elif type(thing) is types.TracebackType and _our_frame(thing.tb_frame):
            found.append(f"traceback through {thing.tb_frame.f_code.co_name}")
        elif issubclass(type(thing), WatchdogError):  # type(): garbage holds dead weak proxies
            found.append(f"{type(thing).__name__}: {thing}")
    return found


def instance(port: int, number: int) -> InstanceSnapshot:
    return InstanceSnapshot(
        provider="vast",
        account="acct",
        instance_id=f"i-{number}",
        name="train",
        state=InstanceState.RUNNING,
        raw_state="running",
        observed_at=NOW,
        ssh_host="127.0.0.1",
        ssh_port=port,
        ssh_user="root",
        gpu_count=1,
    )


def burst_probes(port: int, key: paramiko.PKey) -> tuple[Callable[[], None], list[str]]:
    """``FAILURES`` burst probes of hosts on ``port``; the details land in the list."""
    details: list[str] = []

    def probe() -> None:
        with ParamikoRunner([key], MemoryHostKeyStore(), timeouts=QUICK) as runner:
            prober = Prober(runner, clock=SystemClock(), workers=1)
            for number in range(FAILURES):
                outcome = prober.probe_one(instance(port, number), NOW, log=False)
                details.append(f"{outcome.status.value} {outcome.detail}")

    return probe, details


def test_refused_stream_connections_leave_no_cycle() -> None:
    port = closed_port()
    targets = [SshTarget("acct", f"i-{n}", "127.0.0.1", port) for n in range(FAILURES)]
    details: list[str] = []

    def stream() -> None:
        runner = ParamikoRunner([new_key()], MemoryHostKeyStore(), timeouts=QUICK)
        with runner, StreamManager(runner, clock=SystemClock()) as manager:
            manager.sync(targets)
            for _ in range(200):  # each host's first connection fails within a tick or two
                health = manager.health()
                if all(h.state is StreamState.BACKOFF for h in health.values()):
                    break
                SystemClock().sleep(0.02)
            details.extend(f"{h.state.value} {h.status.value} {h.detail}" for h in health.values())

    garbage = cyclic_garbage(stream)

    assert ours(garbage) == []
    assert len(details) == FAILURES
    assert all(
        detail.startswith(f"backoff unreachable root@127.0.0.1:{port}: cannot connect: ")
        for detail in details
    ), details


def test_refused_burst_probes_leave_no_cycle() -> None:
    port = closed_port()
    probe, details = burst_probes(port, new_key())

    garbage = cyclic_garbage(probe)

    assert ours(garbage) == []
    assert len(details) == FAILURES
    assert all(
        detail.startswith(f"unreachable root@127.0.0.1:{port}: cannot connect: ")
        for detail in details
    ), details


@pytest.fixture
def hangs_up() -> Iterator[int]:
    """A loopback port that accepts every connection and closes it at once (no SSH banner)."""
    server = socket.create_server(("127.0.0.1", 0), backlog=64)
    server.settimeout(0.05)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                connection, _ = server.accept()
            except TimeoutError:
                continue
            connection.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield int(server.getsockname()[1])
    stop.set()
    thread.join(5)
    server.close()


def test_a_host_that_hangs_up_before_the_banner_leaves_no_cycle_through_our_code(
    hangs_up: int,
) -> None:
    probe, details = burst_probes(hangs_up, new_key())

    garbage = cyclic_garbage(probe)

    assert ours(garbage) == []
    prefix = f"unreachable root@127.0.0.1:{hangs_up}: SSH negotiation failed: "
    assert len(details) == FAILURES
    assert all(detail.startswith(prefix) for detail in details), details


class _Refusing(paramiko.ServerInterface):
    """Logs in nobody (``accept_key`` False), or everybody without opening any session."""

    def __init__(self, accept_key: bool) -> None:
        self.accept_key = accept_key

    def get_allowed_auths(self, username: str) -> str:
        return "publickey"

    def check_auth_publickey(self, username: str, key: paramiko.PKey) -> int:
        return common.AUTH_SUCCESSFUL if self.accept_key else common.AUTH_FAILED

    def check_channel_request(self, kind: str, chanid: int) -> int:
        return common.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED


@pytest.fixture
def refusing() -> Iterator[Callable[[bool], int]]:
    """``refusing(accept_key)``: the port of an in-process SSH server that refuses our login,
    or (``accept_key``) takes it and refuses every session."""
    stop = threading.Event()
    servers: list[socket.socket] = []
    transports: list[paramiko.Transport] = []
    threads: list[threading.Thread] = []
    host_key = new_key()

    def start(accept_key: bool) -> int:
        server = socket.create_server(("127.0.0.1", 0), backlog=64)
        server.settimeout(0.05)
        servers.append(server)

        def serve() -> None:
            while not stop.is_set():
                try:
                    connection, _ = server.accept()
                except TimeoutError:
                    continue
                transport = paramiko.Transport(connection)
                transports.append(transport)
                transport.add_server_key(host_key)
                transport.start_server(server=_Refusing(accept_key))

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        threads.append(thread)
        return int(server.getsockname()[1])

    yield start
    stop.set()
    for thread in threads:
        thread.join(5)
    for transport in transports:
        transport.close()
    for server in servers:
        server.close()


@pytest.mark.parametrize(
    ("accept_key", "expected"),
    [
        (False, "auth_failed root@127.0.0.1:{port}: the server accepted none of our 1 key(s)"),
        (
            True,
            "unreachable root@127.0.0.1:{port}: could not start the command: "
            "ChannelException(1, 'Administratively prohibited')",
        ),
    ],
    ids=["login refused", "session refused"],
)
def test_a_refused_login_or_session_leaves_no_cycle_through_our_code(
    refusing: Callable[[bool], int], accept_key: bool, expected: str
) -> None:
    port = refusing(accept_key)
    probe, details = burst_probes(port, new_key())

    garbage = cyclic_garbage(probe)

    assert ours(garbage) == []
    assert details == [expected.format(port=port)] * FAILURES
