"""The benchmark's sshd sessions (``SshServer(light_home=True)``): an empty ``HOME`` of their own,
so root's login shell reads no rc file (``bench/README.md``, "The bench's sshd sessions"), while
the fake ``nvidia-smi`` set-up stays as the tests have it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.conftest import require_sshd
from tests.integration.probe_helpers import make_runner
from tests.integration.sshd import FAKEBIN, SshServer
from watchdog_gpu.probe.hostkeys import MemoryHostKeyStore
from watchdog_gpu.probe.runner import SshTarget

pytestmark = pytest.mark.sshd

SHOW = 'printf "%s\\n" "$HOME" "$PATH"; ls -A "$HOME" | wc -l'


def session_view(workdir: Path, *, light_home: bool) -> list[str]:
    workdir.mkdir(mode=0o700)
    server = SshServer(require_sshd(), workdir, light_home=light_home)
    server.start()
    try:
        with make_runner(server, MemoryHostKeyStore()) as runner:
            target = SshTarget("acct", "i-1", "127.0.0.1", server.port, "root")
            result = runner.run(target, SHOW, 30.0)
    finally:
        server.stop()
    assert result.exit_status == 0, result
    return result.stdout.splitlines()


def test_light_home_sessions_start_in_an_empty_home_with_the_fake_path(tmp_path: Path) -> None:
    home, path, entries = session_view(tmp_path / "light", light_home=True)
    assert home == str(tmp_path / "light" / "home")
    # No rc file ran: PATH is exactly what authorized_keys set (an rc file would prepend).
    assert path == f"{FAKEBIN}:/usr/bin:/bin"
    assert entries.strip() == "0"


def test_by_default_sessions_keep_root_s_home(tmp_path: Path) -> None:
    home, _path, _entries = session_view(tmp_path / "root", light_home=False)
    assert home == "/root"
