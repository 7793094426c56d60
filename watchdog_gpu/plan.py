"""The planner: findings + recorded history + safety configuration + ``now`` → decisions.

Pure: it never reads the clock, the database or a provider. For every finding it decides one
:class:`~watchdog_gpu.model.PlanStatus` and, when something is to be done, the
:class:`~watchdog_gpu.model.PlannedAction` for the outbox. The order of its checks is the safety
model: ``docs/safety.md``, "The planner's order", "Warnings" and "Fuse" (the fuse's queue,
:class:`_Queue`: "Which go ahead first").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Literal

from watchdog_gpu.fleet import ActionRecord, FleetView, InstanceView
from watchdog_gpu.fuse_count import (
    FRACTION_MIN_FLEET,
    HOUR,
    acted_in_last_hour,
    acted_since,
    billing_fleet_size,
    emergency_rules,
)
from watchdog_gpu.model import (
    ActionKind,
    ActionStatus,
    Finding,
    InstanceState,
    PlannedAction,
    PlanStatus,
    Severity,
)
from watchdog_gpu.notices import (
    DRY_RUN,
    WARNING,
    ActionKey,
    EpisodeNotices,
    index_notices,
    next_notice_key,
)
from watchdog_gpu.protection import protection_for
from watchdog_gpu.sample_history import sample_history

if TYPE_CHECKING:  # pydantic models: ≈ 0.3 s to build, which `status --db` does without
    from watchdog_gpu.rules.base import RuleConfig
    from watchdog_gpu.safety import SafetyConfig

GlobalMode = Literal["monitor", "enforce"]

# The fuse lets the longest overdue go first in steps of this (docs/safety.md, "Fuse"): the
# rolling window of ``max_actions_per_hour``, in which a backlog held by that limit drains.
AGE_STEP = HOUR


@dataclass(frozen=True, slots=True)
class PlanContext:
    """The configuration the planner applies (built once from Settings by the shell)."""

    mode: GlobalMode
    rules: Mapping[str, RuleConfig]
    safety: SafetyConfig
    protected_accounts: frozenset[str] = frozenset()  # accounts with `protect = true`
    fuse_latched: bool = False  # a previous tick tripped the fuse and no human reset it
    # "A tick ago": busy samples this recent contradict an idle rule; a deferral wave whose
    # last deferral is this recent continues (announced once).
    recent: timedelta = timedelta(minutes=3)
    # The evaluation interval (``poll_interval``): how far a wake's fuse looks ahead.
    tick_interval: timedelta = timedelta(seconds=60)


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
    # When the action is due: the rule's due time, or later when the standing warning is
    # younger than ``warn_before`` (None for notify-only findings).
    due_at: datetime | None = None
    # The key of a new warning to write this tick (none stands for the episode), else None.
    warning_key: str | None = None


@dataclass(frozen=True, slots=True)
class Plan:
    decisions: tuple[Decision, ...]
    fuse_tripped: bool = False  # this tick tripped the fuse (alert critically, latch)
    fuse_reason: str = ""
    blocked: tuple[PlannedAction, ...] = field(default=())
    # Rate limits held these until a later tick; ``announce_deferral``: a new wave (one
    # notification says so), False while a wave continues.
    deferred: tuple[PlannedAction, ...] = field(default=())
    deferral_reason: str = ""
    announce_deferral: bool = False

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

    def next_due(self, now: datetime, rules: frozenset[str] | None = None) -> datetime | None:
        """The earliest instant after ``now`` at which a decision of ``rules`` (None: the
        :func:`idle_rules`) changes by time
        alone while its finding holds: a waiting episode's warning time, a warned one's due
        time (later than the rule's own when the warning went out late). With the rules' own
        ``next_change`` this is when the daemon evaluates again (docs/architecture.md, "Wakes")."""
        rules = idle_rules() if rules is None else rules
        earliest: datetime | None = None
        for decision in self.decisions:
            if decision.finding.rule not in rules:
                continue
            if decision.status is PlanStatus.WAIT:
                instant = decision.warn_at
            elif decision.status is PlanStatus.WARN:
                instant = decision.due_at
            else:
                continue
            if instant is not None and instant > now and (earliest is None or instant < earliest):
                earliest = instant
        return earliest

    def next_listed_due(self, now: datetime) -> datetime | None:
        """:meth:`next_due` for the rules that judge by listed state (all but the idle ones):
        a wake for it lists the accounts first, since without a listing at or after a due time
        the action waits (docs/safety.md, "Warnings")."""
        listed = frozenset(d.finding.rule for d in self.decisions) - idle_rules()
        return self.next_due(now, listed) if listed else None


def idle_rules() -> frozenset[str]:
    """The rules that fire only on observed GPU idleness (``RuleSpec.observes_idle``): they
    judge by the streamed rows a wake takes, and a GPU seen busy a tick ago contradicts them."""
    # Imported on use: ``status --db`` imports the planner but builds no rule's config model.
    from watchdog_gpu.rules.registry import idle_rules as registered

    return registered()


DRY_RUN_SUFFIX = f":{DRY_RUN}"


def action_key(finding: Finding, kind: ActionKind, dry_run: bool = False) -> str:
    """The idempotency key of the action an episode leads to.

    A dry-run action has its own key, so switching a rule from monitor to enforce mid-episode
    still acts: the recorded dry run does not stand in for the real action.
    """
    return ActionKey(finding.episode_key, kind, dry_run).format()


def is_dry_run(rule: str, context: PlanContext) -> bool:
    """Monitor mode, globally or for this rule, means decide and record but change nothing."""
    config = context.rules.get(rule)
    mode = config.mode if config is not None else "inherit"
    effective = context.mode if mode == "inherit" else mode
    return effective == "monitor"


def warn_before(rule: str, context: PlanContext) -> timedelta:
    """How long a standing warning must precede the rule's actions (zero: none is needed, e.g.
    the budget rule with ``skip_grace``)."""
    config = context.rules.get(rule)
    if config is None or getattr(config, "skip_grace", False):
        return timedelta(0)
    from watchdog_gpu.rules.base import DestructiveRuleConfig  # loaded with any rule config

    if isinstance(config, DestructiveRuleConfig):
        return config.warn_before
    return timedelta(0)


def plan(
    findings: Sequence[Finding],
    view: FleetView,
    now: datetime,
    context: PlanContext,
    *,
    tick_started: datetime | None = None,
) -> Plan:
    """Decide, for every finding, what happens this tick (docs/safety.md, "The planner's order").

    ``tick_started``: for a wake between two ticks (``wake.py``), when the tick it follows
    evaluated: the actions since then count against ``max_actions_per_tick`` (a wake shares its
    tick's allowance: wakes must not multiply the fuse's per-tick limit)."""
    existing = {record.idempotency_key: record for record in view.recent_actions}
    notices = index_notices(view.notice_times)
    wake = tick_started is not None
    idle = idle_rules()
    decisions = [
        _decide(finding, view, now, context, existing, notices=notices, wake=wake, idle=idle)
        for finding in findings
    ]
    return _apply_fuse(decisions, view, now, context, tick_started)


def due_time(
    due_at: datetime, notices: EpisodeNotices | None, lead: timedelta, now: datetime
) -> tuple[datetime, datetime | None]:
    """When an episode's action is due, and since when its warning stands (None: none does).

    Due at the rule's ``due_at``, but never sooner than ``lead`` after the standing warning;
    without one, the warning still has to go out (now at the earliest), so the action is at
    least a full lead away from ``now``."""
    standing = notices.standing_since if notices is not None else None
    if standing is not None:
        return max(due_at, standing + lead), standing
    return (max(due_at, now + lead) if lead > timedelta(0) else due_at), None


def standing_action(
    episode_key: str, kind: ActionKind, dry_run: bool, actions: Mapping[str, ActionRecord]
) -> ActionRecord | None:
    """The outbox action that stands for an episode's stop/destroy in this mode (a dry run's
    record for a monitor-mode rule): under way or carried out, so nothing is due. None when
    the action is still to be decided: none recorded, or the recorded one was cancelled
    (decided again). ``actions``: the view's actions by idempotency key."""
    record = actions.get(ActionKey(episode_key, kind, dry_run).format())
    return record if record is not None and record.status != ActionStatus.CANCELLED else None


