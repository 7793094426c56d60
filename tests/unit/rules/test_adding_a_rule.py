"""Adding a rule is one module and one registry entry: a rule defined only in the tests
(tests/support/pricey_rule.py), registered by one line, is configurable from TOML and the
environment, evaluated by the tick and planned into a notification, and listed by
``config check`` and in the generated example and reference."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.scenarios.helpers import run_scenario
from tests.support import pricey_rule
from watchdog_gpu.cli import main
from watchdog_gpu.config import ConfigError, load_settings
from watchdog_gpu.config.generate import example, reference
from watchdog_gpu.rules import registry

ACCOUNT = """
[[accounts]]
name = "vast-main"
provider = "vast"
api_key = { env = "VAST_API_KEY" }
"""


@pytest.fixture(autouse=True)
def registered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(registry.RULES, pricey_rule.NAME, pricey_rule.RULE)  # the one line


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_its_table_is_read_from_toml_and_the_environment(tmp_path: Path) -> None:
    path = write(tmp_path, ACCOUNT + "[rules.pricey_gpu]\nmax_usd_per_hour = 0.25\n")

    from_file = load_settings(path, {})
    from_environment = load_settings(
        path, {"WATCHDOG_GPU_RULES__PRICEY_GPU__MAX_USD_PER_HOUR": "2.5"}
    )

    assert from_file.rules.of(pricey_rule.PriceyGpuConfig).max_usd_per_hour == 0.25
    assert from_environment.rules.of(pricey_rule.PriceyGpuConfig).max_usd_per_hour == 2.5
    assert (
        load_settings(write(tmp_path, ACCOUNT), {}).rules.by_name()["pricey_gpu"]
        == pricey_rule.PriceyGpuConfig()
    )


def test_its_mistakes_are_reported_by_their_dotted_path(tmp_path: Path) -> None:
    path = write(tmp_path, ACCOUNT + "[rules.pricey_gpu]\nmax_usd_per_hr = 1\nenabled = 3\n")

    with pytest.raises(ConfigError) as raised:
        load_settings(path, {})

    problems = {problem.path: problem.message for problem in raised.value.problems}
    assert problems["rules.pricey_gpu.max_usd_per_hr"].startswith(
        "unknown option; did you mean 'max_usd_per_hour'?"
    )
    assert "rules.pricey_gpu.enabled" in problems


def test_the_tick_evaluates_it_and_the_planner_notifies_its_findings(tmp_path: Path) -> None:
    (tmp_path / "told").mkdir()
    (tmp_path / "quiet").mkdir()
    told = run_scenario(
        "forgotten_idle", tmp_path / "told", "[rules.pricey_gpu]\nmax_usd_per_hour = 0.25\n"
    )
    quiet = run_scenario("forgotten_idle", tmp_path / "quiet", "")  # its default: $1/h

    alerts = [(note.instance_id, note.body) for _, note in told.sent if note.rule == "pricey_gpu"]
    assert len(alerts) == 1
    assert alerts[0][0] == "9001"
    assert "billing $0.37/h, above $0.25/h" in alerts[0][1]
    assert [note for _, note in quiet.sent if note.rule == "pricey_gpu"] == []


def test_config_check_lists_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, ACCOUNT + '[rules.pricey_gpu]\nmode = "enforce"\n')

    assert main(["config", "check", "--config", str(path)]) == 0

    assert "  pricey_gpu            notify   enforce" in capsys.readouterr().out


def test_the_generated_example_and_reference_document_it() -> None:
    text = example()

    assert (
        '# Notify when a running instance\'s compute bills more than "max_usd_per_hour".\n'
        '[rules.pricey_gpu]\nenabled = true\nmode = "inherit"\n'
        "# The compute rate above which a running instance is told.\nmax_usd_per_hour = 1.0\n"
    ) in text
    assert "| `max_usd_per_hour` | `1.0` | The compute rate above which" in reference()
