"""``watchdog-gpu run`` refuses to start on bad configuration (exit 2, every problem listed, no
traceback), on a metrics address it cannot listen on (exit 2) and on an unusable database
(exit 1), closing what it opened."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from watchdog_gpu.cli import main
from watchdog_gpu.clock import SystemClock
from watchdog_gpu.config import load_settings
from watchdog_gpu.daemon import run_daemon

CANARY = "canary-api-key-9c1e77"


@pytest.fixture(autouse=True)
def clean_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No keys, overrides or systemd variables from the machine running the tests."""
    for name in list(os.environ):
        if name.startswith("WATCHDOG_GPU_") or name in {
            "CREDENTIALS_DIRECTORY",
            "STATE_DIRECTORY",
            "NOTIFY_SOCKET",
            "WATCHDOG_USEC",
        }:
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def write_config(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(body, encoding="utf-8")
    return path


def account(api_key: str = '{ env = "WD_TEST_VAST_KEY" }') -> str:
    return f"""
[[accounts]]
name = "vast-main"
provider = "vast"
api_key = {api_key}
api_url = "http://127.0.0.1:9"
"""


def test_a_missing_config_file_exits_2_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope.toml"

    assert main(["run", "--config", str(missing)]) == 2

    err = capsys.readouterr().err
    assert str(missing) in err
    assert "Traceback" not in err


def test_every_config_problem_is_listed_by_its_dotted_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(
        tmp_path, '[watchdog]\npoll_interval = "soon"\nmoed = "enforce"\n' + account()
    )

    assert main(["run", "--config", str(config)]) == 2

    err = capsys.readouterr().err
    assert "invalid configuration (2 problems)" in err
    assert "watchdog.poll_interval" in err
    assert "watchdog.moed" in err


def test_missing_secrets_exit_2_listing_each_without_starting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(
        tmp_path,
        f'[watchdog]\ndatabase_url = "sqlite:///{tmp_path}/wd.db"\n'
        'dead_mans_switch_url = { env = "WD_TEST_DMS_URL" }\n' + account(),
    )

    assert main(["run", "--config", str(config)]) == 2

    err = capsys.readouterr().err
    assert "2 secrets not available" in err
    assert "accounts[0].api_key" in err
    assert "env WD_TEST_VAST_KEY" in err
    assert "watchdog.dead_mans_switch_url" in err
    assert not (tmp_path / "wd.db").exists()  # refused before touching the database


def test_an_unusable_notification_url_found_while_building_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(
        tmp_path,
        f'[watchdog]\ndatabase_url = "sqlite:///{tmp_path}/wd.db"\n'
        "[metrics]\nenabled = false\n[probe]\nenabled = false\n"
        '[[notify.routes]]\nurl = "nosuchscheme://whatever"\n' + account(f'"{CANARY}"'),
    )
    settings = load_settings(config, {})

    assert run_daemon(settings, SystemClock(), {}) == 2

    err = capsys.readouterr().err
    assert "notify.routes" in err
    assert CANARY not in err


def test_a_database_that_cannot_be_created_exits_1(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    config = write_config(
        tmp_path,
        f'[watchdog]\ndatabase_url = "sqlite:///{blocker}/sub/wd.db"\n'
        "[metrics]\nenabled = false\n" + account(f'"{CANARY}"'),
    )
    settings = load_settings(config, {})

    assert run_daemon(settings, SystemClock(), {}) == 1

    assert "cannot start" in caplog.text
    assert CANARY not in caplog.text


def test_a_metrics_port_in_use_exits_2_naming_address_port_and_setting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = write_config(
            tmp_path,
            f'[watchdog]\ndatabase_url = "sqlite:///{tmp_path}/wd.db"\n'
            f'[metrics]\nlisten_address = "127.0.0.1"\nport = {port}\n[probe]\nenabled = false\n'
            + account(f'"{CANARY}"'),
        )

        # Exit 2: a taken port stays taken, so systemd must not restart in a loop.
        assert main(["run", "--config", str(config)]) == 2

    err = capsys.readouterr().err
    assert f"cannot listen on 127.0.0.1 port {port}" in err
    assert "Address already in use" in err
    assert "[metrics] port" in err
    assert "Traceback" not in err
    assert CANARY not in err
    assert (tmp_path / "wd.db").exists()  # migrated before the endpoint failed, then closed


def test_a_configuration_without_accounts_exits_2_before_touching_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, f'[watchdog]\ndatabase_url = "sqlite:///{tmp_path}/wd.db"\n')

    assert main(["run", "--config", str(config)]) == 2

    err = capsys.readouterr().err
    assert "cannot start: accounts: no [[accounts]] configured" in err
    assert "would watch nothing" in err
    assert not (tmp_path / "wd.db").exists()
