"""``status --db`` decides with the configuration's defaults as plain values
(``commands/status_defaults.py``): each must stay what the pydantic models' defaults are."""

from __future__ import annotations

from datetime import timedelta

from tests.integration.store_builders import instance
from watchdog_gpu.commands import status_defaults
from watchdog_gpu.commands.status_collect import policy_of
from watchdog_gpu.config import Settings, WatchdogSection
from watchdog_gpu.plan import PlanContext, warn_before
from watchdog_gpu.protection import protection_for
from watchdog_gpu.rules import RULES, default_configs, lookback_for
from watchdog_gpu.rules.idle_gpu import IdleGpuConfig
from watchdog_gpu.safety import SafetyConfig


def test_the_sample_window_idle_threshold_and_poll_interval_are_the_models_defaults() -> None:
    assert lookback_for(default_configs()) == status_defaults.LOOKBACK
    assert IdleGpuConfig().clock_settings == status_defaults.IDLE_CLOCK
    assert WatchdogSection().poll_interval == status_defaults.POLL_INTERVAL


def test_every_rules_warning_lead_is_its_default_configurations() -> None:
    context = PlanContext(mode="monitor", rules=default_configs(), safety=SafetyConfig())
    leads = {name: warn_before(name, context) for name in RULES}
    assert {name: lead for name, lead in leads.items() if lead} == dict(status_defaults.WARN_BEFORE)
    assert set(status_defaults.WARN_BEFORE) <= set(RULES)


def test_the_default_safety_section_protects_nothing_so_only_recorded_protections_apply() -> None:
    safety = SafetyConfig()
    assert (safety.protect_ids, safety.protect_names, safety.protect_accounts) == ([], [], [])
    context = PlanContext(mode="monitor", rules=default_configs(), safety=safety)
    snapshot = instance("101", name="keep-me")
    assert protection_for(snapshot, (), context) is None
    assert policy_of(None).protection(snapshot, ()) is None


def test_the_policy_without_a_configuration_is_the_policy_of_default_settings() -> None:
    settings = Settings()
    plain, models = policy_of(None), policy_of(settings)
    assert plain.lookback == models.lookback
    assert plain.idle_clock == models.idle_clock
    assert plain.poll_interval == models.poll_interval
    for name in (*RULES, "no_such_rule"):
        assert plain.warn_before(name) == models.warn_before(name)
        assert plain.dry_run(name) is None  # the mode is in the configuration file
    assert models.warn_before("idle_gpu") > timedelta(0)
