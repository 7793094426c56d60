"""max_runtime: a hard TTL on how long an instance may run, busy or not.

Intent: the last line of defence when the GPU signal is missing or lies (a hung NCCL job at 100 %).
Off unless configured, because a TTL can kill a busy job.

The limit is on the billed time of the current run (:func:`watchdog_gpu.runs.current_run`): from
its first starting or running listing, start-up and reboot listings that bill included, a
heartbeat blip inside the run included (it is the same run, and it bills), only start-up that bills
no compute (Vast ``loading``) left out. A host that blips, or sits starting, is still capped at
``limit``; a real stop/start or reboot starts a new run.

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
from watchdog_gpu.rules.windows import billed_rate, spend_evidence
from watchdog_gpu.runs import Run, current_run
from watchdog_gpu.spend import instance_spend

NAME = "max_runtime"


class MaxRuntimeConfig(DestructiveRuleConfig):
    """A hard limit on running time, busy or not. Off unless "limit" is set (it can kill a busy
    job).
    """

    limit: Duration | None = Field(
        default=None,
        description="Maximum running time; not set: the rule does nothing.",
        examples=["48h"],
    )
    warn_before: Duration = Field(
        default=timedelta(hours=1), description="The warning goes out this long before the action."
    )


def evaluate(view: FleetView, now: datetime, config: MaxRuntimeConfig) -> list[Finding]:
    """One finding per starting or running instance whose run billed for longer than
    ``limit - warn_before``.

    ``due_at`` is when the run's billed time reaches ``limit`` (its start plus ``limit`` plus the
    start-up that billed nothing); the episode is the run's start. Nothing at all when ``limit``
    is unset.
    """
    return list(evaluate_timed(view, now, config).findings)


def evaluate_timed(view: FleetView, now: datetime, config: MaxRuntimeConfig) -> RuleOutcome:
    """:func:`evaluate`'s findings, and as ``next_listed`` the earliest warning point
    (``due_at - warn_before``) still ahead: before it there is no finding, so
    no plan can say when the warning is due (``docs/architecture.md``, "Wakes")."""
    if config.limit is None:
        return RuleOutcome(())
    findings: list[Finding] = []
    next_listed: datetime | None = None
    for instance in view.instances.values():
        run = current_run(instance)
        if run is None or run.billed_seconds(now) <= 0:
            continue  # nothing billed yet (Vast loading, Lambda booting): nothing to cap
        due_at = run.started + config.limit + timedelta(seconds=run.unbilled_seconds(now))
        warn_at = due_at - config.warn_before
        if now < warn_at:
            next_listed = warn_at if next_listed is None else min(next_listed, warn_at)
            continue
        findings.append(
            _finding(instance, run, now, due_at=due_at, limit=config.limit, action=config.action)
        )
    return RuleOutcome(tuple(findings), next_listed=next_listed)


def _finding(
    instance: InstanceView,
    run: Run,
    now: datetime,
    *,
    due_at: datetime,
    limit: timedelta,
    action: str,
) -> Finding:
    latest = instance.latest
    since = run.started
    billed = timedelta(seconds=max(run.billed_seconds(now), 0.0))
    return Finding(
        rule=NAME,
        account=latest.account,
        instance_id=latest.instance_id,
        severity=Severity.WARNING,
        action=ActionKind(action),
        summary=(
            f"running for {format_duration(billed)} (billed time of this run); "
            f"the limit is {format_duration(limit)}, busy or not"
        ),
        episode_started_at=since,
        due_at=due_at,
        evidence={
            "instance_name": latest.name,
            **spend_evidence(instance_spend(instance, since, now)),
            "running_since": since.isoformat(),
            "billed_seconds": round(billed.total_seconds()),
            "limit": format_duration(limit),
        },
        usd_per_hour_at_stake=billed_rate(instance),
    )


RULE = RuleSpec(NAME, MaxRuntimeConfig, evaluate, timed=evaluate_timed)
