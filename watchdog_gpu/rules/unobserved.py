"""unobserved: a running instance had no usable GPU data for ``after`` (blind time), or an
instance has been in a provider state watchdog-gpu cannot judge (``unknown``: one it does not
map, or one it maps there on purpose, such as Lambda's ``unhealthy``) for ``after``.

Intent: not knowing is a state. When SSH is down or the output cannot be read, the idle rule
cannot act; when the provider reports a state we do not know (``actual_status = "exploded"``),
no rule acts on the instance at all and its cost is unknown. This rule says so, so the user
knows the time-limit and budget layers are what protects the money now — or that nothing does.
Notifies only (a warning on the phone, not only a metric).

```toml
[rules.unobserved]
after = "30m"
```
"""

from __future__ import annotations

from datetime import datetime, timedelta

from pydantic import Field

from watchdog_gpu.durations import Duration, format_duration
from watchdog_gpu.fleet import FleetView, InstanceView
from watchdog_gpu.model import (
    ActionKind,
    Finding,
    InstanceSnapshot,
    InstanceState,
    ProbeOutcome,
    ProbeStatus,
    Severity,
)
from watchdog_gpu.rules.base import RuleConfig, RuleSpec
from watchdog_gpu.rules.windows import billed_rate, state_since
from watchdog_gpu.runs import running_since
from watchdog_gpu.sample_history import sample_history

NAME = "unobserved"
DETAIL_LIMIT = 160


class UnobservedConfig(RuleConfig):
    """Notify when a running instance had no usable GPU data for "after" (blind time)."""

    after: Duration = Field(
        default=timedelta(minutes=30), description="Blind time before the alert."
    )


def evaluate(view: FleetView, now: datetime, config: UnobservedConfig) -> list[Finding]:
    """One finding per running instance without usable GPU data for ``after``.

    Usable data is a GPU sample (dmon or provider API) that says busy, or idle with a real
    ``sm`` value; MIG samples without processes, failed probes and missing samples are not, nor
    is a provider's reading that says idle unless the account lets it prove idle
    (``idle_evidence = "provider_api"``, evidence.py). Blind
    time starts at the last usable sample of the current run (or when the run started);
    ``due_at`` is that plus ``after``. An instance in the ``unknown`` state is blind since it
    entered that state.
    """
    findings: list[Finding] = []
    for instance in view.instances.values():
        if instance.state is InstanceState.UNKNOWN:
            finding = _unknown_state_finding(instance, now, config)
        else:
            finding = _instance_finding(view, instance, now, config)
        if finding is not None:
            findings.append(finding)
    return findings


def _unknown_state_finding(
    instance: InstanceView, now: datetime, config: UnobservedConfig
) -> Finding | None:
    since = state_since(instance)
    if now - since < config.after:
        return None
    latest = instance.latest
    rate = billed_rate(instance)
    return Finding(
        rule=NAME,
        account=latest.account,
        instance_id=latest.instance_id,
        severity=Severity.WARNING,
        action=ActionKind.NOTIFY,
        summary=(
            f"provider state {latest.raw_state[:40]!r} for "
            f"{format_duration(max(now - since, timedelta(0)))}: watchdog-gpu cannot judge it, "
            "no rule can act on it and what it bills is unknown; check it at the provider"
        ),
        episode_started_at=since,
        due_at=since + config.after,
        evidence={
            "instance_name": latest.name,
            "provider_state": latest.raw_state[:DETAIL_LIMIT],
            "unknown_state_since": since.isoformat(),
        },
        usd_per_hour_at_stake=rate,
    )


def _instance_finding(
    view: FleetView, instance: InstanceView, now: datetime, config: UnobservedConfig
) -> Finding | None:
    if instance.state is not InstanceState.RUNNING:
        return None
    history = sample_history(instance.samples)
    evidence = view.evidence_of(instance.latest)
    last_usable = history.last_usable_at(now, readings_prove_idle=evidence.reading_proves_idle)
    blind_since = _blind_since(instance, last_usable, now, config)
    if blind_since is None:
        return None
    probes = [p for p in instance.probes if p.at <= now]
    last_probe = probes[-1] if probes else None
    # A stored outcome stands for its run of identical probes (``repeats`` of them).
    failed = sum(
        p.repeats for p in probes if p.at >= blind_since and p.status is not ProbeStatus.OK
    )
    latest = instance.latest
    why = _why_blind(last_probe, provider_reading=evidence.provider_reading, snapshot=latest)
    return Finding(
        rule=NAME,
        account=latest.account,
        instance_id=latest.instance_id,
        severity=Severity.WARNING,
        action=ActionKind.NOTIFY,
        summary=(
            f"no usable GPU data for {format_duration(max(now - blind_since, timedelta(0)))} "
            f"({why}); idle detection is blind, only time and budget limits protect it"
        ),
        episode_started_at=blind_since,
        due_at=blind_since + config.after,
        evidence={
            "instance_name": latest.name,
            "blind_since": blind_since.isoformat(),
            "last_usable_sample_at": last_usable.isoformat() if last_usable else None,
            **_probe_evidence(last_probe),
            "failed_probes": failed,
            "unknown_samples": history.unusable_count(blind_since, now),
            "has_ssh_endpoint": latest.has_ssh_endpoint,
        },
        usd_per_hour_at_stake=billed_rate(instance),
    )


def _blind_since(
    instance: InstanceView, last_usable: datetime | None, now: datetime, config: UnobservedConfig
) -> datetime | None:
    """Since when a running instance has had no usable GPU data, when that is ``after`` or
    longer; else None."""
    if last_usable is not None and now - last_usable < config.after:
        return None  # seen lately: no blind stretch to date (the run's start cannot be later)
    since = running_since(instance)
    if since is None:
        return None
    blind_since = max(since, last_usable) if last_usable is not None else since
    return blind_since if now - blind_since >= config.after else None


def _why_blind(
    last_probe: ProbeOutcome | None, *, provider_reading: bool, snapshot: InstanceSnapshot
) -> str:
    if last_probe is None and provider_reading:
        return "no SSH probe; the provider's utilisation reading proves busy, never idle"
    if last_probe is None:
        if snapshot.has_ssh_endpoint:
            return "no probe has run"
        return "no SSH endpoint and no API data"
    if last_probe.status is ProbeStatus.OK:
        return "probes work but every sample is unknown (MIG without processes?)"
    return f"last probe: {last_probe.status.value}"


def _probe_evidence(last_probe: ProbeOutcome | None) -> dict[str, str | None]:
    if last_probe is None:
        return dict.fromkeys(("last_probe_status", "last_probe_at", "last_probe_detail"))
    return {
        "last_probe_status": last_probe.status.value,
        "last_probe_at": last_probe.at.isoformat(),
        "last_probe_detail": last_probe.detail[:DETAIL_LIMIT],
    }


def cleared_reason(finding: Finding, view: FleetView) -> str:
    """A blind running instance's episode ends when usable GPU data comes back."""
    return "GPU data available again"


RULE = RuleSpec(NAME, UnobservedConfig, evaluate, cleared=cleared_reason)
