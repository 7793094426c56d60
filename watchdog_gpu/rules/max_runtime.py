"""max_runtime: a hard TTL on how long an instance may run, busy or not.

Intent: the last line of defence when the GPU signal is missing or lies (a hung NCCL job at 100 %).
Off unless configured, because a TTL can kill a busy job.

```toml
[rules.max_runtime]
limit = "48h"
action = "destroy"
warn_before = "1h"
```
"""

from __future__ import annotations

from datetime import datetime, timedelta

from pydantic import Field

from watchdog_gpu.durations import Duration, format_duration
from watchdog_gpu.fleet import FleetView, InstanceView
from watchdog_gpu.model import ActionKind, Finding, Severity
from watchdog_gpu.rules.base import DestructiveRuleConfig, RuleOutcome, RuleSpec
from watchdog_gpu.rules.windows import billed_rate, running_since, spend_evidence
from watchdog_gpu.spend import instance_spend

NAME = "max_runtime"


class MaxRuntimeConfig(DestructiveRuleConfig):
    limit: Duration | None = Field(
        default=None, description="maximum running time; unset = the rule does nothing"
    )
    warn_before: Duration = Field(
        default=timedelta(hours=1), description="the warning goes out this long before the action"
    )


def evaluate(view: FleetView, now: datetime, config: MaxRuntimeConfig) -> list[Finding]:
    """One finding per instance running for longer than ``limit - warn_before``.

    Running time counts from :func:`~watchdog_gpu.rules.windows.running_since` (the later of our
    first sighting of the current run and the provider's start time: a TTL must not kill early);
    ``due_at`` is that plus ``limit``. Nothing at all when ``limit`` is unset.
    """
    return list(evaluate_timed(view, now, config).findings)


def evaluate_timed(view: FleetView, now: datetime, config: MaxRuntimeConfig) -> RuleOutcome:
    """:func:`evaluate`'s findings, and as ``next_listed`` the earliest warning point
    (``running_since + limit - warn_before``) still ahead: before it there is no finding, so
    no plan can say when the warning is due (``docs/architecture.md``, "Wakes")."""
    if config.limit is None:
        return RuleOutcome(())
    findings: list[Finding] = []
    next_listed: datetime | None = None
    for instance in view.instances.values():
        since = running_since(instance)
        if since is None:
            continue
        due_at = since + config.limit
        warn_at = due_at - config.warn_before
        if now < warn_at:
            next_listed = warn_at if next_listed is None else min(next_listed, warn_at)
            continue
        findings.append(_finding(instance, since, now, config.limit, ActionKind(config.action)))
    return RuleOutcome(tuple(findings), next_listed=next_listed)


def _finding(
    instance: InstanceView,
    since: datetime,
    now: datetime,
    limit: timedelta,
    action: ActionKind,
) -> Finding:
    latest = instance.latest
    return Finding(
        rule=NAME,
        account=latest.account,
        instance_id=latest.instance_id,
        severity=Severity.WARNING,
        action=action,
        summary=(
            f"running for {format_duration(max(now - since, timedelta(0)))}; "
            f"the limit is {format_duration(limit)}, busy or not"
        ),
        episode_started_at=since,
        due_at=since + limit,
        evidence={
            "instance_name": latest.name,
            **spend_evidence(instance_spend(instance.spans, since, now)),
            "running_since": since.isoformat(),
            "limit": format_duration(limit),
        },
        usd_per_hour_at_stake=billed_rate(instance),
    )


RULE = RuleSpec(NAME, MaxRuntimeConfig, evaluate, timed=evaluate_timed)
