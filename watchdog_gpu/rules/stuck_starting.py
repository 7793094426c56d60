"""stuck_starting: an instance that bills compute without running for longer than ``after``.

Intent: billing outside ``running`` must not be invisible. A RunPod pod listed ``RUNNING`` whose
container never comes up (``runtime: null``), a pod stuck ``RESTARTING``, a Vast instance stuck
``rebooting``: each is rented and billed at its compute rate, yet no GPU rule can see it (there is
no GPU to sample and it is not running). States whose compute the provider documents as not billed
yet (Vast ``created``/``loading``/``scheduling``: "GPU charges begin when status reaches running";
Lambda ``booting``: billed once health checks pass) bill a $0 compute rate and are left alone. An
unknown compute rate is not free: it is alerted too. Notifies only: a slow image pull is not a
reason to destroy anything, but the owner must know what it costs.

```toml
[rules.stuck_starting]
after = "15m"
```
"""

from __future__ import annotations

from datetime import datetime, timedelta

from pydantic import Field

from watchdog_gpu.durations import Duration, format_duration
from watchdog_gpu.fleet import FleetView, InstanceView
from watchdog_gpu.model import ActionKind, Finding, InstanceState, Severity
from watchdog_gpu.rules.base import RuleConfig, RuleOutcome, RuleSpec
from watchdog_gpu.rules.windows import billed_rate, spend_evidence, state_since
from watchdog_gpu.spend import instance_spend

NAME = "stuck_starting"


class StuckStartingConfig(RuleConfig):
    """Notify when an instance bills compute without running for longer than "after": a RunPod pod
    RUNNING whose container never comes up (or stuck RESTARTING), a Vast instance stuck
    rebooting. States whose compute does not bill yet (Vast loading, Lambda booting) are left
    alone.
    """

    after: Duration = Field(
        default=timedelta(minutes=15),
        description="How long an instance may bill compute while not running before alerting.",
    )


def bills_compute_while_starting(instance: InstanceView) -> bool:
    """Is the instance starting (not running) while its compute bills, or may bill (rate
    unknown)? The parsers give a starting state's compute rate as the provider bills it."""
    latest = instance.latest
    return instance.state is InstanceState.STARTING and latest.compute_usd_per_hour != 0


def evaluate(view: FleetView, now: datetime, config: StuckStartingConfig) -> list[Finding]:
    """One finding per instance that has billed compute outside ``running`` for ``after``."""
    return list(evaluate_timed(view, now, config).findings)


def evaluate_timed(view: FleetView, now: datetime, config: StuckStartingConfig) -> RuleOutcome:
    """:func:`evaluate`'s findings, and as ``next_listed`` the earliest limit still ahead (the
    state is listed state: a wake then decides on a fresh listing)."""
    findings: list[Finding] = []
    next_listed: datetime | None = None
    for instance in view.instances.values():
        if not bills_compute_while_starting(instance):
            continue
        since = state_since(instance)
        due_at = since + config.after
        if now < due_at:
            next_listed = due_at if next_listed is None else min(next_listed, due_at)
            continue
        findings.append(_finding(instance, since, now, config))
    return RuleOutcome(tuple(findings), next_listed=next_listed)


def _finding(
    instance: InstanceView, since: datetime, now: datetime, config: StuckStartingConfig
) -> Finding:
    latest = instance.latest
    rate = billed_rate(instance)
    rate_text = f"${rate:.3f}/h" if rate is not None else "an unknown rate"
    return Finding(
        rule=NAME,
        account=latest.account,
        instance_id=latest.instance_id,
        severity=Severity.WARNING,
        action=ActionKind.NOTIFY,
        summary=(
            f"billing {rate_text} for {format_duration(max(now - since, timedelta(0)))} "
            f"without running (listed {latest.raw_state[:40]!r}); no idle or runtime rule "
            "sees it until it runs: check it at the provider"
        ),
        episode_started_at=since,
        due_at=since + config.after,
        evidence={
            "instance_name": latest.name,
            **spend_evidence(instance_spend(instance, since, now)),
            "provider_state": latest.raw_state[:160],
            "not_running_since": since.isoformat(),
            "compute_usd_per_hour": latest.compute_usd_per_hour,
        },
        usd_per_hour_at_stake=rate,
    )


def cleared_reason(finding: Finding, view: FleetView) -> str:
    """The episode ends when the instance runs (or stops, or is gone: the generic reasons)."""
    return "instance is running now"


RULE = RuleSpec(NAME, StuckStartingConfig, evaluate, cleared=cleared_reason, timed=evaluate_timed)
