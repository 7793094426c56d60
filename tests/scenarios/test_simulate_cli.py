"""The helpers and ``watchdog-gpu simulate --json`` produce the same JSON.

Every scenario test reads the JSON through :mod:`tests.scenarios.helpers`, in-process; this test
pins that the command users run prints exactly that object for the same scenario and config.
"""

from __future__ import annotations

import json
import logging
import os
import pty
import subprocess
import sys
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


def simulate_process(stderr_on_terminal: bool) -> tuple[int, str, str]:
    """``watchdog-gpu simulate`` of a short example in a real process: its exit code, stdout
    (a pipe) and stderr (a pseudo-terminal, or a pipe)."""
    scenario = Path(__file__).resolve().parents[2] / "examples/scenarios/outbid-interruptible.toml"
    argv = [sys.executable, "-m", "watchdog_gpu", "simulate", "--scenario", str(scenario)]
    environ = {k: v for k, v in os.environ.items() if not k.startswith("WATCHDOG_GPU_")}
    if not stderr_on_terminal:
        done = subprocess.run(
            argv, capture_output=True, text=True, env=environ, timeout=300, check=False
        )
        return done.returncode, done.stdout, done.stderr
    main_fd, child_fd = pty.openpty()
    try:
        process = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=child_fd, env=environ, text=True
        )
        os.close(child_fd)
        child_fd = -1
        terminal = bytearray()
        while True:
            try:
                chunk = os.read(main_fd, 4096)
            except OSError:  # EIO: the process closed its end
                break
            if not chunk:
                break
            terminal += chunk
        out, _ = process.communicate(timeout=300)
    finally:
        if child_fd >= 0:
            os.close(child_fd)
        os.close(main_fd)
    return process.returncode, out, terminal.decode()


def test_progress_is_shown_on_a_terminal_only() -> None:
    code, out, terminal = simulate_process(stderr_on_terminal=True)
    piped_code, piped_out, piped_err = simulate_process(stderr_on_terminal=False)

    assert code == piped_code == EXIT_OK
    assert "simulated " in terminal
    assert " of 1h30m (" in terminal
    assert "so far" in terminal
    assert terminal.endswith("\r")  # the line is erased before the summary
    assert piped_err == ""  # no progress in a pipe
    assert out == piped_out  # and the summary is the same either way
    assert out.startswith("scenario outbid-interruptible (enforce mode)")
