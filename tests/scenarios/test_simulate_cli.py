"""The helpers and ``watchdog-gpu simulate --json`` produce the same JSON.

Every scenario test reads the JSON through :mod:`tests.scenarios.helpers`, in-process; this test
pins that the command users run prints exactly that object for the same scenario and config.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.scenarios.helpers import ENFORCE, SCENARIOS, run_scenario
from watchdog_gpu.cli import EXIT_OK, main

NAME = "outbid_interruptible"


@pytest.fixture
def keep_log_level() -> Iterator[None]:
    # The command quietens the package's logger for its own output; other tests need it back.
    logger = logging.getLogger("watchdog_gpu")
    level = logger.level
    yield
    logger.setLevel(level)


@pytest.mark.usefixtures("keep_log_level")
def test_the_command_prints_the_json_the_helpers_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.toml"
    config.write_text(ENFORCE, encoding="utf-8")
    scenario = SCENARIOS / f"{NAME}.toml"

    code = main(["simulate", "--scenario", str(scenario), "--config", str(config), "--json"])

    assert code == EXIT_OK
    printed = json.loads(capsys.readouterr().out)
    expected = run_scenario(NAME, tmp_path, ENFORCE).json
    assert printed == expected
    assert printed["actions"], "a scenario where something happens, so the comparison means it"
