"""Connections against a real sshd: reuse, closing, key sources, interactive logins."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import paramiko
import pytest
from cryptography.hazmat.primitives import serialization

from tests.integration.conftest import FakeGpu
from tests.integration.probe_helpers import instance_on, make_prober, make_runner, probe
from tests.integration.sshd import SshServer
from tests.support.requirements import require_program
from watchdog_gpu.clock import SystemClock
from watchdog_gpu.model import ProbeStatus
from watchdog_gpu.probe.hostkeys import MemoryHostKeyStore
from watchdog_gpu.probe.ssh import ParamikoRunner
from watchdog_gpu.probe.sshkeys import SshCredentials

pytestmark = pytest.mark.sshd

IDLE_DMON = "nvidia-smi/dmon_default_1gpu_idle_h100_590.48.01.txt"


def logins(server: SshServer) -> int:
    return server.log_path.read_text().count("Accepted publickey")


def test_probes_of_one_instance_reuse_one_connection(
    ssh_server: SshServer, fake_gpu: FakeGpu
) -> None:
    fake_gpu.replay("dmon", IDLE_DMON)
    store = MemoryHostKeyStore()
    before = logins(ssh_server)
    with make_runner(ssh_server, store) as runner:
        prober = make_prober(runner, store)
        for _ in range(3):
            assert probe(prober, instance_on(ssh_server)).status is ProbeStatus.OK
        assert runner.kept_connections() == 1

    assert logins(ssh_server) == before + 1


def test_a_connection_closes_when_its_instance_leaves_the_listing(
    ssh_server: SshServer, fake_gpu: FakeGpu
) -> None:
    fake_gpu.replay("dmon", IDLE_DMON)
    store = MemoryHostKeyStore()
    first, second = instance_on(ssh_server, "a"), instance_on(ssh_server, "b")
    with make_runner(ssh_server, store) as runner:
        prober = make_prober(runner, store)
        prober.probe_all([first, second], first.observed_at)
        assert runner.kept_connections() == 2

        prober.probe_all([first], first.observed_at)

        assert runner.kept_connections() == 1


def test_a_killed_idle_connection_is_replaced_on_the_next_probe(
    ssh_server: SshServer, fake_gpu: FakeGpu
) -> None:
    fake_gpu.replay("dmon", IDLE_DMON)
    store = MemoryHostKeyStore()
    with make_runner(ssh_server, store) as runner:
        prober = make_prober(runner, store)
        assert probe(prober, instance_on(ssh_server)).status is ProbeStatus.OK
        ssh_server.kill_sessions()

        assert probe(prober, instance_on(ssh_server)).status is ProbeStatus.OK


def test_an_encrypted_key_from_a_secret_logs_in_with_its_passphrase(
    ssh_server: SshServer, fake_gpu: FakeGpu
) -> None:
    fake_gpu.replay("dmon", IDLE_DMON)
    plain = serialization.load_ssh_private_key(ssh_server.client.path.read_bytes(), None)
    encrypted = plain.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.BestAvailableEncryption(b"correct horse"),
    ).decode()
    store = MemoryHostKeyStore()
    credentials = SshCredentials(private_key_text=encrypted, passphrase="correct horse")
    with make_runner(ssh_server, store, credentials) as runner:
        assert probe(make_prober(runner, store), instance_on(ssh_server)).status is ProbeStatus.OK


@pytest.fixture
def agent_socket(ssh_server: SshServer, tmp_path: Path) -> Iterator[Path]:
    """A real ssh-agent holding the accepted client key."""
    agent = require_program(
        "ssh-agent", "/usr/bin/ssh-agent", hint="apt-get install openssh-client"
    )
    add = require_program("ssh-add", "/usr/bin/ssh-add", hint="apt-get install openssh-client")
    socket_path = tmp_path / "agent.sock"
    process = subprocess.Popen([agent, "-D", "-a", str(socket_path)], stdout=subprocess.DEVNULL)
    try:
        clock = SystemClock()
        end = clock.monotonic() + 10
        while not socket_path.exists() and clock.monotonic() < end:
            clock.sleep(0.02)
        environment = {**os.environ, "SSH_AUTH_SOCK": str(socket_path)}
        subprocess.run(
            [add, str(ssh_server.client.path)], env=environment, check=True, capture_output=True
        )
        yield socket_path
    finally:
        process.terminate()
        process.wait(5)


def test_the_ssh_agent_can_provide_the_key(
    ssh_server: SshServer,
    fake_gpu: FakeGpu,
    agent_socket: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_gpu.replay("dmon", IDLE_DMON)
    monkeypatch.setenv("SSH_AUTH_SOCK", str(agent_socket))
    store = MemoryHostKeyStore()
    with ParamikoRunner([], store, use_agent=True) as runner:
        assert probe(make_prober(runner, store), instance_on(ssh_server)).status is ProbeStatus.OK


def test_someone_typing_in_a_terminal_counts_as_an_interactive_login(
    ssh_server: SshServer, fake_gpu: FakeGpu
) -> None:
    fake_gpu.replay("dmon", IDLE_DMON)
    user = paramiko.SSHClient()
    user.set_missing_host_key_policy(paramiko.AutoAddPolicy())
    user.connect(
        "127.0.0.1",
        ssh_server.port,
        username="root",
        key_filename=str(ssh_server.client.path),
        allow_agent=False,
        look_for_keys=False,
    )
    store = MemoryHostKeyStore()
    try:
        terminal = user.invoke_shell()
        terminal.send(b"echo typed-$((40 + 2))\n")
        output = b""
        while b"typed-42" not in output:  # the shell has read our input from its terminal
            output += terminal.recv(4096)
        with make_runner(ssh_server, store) as runner:
            outcome = probe(make_prober(runner, store), instance_on(ssh_server))
    finally:
        user.close()

    assert outcome.status is ProbeStatus.OK
    assert outcome.interactive_login is True
