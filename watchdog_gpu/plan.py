"""The planner: findings + recorded history + safety configuration + ``now`` → decisions.

Pure: it never reads the clock, the database or a provider. For every finding it decides one
:class:`~watchdog_gpu.model.PlanStatus` and, when something is to be done, the
:class:`~watchdog_gpu.model.PlannedAction` to write to the outbox. The shell (the tick) writes
actions and notifications; the executor carries actions out.

The order of the checks is the safety model of product.md §6, most protective first:

1. Notify-only findings become ``NOTIFY`` (nothing is touched).
2. Protection (by id, name/label glob, account) is absolute: ``PROTECTED``, reported, never acted
   on — the budget rule's report about a protected instance is critical.
3. An action already in the outbox for this episode (any state) is ``IN_PROGRESS``: a replan of the
   same situation never duplicates a destroy.
4. A snooze postpones: ``SNOOZED`` while it lasts.
5. Before ``due_at - warn_before``: ``WAIT``; inside the warning window: ``WARN``; at ``due_at``:
   a candidate for ``EXECUTE`` (dry-run in monitor mode, per rule or globally) — unless the last
   poll of the instance's account failed: its recorded state is stale (the owner may have
   restarted a "stopped" instance meanwhile), so the finding is a ``WAIT`` until a fresh listing.
6. The blast-radius fuse looks at all candidates together: at most ``max_actions_per_tick`` per
   tick, ``max_actions_per_hour`` in any rolling hour, and a tick may not act on more than
   ``max_fleet_fraction`` of the billing fleet (checked only for fleets of four or more, so two
   forgotten instances of a two-instance fleet are not mistaken for a runaway policy). Beyond it
   the candidates become ``BLOCKED`` and the fuse *latches*: every later non-budget action is
   blocked too until a human runs ``watchdog-gpu fuse reset``. The reset cancels the held
   actions; decided again on fresh findings, they go through without counting against the fuse
   (a human released them). The budget emergency has its own per-tick limit and is not held by
   the latch: it exists to stop money leaking.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal

from watchdog_gpu.fleet import ActionRecord, FleetView, Protection, ProtectionKind
from watchdog_gpu.model import (
    ActionKind,
    Finding,
    InstanceSnapshot,
    InstanceState,
    PlannedAction,
    PlanStatus,
)
from watchdog_gpu.rules.base import DestructiveRuleConfig, RuleConfig
from watchdog_gpu.safety import SafetyConfig

GlobalMode = Literal["monitor", "enforce"]

BUDGET_RULE = "budget"
HOUR = timedelta(hours=1)
# Below this many billing instances the fleet-fraction check is not applied (see module doc).
FRACTION_MIN_FLEET = 4
# Statuses of an outbox action that do not count towards the hourly fuse: nothing was done.
_NOT_ACTED = frozenset({"blocked", "cancelled", "held"})


@dataclass(frozen=True, slots=True)
class PlanContext:
    """The configuration the planner applies (built once from Settings by the shell)."""

    mode: GlobalMode
    rules: Mapping[str, RuleConfig]
    safety: SafetyConfig
    protected_accounts: frozenset[str] = frozenset()  # accounts with `protect = true`
    fuse_latched: bool = False  # a previous tick tripped the fuse and no human reset it


@dataclass(frozen=True, slots=True)
class Decision:
    """What the planner decided for one finding, and why (``note`` is for humans)."""

    finding: Finding
    status: PlanStatus
    dry_run: bool
    warn_at: datetime | None = None
    action: PlannedAction | None = None
    note: str = ""
    # The action was cancelled before (a human reset the fuse that held it, or its condition
    # cleared) and is decided again now: a human already looked, so the fuse lets it through.
    released: bool = False


@dataclass(frozen=True, slots=True)
class Plan:
    decisions: tuple[Decision, ...]
    fuse_tripped: bool = False  # this tick tripped the fuse (alert critically, latch)
    fuse_reason: str = ""
    blocked: tuple[PlannedAction, ...] = field(default=())

    @property
    def actions(self) -> tuple[PlannedAction, ...]:
        """Actions to enqueue for execution now."""
        return tuple(
            decision.action
            for decision in self.decisions
            if decision.status is PlanStatus.EXECUTE and decision.action is not None
        )

    def with_status(self, status: PlanStatus) -> tuple[Decision, ...]:
        return tuple(decision for decision in self.decisions if decision.status is status)


DRY_RUN_SUFFIX = ":dry_run"


def action_key(finding: Finding, kind: ActionKind, dry_run: bool = False) -> str:
    """The idempotency key of the action an episode leads to.

    A dry-run action has its own key, so switching a rule from monitor to enforce mid-episode
    still acts: the recorded dry run does not stand in for the real action.
    """
    return f"{finding.episode_key}:{kind.value}" + (DRY_RUN_SUFFIX if dry_run else "")


def is_dry_run(rule: str, context: PlanContext) -> bool:
    """Monitor mode, globally or for this rule, means decide and record but change nothing."""
    config = context.rules.get(rule)
    mode = config.mode if config is not None else "inherit"
    effective = context.mode if mode == "inherit" else mode
    return effective == "monitor"


def warn_before(rule: str, context: PlanContext) -> timedelta:
    config = context.rules.get(rule)
    if isinstance(config, DestructiveRuleConfig):
        return config.warn_before
    return timedelta(0)


def protection_for(
    snapshot: InstanceSnapshot,
    protections: Iterable[Protection],
    context: PlanContext,
) -> str | None:
    """Why ``snapshot`` is protected (a human-readable reason), or None."""
    safety = context.safety
    if (
        snapshot.account in context.protected_accounts
        or snapshot.account in safety.protect_accounts
    ):
        return f"account {snapshot.account} is protected"
    for entry in safety.protect_ids:
        if entry in (snapshot.instance_id, f"{snapshot.account}/{snapshot.instance_id}"):
            return f"id {entry} is protected"
    names = (snapshot.name, *snapshot.labels.values())
    for pattern in safety.protect_names:
        if _glob_matches(pattern, names):
            return f"name matches protected pattern {pattern!r}"
    for protection in protections:
        if protection.account is not None and protection.account != snapshot.account:
            continue
        if protection.kind is ProtectionKind.ACCOUNT and protection.value == snapshot.account:
            return f"account {snapshot.account} is protected"
        if (
            protection.kind is ProtectionKind.INSTANCE_ID
            and protection.value == snapshot.instance_id
        ):
            return f"instance {snapshot.ref.key} is protected"
        if protection.kind is ProtectionKind.NAME_GLOB and _glob_matches(protection.value, names):
            return f"name matches protected pattern {protection.value!r}"
    return None


def _glob_matches(pattern: str, names: Iterable[str]) -> bool:
    # Case-insensitive: "*keep*" should protect "KEEP-me" too; erring towards protection is safe.
    lowered = pattern.lower()
    return any(fnmatch.fnmatchcase(name.lower(), lowered) for name in names if name)


def plan(
    findings: Sequence[Finding],
    view: FleetView,
    now: datetime,
    context: PlanContext,
) -> Plan:
    """Decide, for every finding, what happens this tick (see the module docstring)."""
    existing = {record.idempotency_key: record for record in view.recent_actions}
    decisions = [_decide(finding, view, now, context, existing) for finding in findings]
    return _apply_fuse(decisions, view, now, context)


def _decide(
    finding: Finding,
    view: FleetView,
    now: datetime,
    context: PlanContext,
    existing: Mapping[str, ActionRecord],
) -> Decision:
    dry_run = is_dry_run(finding.rule, context)
    if finding.action is ActionKind.NOTIFY or finding.instance_id is None:
        return Decision(finding, PlanStatus.NOTIFY, dry_run)
    instance = view.instances.get(f"{finding.account}/{finding.instance_id}")
    if instance is None or instance.state is InstanceState.GONE:
        return Decision(finding, PlanStatus.NOTIFY, dry_run, note="instance is gone")
    reason = protection_for(instance.latest, view.protections, context)
    if reason is not None:
        return Decision(finding, PlanStatus.PROTECTED, dry_run, note=reason)
    key = action_key(finding, finding.action, dry_run)
    record = existing.get(key)
    if record is not None and record.status != "cancelled":
        return Decision(finding, PlanStatus.IN_PROGRESS, dry_run, note=f"action {record.status}")
    warn_at = finding.due_at - warn_before(finding.rule, context)
    snooze = _active_snooze(view, finding, now)
    if snooze is not None:
        return Decision(finding, PlanStatus.SNOOZED, dry_run, warn_at, note=snooze)
    if now < warn_at:
        return Decision(finding, PlanStatus.WAIT, dry_run, warn_at)
    if now < finding.due_at:
        return Decision(finding, PlanStatus.WARN, dry_run, warn_at)
    stale = _stale_listing(view, finding.account)
    if stale is not None:
        return Decision(finding, PlanStatus.WAIT, dry_run, warn_at, note=stale)
    action = PlannedAction(
        idempotency_key=key,
        account=finding.account,
        instance_id=finding.instance_id,
        rule=finding.rule,
        kind=finding.action,
        dry_run=dry_run,
        reason=finding.summary,
        planned_at=now,
        evidence=finding.evidence,
        usd_per_hour_at_stake=finding.usd_per_hour_at_stake,
    )
    released = record is not None and record.status == "cancelled"
    return Decision(finding, PlanStatus.EXECUTE, dry_run, warn_at, action, released=released)


def _stale_listing(view: FleetView, account: str) -> str | None:
    """Why the recorded instance states of ``account`` cannot be acted on now, or None.

    After a failed poll the view still holds the last good listing. Acting on it could destroy
    an instance its owner restarted during the outage — and a provider answering garbage may
    still carry the call out — so every action of the account waits for a listing that works.
    """
    polled = view.accounts.get(account)
    if polled is None or polled.last_poll_error_kind is None:
        return None
    return (
        f"the last listing of account {account} failed ({polled.last_poll_error_kind}): "
        "its instance states are stale; waiting for a fresh listing"
    )


def _active_snooze(view: FleetView, finding: Finding, now: datetime) -> str | None:
    for snooze in view.snoozes:
        same = snooze.account == finding.account and snooze.instance_id == finding.instance_id
        if same and snooze.until > now:
            return f"snoozed until {snooze.until.isoformat()}"
    return None


def _apply_fuse(
    decisions: list[Decision],
    view: FleetView,
    now: datetime,
    context: PlanContext,
) -> Plan:
    """Hold back executions beyond the blast-radius limits (see the module docstring)."""
    safety = context.safety
    budget_allowance = safety.budget_emergency_max_actions_per_tick
    per_tick_allowance = safety.max_actions_per_tick
    acted_last_hour = sum(
        1
        for record in view.recent_actions
        if record.created_at > now - HOUR and record.status not in _NOT_ACTED
    )
    hour_allowance = max(0, safety.max_actions_per_hour - acted_last_hour)
    candidates = [d for d in decisions if d.status is PlanStatus.EXECUTE]
    ordinary = [d for d in candidates if d.finding.rule != BUDGET_RULE and not d.released]
    fleet = _billing_fleet_size(view)
    fraction_limit = (
        int(safety.max_fleet_fraction * fleet) if fleet >= FRACTION_MIN_FLEET else len(ordinary)
    )
    ordinary_allowance = min(per_tick_allowance, hour_allowance, max(fraction_limit, 1))
    reasons: list[str] = []
    if context.fuse_latched and ordinary:
        reasons.append("the fuse tripped earlier and has not been reset")
        ordinary_allowance = 0
    elif len(ordinary) > ordinary_allowance:
        reasons.append(
            f"{len(ordinary)} actions due this tick; limits: {per_tick_allowance} per tick, "
            f"{hour_allowance} more this hour, {fraction_limit} of a billing fleet of {fleet}"
        )
    result: list[Decision] = []
    blocked: list[PlannedAction] = []
    ordinary_used = budget_used = 0
    for decision in decisions:
        if decision.status is not PlanStatus.EXECUTE or decision.action is None:
            result.append(decision)
            continue
        is_budget = decision.finding.rule == BUDGET_RULE
        if decision.released and not is_budget:
            result.append(decision)
        elif is_budget and budget_used < budget_allowance:
            budget_used += 1
            result.append(decision)
        elif not is_budget and ordinary_used < ordinary_allowance:
            ordinary_used += 1
            result.append(decision)
        else:
            if is_budget:
                reasons.append(f"budget emergency limit {budget_allowance} per tick reached")
            blocked.append(decision.action)
            result.append(_blocked(decision))
    tripped = bool(blocked) and not context.fuse_latched
    return Plan(tuple(result), tripped, "; ".join(dict.fromkeys(reasons)), tuple(blocked))


def _blocked(decision: Decision) -> Decision:
    return Decision(
        decision.finding,
        PlanStatus.BLOCKED,
        decision.dry_run,
        decision.warn_at,
        decision.action,
        note="held by the blast-radius fuse",
    )


def _billing_fleet_size(view: FleetView) -> int:
    billing = (InstanceState.STARTING, InstanceState.RUNNING, InstanceState.PAUSED)
    return sum(
        1
        for instance in view.instances.values()
        if instance.state in billing or instance.state is InstanceState.STOPPED
    )
