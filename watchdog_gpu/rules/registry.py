"""The rules' registry: one module each, registered here by name (the TOML table name under
``[rules]``); the package ``watchdog_gpu.rules`` exports these names.

Adding a rule is one module (a config model whose docstring and field descriptions document
its ``[rules.<name>]`` table, a pure ``evaluate``, ``RULE = RuleSpec(NAME, Config, evaluate)``)
plus its entry in ``RULES`` below: the configuration's ``[rules]`` (``config.RulesConfig``),
``config check`` and the generated example and reference read this registry
(``python -m watchdog_gpu.config.generate`` rewrites the files).

:func:`evaluate_all` runs every enabled rule over one fleet view. A rule that raises is logged
and skipped — the others still run: one bug must not switch off the budget layer too.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from watchdog_gpu.fleet import FleetView
from watchdog_gpu.model import Finding
from watchdog_gpu.rules import (
    account_health,
    budget,
    hygiene,
    idle_gpu,
    low_balance,
    max_runtime,
    paused_interruptible,
    stopped_disk,
    stuck_starting,
    unobserved,
    volume_storage,
)
from watchdog_gpu.rules.base import Rule, RuleConfig
from watchdog_gpu.rules.idle_clock import IdleEpisode

logger = logging.getLogger(__name__)

# Order matters only for readability of findings and logs: the money layers first.
RULES: dict[str, Rule] = {
    rule.name: rule
    for rule in (
        budget.RULE,
        idle_gpu.RULE,
        paused_interruptible.RULE,
        stopped_disk.RULE,
        max_runtime.RULE,
        low_balance.RULE,
        unobserved.RULE,
        stuck_starting.RULE,
        account_health.RULE,
        volume_storage.RULE,
        hygiene.RULE,
    )
}


@dataclass(frozen=True, slots=True)
class Evaluation:
    """What one evaluation produced: the findings, and the rules that failed (name → error
    type and message) so the daemon can count and report them."""

    findings: tuple[Finding, ...]
    failed: Mapping[str, str]
    # The earliest instant a rule's verdict may change by time alone (rules.base.RuleOutcome):
    # on streamed rows, and on listed state.
    next_change: datetime | None = None
    next_listed: datetime | None = None
    # idle_gpu's running idle episodes by instance key (RuleOutcome.idle_episodes); None when
    # the rule did not run (disabled or failed): no activity is known.
    idle_episodes: Mapping[str, IdleEpisode] | None = None


def idle_rules() -> frozenset[str]:
    """The rules that fire only on observed GPU idleness (``RuleSpec.observes_idle``)."""
    return frozenset(name for name, rule in RULES.items() if rule.observes_idle)


def emergency_rules() -> frozenset[str]:
    """The budget emergency's rules (``RuleSpec.emergency``)."""
    return frozenset(name for name, rule in RULES.items() if rule.emergency)


def default_configs() -> dict[str, RuleConfig]:
    """Every rule's configuration with its documented defaults (what `simulate` uses without a
    config file)."""
    return {name: rule.config_model() for name, rule in RULES.items()}


def minimum_sample_lookback(configs: Mapping[str, RuleConfig]) -> timedelta:
    """The shortest sample/probe history (the store's ``lookback``) the rules need: idle_gpu
    must see an episode from arming to its due time, unobserved must see ``after`` of blind
    time. A minimum: a longer history (up to the instance's whole run) keeps episode dates exact
    when an episode lasts longer (snoozes, monitor mode)."""
    idle = configs.get(idle_gpu.NAME)
    blind = configs.get(unobserved.NAME)
    idle_config = idle if isinstance(idle, idle_gpu.IdleGpuConfig) else idle_gpu.IdleGpuConfig()
    blind_config = (
        blind if isinstance(blind, unobserved.UnobservedConfig) else unobserved.UnobservedConfig()
    )
    return max(idle_gpu.minimum_sample_lookback(idle_config), blind_config.after)


def lookback_for(rules: Mapping[str, RuleConfig]) -> timedelta:
    """How much sample and probe history the rules need: what the idle rule asks for (its window
    plus arming, see ``rules.minimum_sample_lookback``) or the unobserved rule's blind window,
    with a margin for the sample gap at the window's start."""
    needed = minimum_sample_lookback(rules)
    blind = rules.get(unobserved.NAME)
    if isinstance(blind, unobserved.UnobservedConfig):
        needed = max(needed, blind.after)
    return needed + timedelta(minutes=10)


def evaluate_rules(view: FleetView, now: datetime, configs: Mapping[str, RuleConfig]) -> Evaluation:
    """Run every enabled rule over ``view`` as of ``now``.

    ``configs`` maps rule names to their config models; a rule missing from it runs with its
    defaults, a rule whose ``enabled`` is false does not run, and a name that is no rule is
    logged and ignored. A rule that raises (including being handed the wrong config type) is
    logged with its traceback and recorded in ``failed``; the other rules still run.
    ``next_change`` is the earliest instant any rule's verdict may change by time alone.
    """
    for name in configs:
        if name not in RULES:
            logger.warning("unknown rule ignored rule=%s", name)
    findings: list[Finding] = []
    failed: dict[str, str] = {}
    next_change: datetime | None = None
    next_listed: datetime | None = None
    idle_episodes: Mapping[str, IdleEpisode] | None = None
    for name, rule in RULES.items():
        config = configs.get(name) or rule.config_model()
        if not config.enabled:
            continue
        try:
            produced = rule.evaluate_timed(view, now, config)
        except Exception as error:  # a rule bug must not silence the other layers
            logger.exception("rule failed rule=%s error=%s", name, type(error).__name__)
            failed[name] = f"{type(error).__name__}: {error}"
            continue
        findings.extend(produced.findings)
        next_change = earliest(next_change, produced.next_change)
        next_listed = earliest(next_listed, produced.next_listed)
        if produced.idle_episodes is not None:
            idle_episodes = produced.idle_episodes
    return Evaluation(tuple(findings), failed, next_change, next_listed, idle_episodes)


def earliest(*instants: datetime | None) -> datetime | None:
    """The earliest of ``instants`` that are set (None: none is)."""
    return min((at for at in instants if at is not None), default=None)


def cleared_reason(finding: Finding, view: FleetView) -> str:
    """Why ``finding``'s episode ended, in its rule's terms (the rule's hook)."""
    rule = RULES.get(finding.rule)
    if rule is None:
        return "condition no longer holds"
    return rule.cleared_reason(finding, view)


def evaluate_all(
    view: FleetView, now: datetime, configs: Mapping[str, RuleConfig]
) -> list[Finding]:
    """The findings of :func:`evaluate_rules` (failing rules logged and skipped)."""
    return list(evaluate_rules(view, now, configs).findings)