def action_due(
    episode_key: str,
    kind: ActionKind,
    due_at: datetime,
    *,
    dry_run: bool | None,
    lead: timedelta,
    actions: Mapping[str, ActionRecord],
    notices: Mapping[str, EpisodeNotices],
    now: datetime,
) -> datetime | None:
    """When the planner will carry out an episode's stop/destroy as of ``now`` (what ``status``
    shows): not before a standing warning is ``lead`` old; None when its action stands in the
    outbox already (:func:`standing_action`: under way, carried out, or recorded as a dry run).
    ``notices``: ``index_notices(view.notice_times)``, built once by the caller. ``dry_run``
    None: the mode is not known (no configuration read), so either record stands for it."""
    modes = (False, True) if dry_run is None else (dry_run,)
    if any(standing_action(episode_key, kind, mode, actions) is not None for mode in modes):
        return None
    return due_time(due_at, notices.get(episode_key), lead, now)[0]


def _decide(
    finding: Finding,
    view: FleetView,
    now: datetime,
    context: PlanContext,
    existing: Mapping[str, ActionRecord],
    *,
    notices: Mapping[str, EpisodeNotices],
    wake: bool = False,
    idle: frozenset[str] = frozenset(),
) -> Decision:
    dry_run = is_dry_run(finding.rule, context)
    settled = _settled(finding, view, context, existing, dry_run)
    if settled is not None:
        return settled
    lead = warn_before(finding.rule, context)
    due, standing = due_time(finding.due_at, notices.get(finding.episode_key), lead, now)
    warn_at = due - lead
    snooze = _active_snooze(view, finding, now)
    if snooze is not None:
        return Decision(finding, PlanStatus.SNOOZED, dry_run, warn_at, note=snooze, due_at=due)
    if now < warn_at:
        return Decision(finding, PlanStatus.WAIT, dry_run, warn_at, due_at=due)
    if standing is None and lead > timedelta(0):
        # No warning stands (never sent, or withdrawn): send one now, act a full lead later.
        warning = next_notice_key(finding.episode_key, WARNING, view.notice_times, now)
        return Decision(finding, PlanStatus.WARN, dry_run, now, due_at=due, warning_key=warning)
    if now < due:
        return Decision(finding, PlanStatus.WARN, dry_run, warn_at, due_at=due)
    stale = _waits_for_listing(view, finding, due, listed_state=wake and finding.rule not in idle)
    if stale is not None:
        return Decision(finding, PlanStatus.WAIT, dry_run, warn_at, note=stale, due_at=due)
    return _execute(finding, dry_run, now, existing, warn_at=warn_at, due=due)


