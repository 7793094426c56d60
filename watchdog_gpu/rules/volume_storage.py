"""volume_storage: a detached volume or filesystem has billed for more than ``after``.

Intent: network volumes and Lambda filesystems bill on their own once no running instance uses
them — every pod that names a RunPod network volume stopped or gone (a stopped pod does not use
its volume: docs/providers.md, "RunPod"). Notifies only: a volume holds data, and deleting data
is a human decision.

```toml
[rules.volume_storage]
after = "7d"
```
"""

from __future__ import annotations

from datetime import datetime, timedelta

from pydantic import Field

from watchdog_gpu.durations import Duration, format_duration
from watchdog_gpu.fleet import FleetView, VolumeView
from watchdog_gpu.model import ActionKind, Finding, Severity
from watchdog_gpu.rules.base import RuleConfig, RuleSpec

NAME = "volume_storage"


class VolumeStorageConfig(RuleConfig):
    """Notify when a detached volume or filesystem has billed for longer than "after"."""

    after: Duration = Field(
        default=timedelta(days=7),
        description="How long a detached volume may bill before alerting.",
    )


def evaluate(view: FleetView, now: datetime, config: VolumeStorageConfig) -> list[Finding]:
    """One finding per volume detached for at least ``after`` (free ones excepted).

    The episode starts when the volume was first seen detached; each volume is its own topic,
    so two volumes detached in the same poll get their own messages.
    """
    findings: list[Finding] = []
    for volume in view.volumes:
        since = volume.detached_since
        if since is None or volume.latest.usd_per_hour == 0 or now - since < config.after:
            continue
        findings.append(_finding(volume, since, now, config))
    return findings


def _finding(
    volume: VolumeView, since: datetime, now: datetime, config: VolumeStorageConfig
) -> Finding:
    latest = volume.latest
    rate = latest.usd_per_hour
    hours = max(now - since, timedelta(0)).total_seconds() / 3600
    size = f"{latest.size_gb:g} GB" if latest.size_gb is not None else "unknown size"
    cost = f"${rate:.3f}/h" if rate is not None else "an unknown rate"
    return Finding(
        rule=NAME,
        account=latest.account,
        instance_id=None,
        severity=Severity.WARNING,
        action=ActionKind.NOTIFY,
        summary=(
            f"volume {latest.name} ({size}) detached for {format_duration(now - since)}, "
            f"billing at {cost}; delete it if its data is no longer needed"
        ),
        episode_started_at=since,
        due_at=since + config.after,
        evidence={
            "volume_id": latest.volume_id,
            "volume_name": latest.name,
            "size_gb": latest.size_gb,
            "usd_per_hour": rate,
            # The rate is the latest one seen, applied to the whole detached time: an estimate.
            "usd_so_far": round(rate * hours, 4) if rate is not None else None,
            "detached_since": since.isoformat(),
        },
        usd_per_hour_at_stake=rate,
        topic=f"volume:{latest.volume_id}",
    )


RULE = RuleSpec(NAME, VolumeStorageConfig, evaluate)
