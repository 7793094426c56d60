"""The rule registry: every rule under its TOML name, its documented example valid, and a
failing rule isolated from the others."""

from __future__ import annotations

import importlib
import logging
import re
import tomllib
from collections.abc import Iterable
from datetime import datetime, timedelta

import pytest

from tests.unit.rules.builders import at, fleet, instance, span
from watchdog_gpu.fleet import FleetView
from watchdog_gpu.model import Finding, InstanceState
from watchdog_gpu.rules import (
    RULES,
    default_configs,
    evaluate_all,
    evaluate_rules,
    minimum_sample_lookback,
)
from watchdog_gpu.rules.base import RuleSpec
from watchdog_gpu.rules.budget import BudgetConfig
from watchdog_gpu.rules.paused_interruptible import PausedInterruptibleConfig
from watchdog_gpu.rules.stopped_disk import StoppedDiskConfig
from watchdog_gpu.rules.unobserved import UnobservedConfig

EXPECTED = {
    "budget",
    "idle_gpu",
    "paused_interruptible",
    "stopped_disk",
    "max_runtime",
    "low_balance",
    "unobserved",
    "stuck_starting",
    "account_health",
    "volume_storage",
    "hygiene",
}


def paused_and_stopped() -> FleetView:
    paused = instance(
        span(InstanceState.PAUSED, at(0), at(60)), interruptible=True, instance_id="p"
    )
    stopped = instance(span(InstanceState.STOPPED, at(0), at(60)), instance_id="s")
    return fleet(at(60), paused, stopped)


def boom(view: FleetView, now: datetime, config: BudgetConfig) -> Iterable[Finding]:
    raise ZeroDivisionError("a bug in a rule")


def test_every_rule_is_registered_under_its_toml_name() -> None:
    assert set(RULES) == EXPECTED
    for name, rule in RULES.items():
        assert rule.name == name
        module = importlib.import_module(f"watchdog_gpu.rules.{name}")
        assert module.RULE is rule


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_rule_documents_a_valid_toml_example(name: str) -> None:
    module = importlib.import_module(f"watchdog_gpu.rules.{name}")
    match = re.search(r"```toml\n(.*?)```", module.__doc__ or "", re.DOTALL)
    assert match, f"{name} has no TOML example in its docstring"
    table = tomllib.loads(match.group(1))["rules"][name]
    config = RULES[name].config_model.model_validate(table)
    assert config.enabled


def test_default_configs_cover_every_rule() -> None:
    configs = default_configs()
    assert set(configs) == EXPECTED
    assert all(isinstance(configs[name], RULES[name].config_model) for name in EXPECTED)


def test_missing_configs_run_with_their_defaults() -> None:
    findings = evaluate_all(paused_and_stopped(), at(60), {})
    assert {f.rule for f in findings} == {"paused_interruptible", "stopped_disk"}


def test_a_disabled_rule_does_not_run() -> None:
    configs = {"stopped_disk": StoppedDiskConfig(enabled=False)}
    findings = evaluate_all(paused_and_stopped(), at(60), configs)
    assert {f.rule for f in findings} == {"paused_interruptible"}


def test_a_failing_rule_is_logged_and_skipped_the_others_still_run(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    failing = RuleSpec("budget", BudgetConfig, boom)
    monkeypatch.setitem(RULES, "budget", failing)
    with caplog.at_level(logging.ERROR, logger="watchdog_gpu.rules"):
        evaluation = evaluate_rules(paused_and_stopped(), at(60), {})
    assert {f.rule for f in evaluation.findings} == {"paused_interruptible", "stopped_disk"}
    assert evaluation.failed == {"budget": "ZeroDivisionError: a bug in a rule"}
    assert "rule failed rule=budget" in caplog.text


def test_a_config_of_the_wrong_type_fails_only_that_rule() -> None:
    configs = {"stopped_disk": PausedInterruptibleConfig()}
    evaluation = evaluate_rules(paused_and_stopped(), at(60), configs)
    assert set(evaluation.failed) == {"stopped_disk"}
    assert {f.rule for f in evaluation.findings} == {"paused_interruptible"}


def test_an_unknown_rule_name_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="watchdog_gpu.rules"):
        evaluate_all(paused_and_stopped(), at(60), {"idle_cpu": StoppedDiskConfig()})
    assert "unknown rule ignored rule=idle_cpu" in caplog.text


def test_the_minimum_sample_lookback_serves_idle_gpu_and_unobserved() -> None:
    assert minimum_sample_lookback({}) == timedelta(minutes=63)
    long_blind = {"unobserved": UnobservedConfig(after=timedelta(hours=3))}
    assert minimum_sample_lookback(long_blind) == timedelta(hours=3)