def _settled(
    finding: Finding,
    view: FleetView,
    context: PlanContext,
    existing: Mapping[str, ActionRecord],
    dry_run: bool,
) -> Decision | None:
    """The decision that does not depend on time: nothing to act on (a notice, a gone
    instance), a protected instance, or an action already standing; None: time decides."""
    if finding.action is ActionKind.NOTIFY or finding.instance_id is None:
        return Decision(finding, PlanStatus.NOTIFY, dry_run)
    instance = view.instances.get(f"{finding.account}/{finding.instance_id}")
    if instance is None or instance.state is InstanceState.GONE:
        return Decision(finding, PlanStatus.NOTIFY, dry_run, note="instance is gone")
    reason = protection_for(instance.latest, view.protections, context)
    if reason is not None:
        return Decision(finding, PlanStatus.PROTECTED, dry_run, note=reason)
    recorded = standing_action(finding.episode_key, finding.action, dry_run, existing)
    if recorded is not None:
        return Decision(finding, PlanStatus.IN_PROGRESS, dry_run, note=f"action {recorded.status}")
    return None


def _execute(
    finding: Finding,
    dry_run: bool,
    now: datetime,
    existing: Mapping[str, ActionRecord],
    *,
    warn_at: datetime,
    due: datetime,
) -> Decision:
    """The decision to carry out ``finding``'s action now."""
    assert finding.instance_id is not None  # a notice without an instance was settled
    key = action_key(finding, finding.action, dry_run)
    action = PlannedAction(
        idempotency_key=key,
        account=finding.account,
        instance_id=finding.instance_id,
        rule=finding.rule,
        kind=finding.action,
        dry_run=dry_run,
        reason=finding.summary,
        planned_at=now,
        episode_key=finding.episode_key,
        evidence=finding.evidence,
        usd_per_hour_at_stake=finding.usd_per_hour_at_stake,
    )
    released = key in existing  # recorded, and not standing: cancelled, decided again
    return Decision(
        finding, PlanStatus.EXECUTE, dry_run, warn_at, action, released=released, due_at=due
    )


def _waits_for_listing(
    view: FleetView, finding: Finding, due: datetime, *, listed_state: bool
) -> str | None:
    """Why a due action waits for a fresh listing of its account, or None: the last one failed,
    or (``listed_state``: a wake, a rule judging by listed state) it predates the due time."""
    stale = _stale_listing(view, finding.account)
    if stale is None and listed_state:
        return _listed_before(view, finding.account, due)
    return stale


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


