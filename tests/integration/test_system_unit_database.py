"""The system unit's daemon and ``sudo watchdog-gpu …`` with the configuration in /etc resolve
one and the same database, with no flag.

The unit's environment is emulated as systemd sets it, read from systemd/watchdog-gpu.service:
its ``Environment=`` lines, ``STATE_DIRECTORY`` from ``StateDirectory=`` (/var/lib/NAME),
``CONFIGURATION_DIRECTORY`` from ``ConfigurationDirectory=`` (/etc/NAME), the credentials
directory, ``HOME=/`` of a dynamic user, ``WorkingDirectory=`` and the ``ExecStart=`` command
line, with the file system's root moved to a temporary directory. The daemon (``watchdog-gpu
run``, a real subprocess) polls the simulated Vast API. Then the operator's commands run as root
would run them: no ``$STATE_DIRECTORY``, a home of their own, the same configuration file.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.integration.cli_support import isolate, run
from tests.support.sim_world import ServedWorld, served_world
from watchdog_gpu.fleet import ProtectionKind
from watchdog_gpu.store import Store, create_engine_for, sqlite_url

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
SYSTEM_UNIT = REPO / "systemd" / "watchdog-gpu.service"
ACCOUNT = "vast-a"
API_KEY = "sim-vast-a"
WAIT_SECONDS = 60.0


def directives(unit: Path) -> dict[str, list[str]]:
    values: dict[str, list[str]] = {}
    for line in unit.read_text().splitlines():
        if line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            values.setdefault(key, []).append(value)
    return values


def unit_environment(root: Path) -> tuple[dict[str, str], list[str], Path]:
    """The variables systemd sets for the system unit (paths under ``root``), the ExecStart=
    arguments after the binary, and the working directory."""
    values = directives(SYSTEM_UNIT)
    environ: dict[str, str] = {}
    for assignment in values.get("Environment", []):
        name, _, value = assignment.partition("=")
        environ[name] = value
    [state] = values["StateDirectory"]
    [configuration] = values["ConfigurationDirectory"]
    environ["STATE_DIRECTORY"] = str(root / "var" / "lib" / state)
    environ["CONFIGURATION_DIRECTORY"] = str(root / "etc" / configuration)
    environ["CREDENTIALS_DIRECTORY"] = str(root / "run" / "credentials" / SYSTEM_UNIT.name)
    environ["HOME"] = str(root)  # a DynamicUser= user's home is /
    [command] = values["ExecStart"]
    arguments = re.sub(r"\$\{(\w+)\}", lambda match: environ[match.group(1)], command).split()[1:]
    [working] = values["WorkingDirectory"]
    working_directory = root / "var" / "lib" / working.removeprefix("%S/")
    return environ, arguments, working_directory


@pytest.fixture
def sim() -> Iterator[ServedWorld]:
    with served_world() as served:
        yield served


def test_the_daemon_and_the_operators_commands_use_one_database(
    tmp_path: Path,
    sim: ServedWorld,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = tmp_path / "root"
    unit_env, arguments, working_directory = unit_environment(root)
    assert arguments[0] == "run"
    config = Path(arguments[arguments.index("--config") + 1])
    assert config == root / "etc" / "watchdog-gpu" / "config.toml"
    # The configuration as deploy/README writes it: no database_url, secrets as credentials.
    config.parent.mkdir(parents=True)
    config.write_text(
        f"""
[watchdog]
poll_interval = "2s"

[metrics]
enabled = false

[probe]
enabled = false

[[accounts]]
name = "{ACCOUNT}"
provider = "vast"
api_key = {{ credential = "vast_api_key" }}
api_url = "{sim.url("vast")}"
""",
        encoding="utf-8",
    )
    credentials = Path(unit_env["CREDENTIALS_DIRECTORY"])
    credentials.mkdir(parents=True)
    (credentials / "vast_api_key").write_text(API_KEY)
    # systemd creates StateDirectory= (and so WorkingDirectory=) before the start.
    Path(unit_env["STATE_DIRECTORY"]).mkdir(parents=True, mode=0o700)
    unit_database = Path(unit_env["STATE_DIRECTORY"]) / "watchdog-gpu.db"

    environ = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("WATCHDOG_GPU_")
        and name not in {"STATE_DIRECTORY", "XDG_STATE_HOME", "XDG_CONFIG_HOME"}
    }
    daemon = subprocess.Popen(
        [sys.executable, "-m", "watchdog_gpu", *arguments],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=environ | unit_env,
        cwd=working_directory,
    )
    try:
        wait_for_accounts(unit_database, daemon)

        # `sudo watchdog-gpu …`: root's own environment, root's home, the same file.
        isolate(monkeypatch, tmp_path)
        status = run(capsys, "status", "--config", str(config))
        assert status.code == 0, status.err  # was 2: "database ~/.local/state/… does not exist"
        protect = run(
            capsys, "protect", "--account", ACCOUNT, "--reason", "demo", "--config", str(config)
        )
        snooze = run(capsys, "snooze", f"{ACCOUNT}/9001", "--for", "1h", "--config", str(config))
        as_json = json.loads(run(capsys, "status", "--config", str(config), "--json").out)
        # While the daemon runs, `db upgrade` is refused on the daemon's own database.
        refused = run(capsys, "db", "upgrade", "--config", str(config))
    finally:
        daemon.send_signal(signal.SIGTERM)
        _, stderr = daemon.communicate(timeout=30)
    upgrade = run(capsys, "db", "upgrade", "--config", str(config))

    assert daemon.returncode == 0, stderr
    assert refused.code == 2
    assert f"{sqlite_url(unit_database)} is in use by a watchdog-gpu daemon" in refused.err
    assert status.code == 0, status.err
    first, second = status.out.splitlines()[:2]
    assert first.endswith(f"database {sqlite_url(unit_database)}")
    assert second.startswith("mode: monitor (")
    assert protect.code == 0, protect.err
    assert snooze.code == 0, snooze.err
    assert as_json["database"] == sqlite_url(unit_database)
    assert as_json["mode"] == {"watchdog": "monitor", "rules": {}}
    assert upgrade.code == 0, upgrade.err
    assert str(unit_database) in upgrade.out
    # No second database anywhere: not in root's home, not in the working directory.
    assert not (tmp_path / "home").exists()
    assert sorted(p.name for p in root.rglob("*.db")) == ["watchdog-gpu.db"]
    engine = create_engine_for(sqlite_url(unit_database))
    try:
        store = Store(engine)
        assert [(p.kind, p.value) for p in store.list_protections()] == [
            (ProtectionKind.ACCOUNT, ACCOUNT)
        ]
        snoozes = store.list_snoozes(datetime(2000, 1, 1, tzinfo=UTC))  # every one ever made
        assert [(s.account, s.instance_id) for s in snoozes] == [(ACCOUNT, "9001")]
    finally:
        engine.dispose()


def wait_for_accounts(database: Path, daemon: subprocess.Popen[str]) -> None:
    """Until the daemon has recorded a poll of the account in ``database``."""
    pause = threading.Event()
    for _ in range(int(WAIT_SECONDS / 0.2)):
        if daemon.poll() is not None:
            pytest.fail(f"the daemon exited ({daemon.returncode}) before polling")
        if database.is_file():
            engine = create_engine_for(sqlite_url(database))
            try:
                if Store(engine).latest_accounts():
                    return
            except Exception:  # the schema may still be migrating: look again
                pass
            finally:
                engine.dispose()
        pause.wait(0.2)
    pytest.fail("gave up waiting for the daemon's first poll")
