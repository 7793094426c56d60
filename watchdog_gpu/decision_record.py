"""What the tick writes beside a decision: the message it sends and its audit event's data
(pure; the tick records both in the decision's transaction)."""

from __future__ import annotations

from datetime import datetime

from watchdog_gpu.model import PlannedNotification, PlanStatus
from watchdog_gpu.notify.render import (
    ActionOutcome,
    render_action_result,
    render_alert,
    render_warning,
)
from watchdog_gpu.plan import Decision, protected_report


def decision_message(decision: Decision, now: datetime) -> PlannedNotification | None:
    """The message a decision sends (None: it sends none)."""
    finding, action, status = decision.finding, decision.action, decision.status
    if status is PlanStatus.WARN and decision.warning_key is not None:
        return render_warning(
            finding,
            due_at=decision.due_at or finding.due_at,
            action=finding.action,
            dry_run=decision.dry_run,
            now=now,
            key=decision.warning_key,
        )
    if status is PlanStatus.NOTIFY:
        return render_alert(finding, now=now, dry_run=decision.dry_run)
    if status is PlanStatus.PROTECTED:
        return render_alert(protected_report(finding), now=now, protected=True)
    if status is PlanStatus.BLOCKED and action is not None:
        return render_action_result(
            action, outcome=ActionOutcome.BLOCKED, now=now, episode_key=finding.episode_key
        )
    return None


def audit_data(decision: Decision) -> dict[str, str | int | float | bool | None]:
    finding = decision.finding
    data: dict[str, str | int | float | bool | None] = {
        "status": decision.status.value,
        "dry_run": decision.dry_run,
        "episode": finding.episode_key,
        "due_at": finding.due_at.isoformat(),
        "usd_per_hour": finding.usd_per_hour_at_stake,
    }
    if decision.note:
        data["note"] = decision.note
    for name, value in finding.evidence.items():
        data[f"evidence.{name}"] = value
    return data