def _listed_before(view: FleetView, account: str, due: datetime) -> str | None:
    """At a wake: why a rule resting on listed state cannot act on ``account`` yet, or None.

    A wake polls no provider: a listing older than the due time is no evidence for it (the owner
    may have restarted, stopped or resumed the instance since), so the action waits for the next
    tick's listing. The idle rules judge by the streamed rows a wake takes."""
    polled = view.accounts.get(account)
    listed = polled.last_poll_ok_at if polled is not None else None
    if listed is not None and listed >= due:
        return None
    when = listed.isoformat() if listed is not None else "never"
    return (
        f"account {account} was last listed {when}, before this action fell due; "
        "waiting for a listing after it (a wake polls no provider)"
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
    tick_started: datetime | None = None,
) -> Plan:
    """Defer executions beyond the rate limits; trip on a wrong-looking pattern."""
    emergency = emergency_rules()
    ordinary, budget = _candidates(decisions, emergency)
    latched = context.fuse_latched or view.fuse.latched
    trip_reasons = [] if latched else _wrong_pattern(ordinary, view, now, context)
    allowance = _Allowance.of(view, now, context.safety, tick_started)
    queue = _Queue(now, context.tick_interval, tick_started, decisions, emergency)
    holds = dict.fromkeys(map(id, queue.beyond(budget, allowance.budget, budget=True)), DEFERRED)
    if latched or trip_reasons:
        holds.update(dict.fromkeys(map(id, ordinary), BLOCKED))
    else:
        beyond = queue.beyond(ordinary, allowance.ordinary, budget=False)
        holds.update(dict.fromkeys(map(id, beyond), DEFERRED))
    result = tuple(_held(d, holds.get(id(d))) for d in decisions)
    blocked = _held_actions(result, BLOCKED)
    deferred = _held_actions(result, DEFERRED)
    last = view.fuse.last_deferred_at
    return Plan(
        result,
        fuse_tripped=bool(trip_reasons),
        fuse_reason=_fuse_reason(trip_reasons, latched=latched, blocked=bool(blocked)),
        blocked=blocked,
        deferred=deferred,
        deferral_reason=allowance.deferral_reason(len(deferred), context.safety),
        announce_deferral=bool(deferred) and (last is None or now - last > context.recent),
    )


def _candidates(
    decisions: Iterable[Decision], emergency: frozenset[str]
) -> tuple[list[Decision], list[Decision]]:
    """The real actions due now that the fuse limits: the ordinary ones and the budget
    emergency's. An ordinary action ``released`` by a human's earlier look is not limited."""
    ordinary: list[Decision] = []
    budget: list[Decision] = []
    for decision in decisions:
        if decision.status is not PlanStatus.EXECUTE or decision.action is None:
            continue
        if decision.dry_run:
            continue
        if decision.finding.rule in emergency:
            budget.append(decision)
        elif not decision.released:
            ordinary.append(decision)
    return ordinary, budget


def _fuse_reason(trip_reasons: Sequence[str], *, latched: bool, blocked: bool) -> str:
    if latched:
        return "the fuse tripped earlier and has not been reset" if blocked else ""
    return "; ".join(trip_reasons)


@dataclass(frozen=True, slots=True)
class _Allowance:
    """How many actions the fuse's rate limits let go now: ordinary ones, the budget
    emergency's, and what is left of the hourly limit."""

    ordinary: int
    budget: int
    hour_left: int

    @classmethod
    def of(
        cls, view: FleetView, now: datetime, safety: SafetyConfig, tick_started: datetime | None
    ) -> _Allowance:
        actions = view.recent_actions
        hour_left = max(0, safety.max_actions_per_hour - acted_in_last_hour(actions, now))
        tick = safety.max_actions_per_tick
        budget = safety.budget_emergency_max_actions_per_tick
        if tick_started is not None:  # a wake: what its tick already did counts
            tick -= acted_since(actions, tick_started, inclusive=True)
            budget -= acted_since(actions, tick_started, inclusive=True, budget=True)
        return cls(min(tick, hour_left), budget, hour_left)

    def deferral_reason(self, deferred: int, safety: SafetyConfig) -> str:
        if not deferred:
            return ""
        return (
            f"{deferred} actions due now wait for later ticks; limits: "
            f"{safety.max_actions_per_tick} per tick, {safety.max_actions_per_hour} per hour "
            f"({self.hour_left} left this hour), budget emergency "
            f"{safety.budget_emergency_max_actions_per_tick} per tick"
        )


