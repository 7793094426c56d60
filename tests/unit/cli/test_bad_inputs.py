"""Bad input to ``simulate`` and ``config check``: a clear error on stderr, exit 2, no
traceback, every mistake listed — never a hang, a crash or numbers that are not numbers."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from watchdog_gpu.cli import EXIT_USAGE, main

SCENARIO = """
name = "bad-input"
start = "2026-03-02T20:00:00Z"
duration = "1h"
tick = "60s"

[[accounts]]
name = "vast-main"
provider = "vast"
balance_usd = 20.0

[[accounts.instances]]
id = "9001"
compute_usd_per_hour = 0.37
disk_gb = 50
storage_usd_per_gb_month = 0.20
events = [{ at = "0s", state = "running", gpu_util = 0 }]
"""

DEEP = 5000  # far deeper than the interpreter's recursion limit


@pytest.fixture(autouse=True)
def quiet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in list(os.environ):
        if name.startswith("WATCHDOG_GPU_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    logger = logging.getLogger("watchdog_gpu")
    level = logger.level
    yield
    logger.setLevel(level)


def simulate(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    path = tmp_path / "scenario.toml"
    path.write_text(text, encoding="utf-8")
    code = main(["simulate", "--scenario", str(path), "--json"])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return code, captured.out, captured.err


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        ('tick = "60s"', 'tick = "0s"', "tick: must be at least 1s"),
        (
            "2026-03-02T20:00:00Z",
            "0001-01-01T00:00:00Z",
            "start: the scenario must run between 1970-02-01 and 9000-01-01 (UTC)",
        ),
        (
            "2026-03-02T20:00:00Z",
            "9999-12-31T20:00:00Z",
            "start: the scenario must run between 1970-02-01 and 9000-01-01 (UTC)",
        ),
        (
            'duration = "1h"',
            'duration = "999999999d"',
            "duration: too long: the scenario must run between 1970-02-01 and 9000-01-01 (UTC)",
        ),
        (
            "disk_gb = 50",
            "disk_gb = 1e300",
            "accounts[0].instances[0].disk_gb: Input should be less than or equal to 1000000000",
        ),
        (
            'id = "9001"',
            'id = "9001\\n"',
            "accounts[0].instances[0].id: Vast.ai instance ids are integers of at most 20 "
            "digits, e.g. '9001'",
        ),
        (
            'provider = "vast"',
            'provider = "runpod"',  # 9001 is fine for RunPod; the next case is not
            None,
        ),
    ],
)
def test_a_bad_scenario_value_is_a_clear_error(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    old: str,
    new: str,
    problem: str | None,
) -> None:
    assert old in SCENARIO
    code, out, err = simulate(tmp_path, SCENARIO.replace(old, new), capsys)
    if problem is None:
        assert code == 0
        return
    assert code == EXIT_USAGE
    assert out == ""
    assert f"scenario.toml: {problem}\n" in err


def test_instance_ids_are_checked_as_the_adapters_check_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # RunPod pod ids go into GraphQL text: the adapter refuses "pod-1", so must the scenario.
    text = SCENARIO.replace('provider = "vast"', 'provider = "runpod"').replace("9001", "pod-1")
    code, _out, err = simulate(tmp_path, text, capsys)
    assert code == EXIT_USAGE
    assert "accounts[0].instances[0].id: RunPod instance ids are 1-64 letters and digits" in err


def test_every_bad_value_is_listed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = (
        SCENARIO.replace('tick = "60s"', 'tick = "0s"')
        .replace("2026-03-02T20:00:00Z", "0001-01-01T00:00:00Z")
        .replace("disk_gb = 50", "disk_gb = 1e300")
    )
    code, _out, err = simulate(tmp_path, text, capsys)
    assert code == EXIT_USAGE
    assert err.count("scenario.toml: ") == 3, err


def test_a_deeply_nested_scenario_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = SCENARIO + "\nx = " + "[" * DEEP + "]" * DEEP + "\n"
    code, out, err = simulate(tmp_path, text, capsys)
    assert code == EXIT_USAGE
    assert out == ""
    assert "invalid TOML: tables or arrays are nested too deeply" in err


@pytest.mark.parametrize("nesting", ["[" * DEEP + "]" * DEEP, "{a=" * DEEP + "1" + "}" * DEEP])
def test_a_deeply_nested_config_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], nesting: str
) -> None:
    path = tmp_path / "config.toml"
    path.write_text(f"[watchdog]\nx = {nesting}\n", encoding="utf-8")
    code = main(["config", "check", "--config", str(path)])
    err = capsys.readouterr().err
    assert code == EXIT_USAGE
    assert "Traceback" not in err
    assert f"{path}: invalid TOML: tables or arrays are nested too deeply" in err
