"""The shipped ``examples/``: every configuration passes ``config check`` and every scenario runs
under ``simulate`` with the outcome its comment promises, enforcing (no config) and in monitor
mode under each provider's example configuration (the destroy becomes a dry run)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from watchdog_gpu.cli import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CONFIGS = sorted((EXAMPLES / "config").glob("*.toml"))
SCENARIOS = sorted((EXAMPLES / "scenarios").glob("*.toml"))

# Scenario → (rule, instance, destroy time) the scenario's comment promises (an idle limit: the
# rows covering it are in batch_seconds + 2 s later, when the watchdog evaluates again).
PROMISED = {
    "forgotten-idle.toml": ("idle_gpu", "vast-main/9001", "2026-03-02T21:00:07Z"),
    "outbid-interruptible.toml": ("paused_interruptible", "vast-bids/9101", "2026-03-02T20:45:00Z"),
    "lambda-night.toml": (
        "idle_gpu",
        "lambda-research/5c1e0d2b8a7f4e3c9b6a1d0e2f3a4b5c",
        "2026-03-02T20:50:07Z",
    ),
}


@pytest.fixture(autouse=True)
def clean_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("WATCHDOG_GPU_") or name in {"CREDENTIALS_DIRECTORY", "STATE_DIRECTORY"}:
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)


def test_there_is_a_config_for_each_provider_and_a_few_scenarios() -> None:
    assert [path.stem for path in CONFIGS] == ["lambda", "runpod", "vast"]
    assert sorted(path.name for path in SCENARIOS) == sorted(PROMISED)


@pytest.mark.parametrize("config", CONFIGS, ids=lambda path: path.name)
def test_each_config_checks_out(config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["config", "check", "--config", str(config), "--json"])

    report = json.loads(capsys.readouterr().out)
    assert code == 0
    assert report["valid"] is True
    assert report["mode"] == "monitor"
    assert [account["provider"] for account in report["accounts"]] == [config.stem]
    # Only the secrets are missing here (credentials come from systemd); nothing else is wrong.
    assert {refusal["message"].split(" ")[0] for refusal in report["refusals"]} == {"secret"}
    assert not [w for w in report["warnings"] if "deprecated" in w["message"]]


def simulate(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    capsys.readouterr()
    assert main(["simulate", *argv, "--json"]) == 0
    result: dict[str, object] = json.loads(capsys.readouterr().out)
    return result


def destroys(result: dict[str, object]) -> list[tuple[str, str, str, bool]]:
    actions = result["actions"]
    assert isinstance(actions, list)
    return [
        (a["rule"], f"{a['account']}/{a['instance']}", a["at"], a["dry_run"])
        for a in actions
        if a["action"] == "destroy"
    ]


@pytest.mark.slow
@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda path: path.name)
def test_each_scenario_does_what_its_comment_says(
    scenario: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rule, instance, at = PROMISED[scenario.name]
    provider = "lambda" if "lambda" in instance else "vast"

    enforcing = simulate(capsys, "--scenario", str(scenario))
    monitoring = simulate(
        capsys,
        "--scenario",
        str(scenario),
        "--config",
        str(EXAMPLES / "config" / f"{provider}.toml"),
    )

    assert destroys(enforcing) == [(rule, instance, at, False)]
    assert destroys(monitoring) == [(rule, instance, at, True)]
    assert monitoring["mode"] == "monitor"