BLOCKED, DEFERRED = PlanStatus.BLOCKED, PlanStatus.DEFERRED
_HOLD_NOTES = {
    BLOCKED: "held by the blast-radius fuse",
    DEFERRED: "deferred by the fuse's rate limits",
}


def _held(decision: Decision, status: PlanStatus | None) -> Decision:
    """``decision`` held by the fuse with ``status`` (None: let through unchanged)."""
    if status is None:
        return decision
    return replace(decision, status=status, note=_HOLD_NOTES[status])


def _held_actions(decisions: Iterable[Decision], status: PlanStatus) -> tuple[PlannedAction, ...]:
    return tuple(d.action for d in decisions if d.status is status and d.action is not None)


@dataclass(frozen=True, slots=True)
class _Queue:
    """The order in which the rate limits let due actions go (docs/safety.md, "Fuse").

    Overdue counts from the tick (for a wake: the tick it follows), so a tick and the wakes
    after it rank the same actions alike."""

    now: datetime
    interval: timedelta  # between two ticks
    tick_started: datetime | None  # a wake: the tick it follows
    decisions: Sequence[Decision]
    emergency: frozenset[str]  # the budget emergency's rules, with their own allowance

    def rank(self, decision: Decision) -> tuple[int, float, datetime]:
        """Sort key: the most whole :data:`AGE_STEP` s overdue first, then the costliest, then
        the oldest due."""
        due = decision.due_at or decision.finding.due_at
        anchor = self.tick_started if self.tick_started is not None else self.now
        overdue = (anchor - due) // AGE_STEP
        return (-overdue, -(decision.finding.usd_per_hour_at_stake or 0.0), due)

    def upcoming(self, *, budget: bool) -> list[Decision]:
        """At a wake: the warned actions (ordinary, or the budget's) due after ``now`` and by the
        next tick, weighed with the candidates due now (what the wake holds back for them goes
        by that tick). None at a tick: what it held back would wait a whole tick for nothing."""
        if self.tick_started is None:
            return []
        next_tick = self.tick_started + self.interval
        return [
            d
            for d in self.decisions
            if d.status is PlanStatus.WARN
            and not d.dry_run
            and (d.finding.rule in self.emergency) == budget
            and d.due_at is not None
            and self.now < d.due_at <= next_tick
        ]

    def beyond(self, candidates: list[Decision], allowance: int, *, budget: bool) -> list[Decision]:
        """The candidates that do not go now: ranked past ``allowance`` among themselves and
        the :meth:`upcoming` actions."""
        ordered = sorted([*candidates, *self.upcoming(budget=budget)], key=self.rank)
        going = {id(d) for d in ordered[: max(allowance, 0)]}
        return [d for d in candidates if id(d) not in going]


def _wrong_pattern(
    ordinary: list[Decision], view: FleetView, now: datetime, context: PlanContext
) -> list[str]:
    """Why these candidates look like a rule gone wild (empty: an ordinary wave)."""
    reasons: list[str] = []
    idle = idle_rules()
    contradicted = [
        d
        for d in ordinary
        if d.finding.rule in idle
        and _busy_recently(
            view.instances.get(f"{d.finding.account}/{d.finding.instance_id}"), now - context.recent
        )
    ]
    if contradicted:
        names = ", ".join(
            sorted(f"{d.finding.account}/{d.finding.instance_id}" for d in contradicted)
        )
        reasons.append(
            f"{len(contradicted)} idle actions on GPUs the probe saw busy within the last "
            f"tick ({names})"
        )
    by_policy = [d for d in ordinary if d.finding.rule not in idle]
    fleet = billing_fleet_size(view)
    limit = int(context.safety.max_fleet_fraction * fleet)
    if fleet >= FRACTION_MIN_FLEET and len(by_policy) > max(limit, 1):
        reasons.append(
            f"{len(by_policy)} time/state-based actions due in one tick, more than "
            f"{context.safety.max_fleet_fraction:g} of a billing fleet of {fleet}"
        )
    return reasons


def _busy_recently(instance: InstanceView | None, since: datetime) -> bool:
    if instance is None:
        return False
    return sample_history(instance.samples).recorded_busy_since(since)


def protected_report(finding: Finding) -> Finding:
    """A protected instance the budget emergency would have destroyed is a critical report."""
    if finding.rule not in emergency_rules():
        return finding
    return replace(finding, severity=Severity.CRITICAL)
