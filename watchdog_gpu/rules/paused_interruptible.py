"""paused_interruptible: an interruptible (bid/spot) instance paused for longer than ``after``.

Intent: an outbid Vast interruptible or a preempted RunPod spot pod has lost its GPU but keeps its
disk billing, and nothing resumes it for you. Destroy it once it has been paused for ``after``.

```toml
[rules.paused_interruptible]
after = "30m"
action = "destroy"
warn_before = "10m"
```
"""

from __future__ import annotations

from datetime import datetime, timedelta

from pydantic import Field

from watchdog_gpu.durations import Duration, format_duration
from watchdog_gpu.fleet import FleetView
from watchdog_gpu.model import ActionKind, Finding, InstanceState, Severity
from watchdog_gpu.rules.base import DestructiveRuleConfig, RuleSpec
from watchdog_gpu.rules.windows import billed_rate, spend_evidence, state_since
from watchdog_gpu.spend import instance_spend

NAME = "paused_interruptible"


class PausedInterruptibleConfig(DestructiveRuleConfig):
    """An interruptible (bid/spot) instance paused (outbid, preempted) for longer than "after".
    Only where the provider shows it lost its GPU against its user's wish (a Vast bid instance
    that loads is starting; a stop Vast or RunPod cannot tell from an outbid, or one Vast made
    itself at a zero balance or a host fault, is a stopped disk: docs/providers.md).
    """

    after: Duration = Field(
        default=timedelta(minutes=30), description="How long an instance may stay paused."
    )


def evaluate(view: FleetView, now: datetime, config: PausedInterruptibleConfig) -> list[Finding]:
    """One finding per paused interruptible instance, from the moment it is seen paused.

    The episode starts when the instance entered ``paused`` (so a restart of the watchdog keeps
    the timer); ``due_at`` is that plus ``after``. The planner decides when to warn and act.
    """
    findings: list[Finding] = []
    for instance in view.instances.values():
        if instance.state is not InstanceState.PAUSED or not instance.latest.interruptible:
            continue
        since = state_since(instance)
        latest = instance.latest
        findings.append(
            Finding(
                rule=NAME,
                account=latest.account,
                instance_id=latest.instance_id,
                severity=Severity.WARNING,
                action=ActionKind(config.action),
                summary=(
                    f"interruptible instance paused (outbid or preempted) for "
                    f"{format_duration(max(now - since, timedelta(0)))}; "
                    "its GPU is gone but its disk keeps billing"
                ),
                episode_started_at=since,
                due_at=since + config.after,
                evidence={
                    "instance_name": latest.name,
                    **spend_evidence(instance_spend(instance, since, now)),
                    "paused_since": since.isoformat(),
                    "raw_state": latest.raw_state,
                    "disk_gb": latest.disk_gb,
                    "storage_usd_per_hour": latest.storage_usd_per_hour,
                },
                usd_per_hour_at_stake=billed_rate(instance),
            )
        )
    return findings


RULE = RuleSpec(NAME, PausedInterruptibleConfig, evaluate)
