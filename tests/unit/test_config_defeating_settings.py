"""``watchdog-gpu config check`` on settings that would silently switch a rule or a protection
off: each is an error (exit 2) or a warning that says the consequence, by dotted path, and every
mistake of a file is listed at once."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from watchdog_gpu.cli import main

ONE_ACCOUNT = """
[[accounts]]
name = "vast-main"
provider = "vast"
api_key = { env = "VAST_API_KEY" }
"""


@pytest.fixture(autouse=True)
def clean_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("WATCHDOG_GPU_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def check(tmp_path: Path, body: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """Exit code and stderr of ``config check`` on ``ONE_ACCOUNT`` plus ``body``."""
    path = tmp_path / "config.toml"
    path.write_text(ONE_ACCOUNT + textwrap.dedent(body), encoding="utf-8")
    code = main(["config", "check", "--config", str(path)])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, err


@pytest.mark.parametrize(
    ("body", "path", "words"),
    [
        (
            "[rules.idle_gpu]\nthreshold_percent = 100\n",
            "rules.idle_gpu.threshold_percent",
            "must be at most 50: at 100 a GPU up to 100 % busy, doing real work, counts as idle",
        ),
        (
            "[safety]\nmax_actions_per_tick = 0\n",
            "safety.max_actions_per_tick",
            "must be at least 1: 0 would hold every stop and destroy for ever",
        ),
        (
            "[safety]\nmax_actions_per_hour = 0\n",
            "safety.max_actions_per_hour",
            "must be at least 1",
        ),
        (
            '[rules.idle_gpu]\nmax_sample_gap = "0s"\n',
            "rules.idle_gpu.max_sample_gap",
            "must be longer than 0s: no two samples would be close enough to count as observed, "
            "so idle_gpu would never find an idle GPU",
        ),
        (
            '[rules.stopped_disk]\naction = "stop"\n',
            "rules.stopped_disk.action",
            'cannot be "stop": the instance is already stopped and its disk keeps billing',
        ),
    ],
)
def test_a_setting_that_defeats_its_rule_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], body: str, path: str, words: str
) -> None:
    code, err = check(tmp_path, body, capsys)
    assert code == 2
    assert f"\n  {path}: {words}" in err


def test_a_sane_threshold_and_gap_are_accepted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = '[rules.idle_gpu]\nthreshold_percent = 50\nmax_sample_gap = "2m"\n'
    code, err = check(tmp_path, body, capsys)
    assert code == 0
    assert "threshold_percent" not in err
    assert "max_sample_gap" not in err


def test_protecting_every_name_is_said_loudly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = check(tmp_path, '[safety]\nprotect_names = ["keep-*", "*"]\n', capsys)
    assert code == 0
    assert (
        "warning: safety.protect_names[1]: '*' matches every instance, named or not: no rule "
        "will ever stop or destroy anything"
    ) in err
    assert "protect_names[0]" not in err


def test_a_sample_gap_shorter_than_the_probe_interval_is_said_loudly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = check(tmp_path, '[rules.idle_gpu]\nmax_sample_gap = "30s"\n', capsys)
    assert code == 0
    assert (
        "warning: rules.idle_gpu.max_sample_gap: shorter than watchdog.probe_interval (1m)"
    ) in err
    assert "idle_gpu never finds those GPUs idle" in err


def test_a_bad_value_and_a_misspelt_key_in_one_table_are_both_listed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = check(tmp_path, "[rules.idle_gpu]\nidle_minutes = -5\nidle_minuts = 30\n", capsys)
    assert code == 2
    assert "invalid configuration (2 problems):" in err
    assert "\n  rules.idle_gpu.idle_minutes: idle_minutes must be greater than 0" in err
    assert "\n  rules.idle_gpu.idle_minuts: unknown option; did you mean 'idle'" in err


def test_every_mistake_of_the_issue_is_listed_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = """
    [rules.idle_gpu]
    idle_minutes = -5
    idle_minuts = 30
    threshold_percent = 100
    max_sample_gap = "0s"
    [rules.stopped_disk]
    action = "stop"
    [safety]
    max_actions_per_tick = 0
    """
    code, err = check(tmp_path, body, capsys)
    assert code == 2
    assert "invalid configuration (6 problems):" in err
    for path in (
        "rules.idle_gpu.idle_minutes",
        "rules.idle_gpu.idle_minuts",
        "rules.idle_gpu.threshold_percent",
        "rules.idle_gpu.max_sample_gap",
        "rules.stopped_disk.action",
        "safety.max_actions_per_tick",
    ):
        assert f"\n  {path}: " in err
