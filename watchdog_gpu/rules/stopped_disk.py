"""stopped_disk: a stopped instance whose disk keeps billing for longer than ``after``.

Intent: stop is not destroy. A stopped instance bills its disk (RunPod doubles the volume rate);
a few days of a stopped 200 GB disk cost more than the compute it served.

```toml
[rules.stopped_disk]
after = "24h"
action = "destroy"
warn_before = "1h"
```
"""

from __future__ import annotations

from datetime import datetime, timedelta

from pydantic import Field, field_validator

from watchdog_gpu.durations import Duration, format_duration
from watchdog_gpu.fleet import FleetView
from watchdog_gpu.model import ActionKind, Finding, InstanceState, Severity
from watchdog_gpu.rules.base import DestructiveRuleConfig, RuleSpec
from watchdog_gpu.rules.windows import billed_rate, spend_evidence, state_since
from watchdog_gpu.spend import instance_spend

NAME = "stopped_disk"


class StoppedDiskConfig(DestructiveRuleConfig):
    """A stopped instance whose disk keeps billing for longer than "after". action is "destroy" or
    "notify": "stop" is refused (the instance is stopped already; its disk would keep billing).
    """

    after: Duration = Field(
        default=timedelta(hours=24),
        description="How long a stopped instance may keep billing its disk.",
    )
    warn_before: Duration = Field(
        default=timedelta(hours=1), description="The warning goes out this long before the action."
    )

    @field_validator("action")
    @classmethod
    def _stop_keeps_the_disk(cls, value: str) -> str:
        # The instance is stopped already: "stop" would be verified at once while its disk
        # keeps billing, which is the very thing this rule is for.
        if value == "stop":
            raise ValueError(
                'cannot be "stop": the instance is already stopped and its disk keeps billing; '
                'use "destroy" (or "notify" to be told only)'
            )
        return value


def evaluate(view: FleetView, now: datetime, config: StoppedDiskConfig) -> list[Finding]:
    """One finding per stopped instance whose disk bills (or whose storage rate is unknown),
    from the moment it is seen stopped; ``due_at`` is the stop plus ``after``.

    A stopped instance whose provider reports a storage rate of exactly $0 bills nothing and is
    left alone.
    """
    findings: list[Finding] = []
    for instance in view.instances.values():
        latest = instance.latest
        if instance.state is not InstanceState.STOPPED or latest.storage_usd_per_hour == 0:
            continue
        since = state_since(instance)
        spent = instance_spend(instance, since, now)
        rate = latest.storage_usd_per_hour
        rate_text = f"${rate:.3f}/h" if rate is not None else "an unknown rate"
        findings.append(
            Finding(
                rule=NAME,
                account=latest.account,
                instance_id=latest.instance_id,
                severity=Severity.WARNING,
                action=ActionKind(config.action),
                summary=(
                    f"stopped for {format_duration(max(now - since, timedelta(0)))}; "
                    f"its disk keeps billing at {rate_text}"
                ),
                episode_started_at=since,
                due_at=since + config.after,
                evidence={
                    "instance_name": latest.name,
                    **spend_evidence(spent),
                    "stopped_since": since.isoformat(),
                    "raw_state": latest.raw_state,
                    "disk_gb": latest.disk_gb,
                    "storage_usd_per_hour": rate,
                },
                usd_per_hour_at_stake=billed_rate(instance),
            )
        )
    return findings


RULE = RuleSpec(NAME, StoppedDiskConfig, evaluate)
