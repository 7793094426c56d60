"""Fixtures for integration tests that need real programs.

``ssh_server``: one real OpenSSH sshd on 127.0.0.1 for the whole session (see ``sshd.py``);
``fake_gpu``: what the fake ``nvidia-smi`` behind it prints, reset for every test. On a laptop
without sshd (or not running as root, which sshd's privilege separation needs) these tests skip;
in CI they fail instead (``tests/support/requirements.py``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.sshd import SshServer
from tests.support.requirements import require_program, running_in_ci

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def require_sshd() -> str:
    """The sshd binary, or skip (laptop) / fail (CI) when it or root privileges are missing."""
    sshd = require_program(
        "sshd", "/usr/sbin/sshd", hint="apt-get install openssh-server (and run as root)"
    )
    if os.geteuid() != 0:
        message = "sshd's privilege separation needs root; run the sshd tests as root"
        if running_in_ci():
            pytest.fail(message)
        pytest.skip(message)
    return sshd


@pytest.fixture
def own_server(tmp_path: Path) -> Iterator[SshServer]:
    """A private sshd for tests that restart it or change its host key (the shared one must
    stay up)."""
    workdir = tmp_path / "sshd"
    workdir.mkdir(mode=0o700)
    yield from serving_sshd(workdir)


def serving_sshd(workdir: Path) -> Iterator[SshServer]:
    """A fixture's body: a started sshd in ``workdir`` (mode 0700), stopped after the test."""
    server = SshServer(require_sshd(), workdir)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def ssh_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshServer]:
    """A running sshd on 127.0.0.1 that logs ``root`` in with ``ssh_server.client.path`` only."""
    sshd = require_sshd()
    workdir = tmp_path_factory.mktemp("sshd")
    workdir.chmod(0o700)
    server = SshServer(sshd, workdir)
    server.start()
    try:
        yield server
    finally:
        server.stop()


class FakeGpu:
    """Decides what the fake nvidia-smi on the sshd host prints (see tests/fixtures/fakebin)."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir

    def reset(self) -> None:
        for entry in self.state_dir.iterdir():
            entry.unlink()

    def replay(
        self,
        part: str,
        fixture: str | None = None,
        *,
        text: str | None = None,
        exit_status: int = 0,
        hang_seconds: int | None = None,
        pace_seconds: float | None = None,
        forever: int | None = None,
    ) -> None:
        """Make ``nvidia-smi <part>`` (``dmon``, ``apps``, ``gpus``) print a fixture file (a path
        under ``tests/fixtures``) or ``text``, one data line every ``pace_seconds`` if given, exit
        with ``exit_status`` and, with ``hang_seconds``, sleep after printing. With ``forever``
        (and ``pace_seconds``) print the rows over and over like a live ``dmon -d 1``, stalling
        after that many passes (0: never)."""
        if fixture is not None:
            shutil.copyfile(FIXTURES / fixture, self.state_dir / f"{part}.txt")
        elif text is not None:
            (self.state_dir / f"{part}.txt").write_text(text)
        (self.state_dir / f"{part}.exit").write_text(f"{exit_status}\n")
        if hang_seconds is not None:
            (self.state_dir / f"{part}.hang").write_text(f"{hang_seconds}\n")
        if pace_seconds is not None:
            (self.state_dir / f"{part}.pace").write_text(f"{pace_seconds}\n")
        if forever is not None:
            (self.state_dir / f"{part}.forever").write_text(f"{forever}\n")

    def is_hanging(self, part: str) -> bool:
        return (self.state_dir / f"{part}.hanging").exists()

    def calls(self) -> list[str]:
        log = self.state_dir / "calls.log"
        return log.read_text().splitlines() if log.exists() else []


@pytest.fixture
def fake_gpu(ssh_server: SshServer) -> FakeGpu:
    fake = FakeGpu(ssh_server.state_dir)
    fake.reset()
    return fake
