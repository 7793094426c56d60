"""pricey_gpu: a rule that exists only in the tests, to show what adding a rule takes.

A running instance whose compute bills more than ``max_usd_per_hour`` is told, once per run.
This module plus one registry entry (``RULES["pricey_gpu"] = RULE``) is the whole rule:
tests/unit/rules/test_adding_a_rule.py registers it and finds it in the configuration, the
tick, ``config check`` and the generated configuration files.

```toml
[rules.pricey_gpu]
max_usd_per_hour = 0.25
```
"""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from watchdog_gpu.fleet import FleetView
from watchdog_gpu.model import ActionKind, Finding, InstanceState, Severity
from watchdog_gpu.rules.base import RuleConfig, RuleSpec

NAME = "pricey_gpu"


class PriceyGpuConfig(RuleConfig):
    """Notify when a running instance's compute bills more than "max_usd_per_hour"."""

    max_usd_per_hour: float = Field(
        default=1.0, gt=0, description="The compute rate above which a running instance is told."
    )


def evaluate(view: FleetView, now: datetime, config: PriceyGpuConfig) -> list[Finding]:
    """One finding per running instance billing more than the configured rate."""
    findings = []
    for instance in view.instances.values():
        rate = instance.latest.compute_usd_per_hour
        since = instance.state_since()
        if instance.state is not InstanceState.RUNNING or rate is None or since is None:
            continue
        if rate <= config.max_usd_per_hour:
            continue
        findings.append(
            Finding(
                rule=NAME,
                account=instance.latest.account,
                instance_id=instance.latest.instance_id,
                severity=Severity.WARNING,
                action=ActionKind.NOTIFY,
                summary=f"billing ${rate:.2f}/h, above ${config.max_usd_per_hour:.2f}/h",
                episode_started_at=since,
                due_at=since,
                evidence={"usd_per_hour": rate},
                usd_per_hour_at_stake=rate,
            )
        )
    return findings


RULE = RuleSpec(NAME, PriceyGpuConfig, evaluate)
