"""What ``watchdog-gpu status`` shows, collected from the store: each account's spend rate and
runway, each instance's GPU activity, pending actions, stops/destroys due, snooze and protection
(the planner's own checks, with the configuration's policy when one was read)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from watchdog_gpu.commands import status_defaults
from watchdog_gpu.commands.common import ReadSource, Source, timestamp
from watchdog_gpu.commands.gpu_activity import GpuActivity, gpu_activity
from watchdog_gpu.evidence import AccountEvidence
from watchdog_gpu.fleet import AccountView, ActionRecord, FleetView, InstanceView, Protection
from watchdog_gpu.model import (
    OPEN_ACTION_STATUSES,
    ActionKind,
    ActionStatus,
    InstanceSnapshot,
    InstanceState,
)
from watchdog_gpu.notices import EpisodeNotices, index_notices
from watchdog_gpu.plan import action_due
from watchdog_gpu.protection import recorded_protection
from watchdog_gpu.rules.idle_clock import IdleClockSettings
from watchdog_gpu.rules.windows import billed_rate, state_since
from watchdog_gpu.store.rows import AccountRecord, FindingRecord, Leader

if TYPE_CHECKING:
    from watchdog_gpu.config import Settings


@dataclass(frozen=True)
class AccountStatus:
    view: AccountView
    error_message: str | None
    spend_usd_per_hour: float | None
    spend_source: str | None
    runway_hours: float | None
    # What its GPU evidence can prove (evidence.py; None without a configuration that lists it).
    gpu_evidence: str | None = None


@dataclass(frozen=True)
class InstanceStatus:
    view: InstanceView
    since: datetime
    usd_per_hour: float | None
    gpu: GpuActivity
    pending: tuple[ActionRecord, ...]
    due: tuple[FindingRecord, ...]
    snoozed_until: datetime | None
    protected: str | None


@dataclass(frozen=True)
class FleetStatus:
    as_of: datetime
    clock_note: str | None
    database: str
    latched: bool
    held_actions: int
    accounts: tuple[AccountStatus, ...] = ()
    instances: tuple[InstanceStatus, ...] = ()
    protections: tuple[Protection, ...] = field(default=())
    leader: Leader | None = None  # PostgreSQL teams: who leads (store/leadership.py)
    mode: ModeSummary | None = None  # None: no configuration was read (--db)


@dataclass(frozen=True)
class ModeSummary:
    """Whether the configuration's watchdog enforces or monitors: ``[watchdog] mode`` and the
    enabled rules whose own mode differs from it."""

    mode: str
    exceptions: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, settings: Settings) -> ModeSummary:
        mode = settings.watchdog.mode
        exceptions = tuple(
            (name, settings.effective_mode(name))
            for name, rule in settings.rules.by_name().items()
            if rule.enabled and settings.effective_mode(name) != mode
        )
        return cls(mode, exceptions)


@dataclass(frozen=True)
class Policy:
    """What the tables need of the configuration: the sample window, the idle threshold, the
    poll interval, how long a rule's warning stands before it acts, whether a rule only records
    a dry run (monitor mode) and what protects an instance (the planner's own checks)."""

    lookback: timedelta
    idle_clock: IdleClockSettings
    poll_interval: timedelta
    warn_before: Callable[[str], timedelta]
    dry_run: Callable[[str], bool | None]  # None: the mode is unknown (no configuration)
    protection: Callable[[InstanceSnapshot, Iterable[Protection]], str | None]
    evidence: Mapping[str, AccountEvidence] = field(default_factory=dict)


def policy_of(settings: Settings | None) -> Policy:
    """The policy of ``settings``; without a configuration the defaults, as plain values
    (``status_defaults``: no pydantic model is built)."""
    if settings is None:
        return Policy(
            lookback=status_defaults.LOOKBACK,
            idle_clock=status_defaults.IDLE_CLOCK,
            poll_interval=status_defaults.POLL_INTERVAL,
            warn_before=lambda rule: status_defaults.WARN_BEFORE.get(rule, timedelta(0)),
            dry_run=lambda rule: None,
            protection=recorded_protection,
        )
    from watchdog_gpu.plan import PlanContext, is_dry_run, warn_before
    from watchdog_gpu.protection import protection_for
    from watchdog_gpu.rules import lookback_for
    from watchdog_gpu.rules.idle_gpu import IdleGpuConfig

    rules = dict(settings.rules.by_name())
    context = PlanContext(
        mode=settings.watchdog.mode,
        rules=rules,
        safety=settings.safety,
        protected_accounts=frozenset(a.name for a in settings.accounts if a.protect),
    )
    idle = rules.get("idle_gpu")
    return Policy(
        lookback=lookback_for(rules),
        idle_clock=(idle if isinstance(idle, IdleGpuConfig) else IdleGpuConfig()).clock_settings,
        poll_interval=settings.watchdog.poll_interval,
        warn_before=lambda rule: warn_before(rule, context),
        dry_run=lambda rule: is_dry_run(rule, context),
        protection=lambda snapshot, protections: protection_for(snapshot, protections, context),
        evidence=settings.evidence(),
    )


def collect(source: ReadSource | Source, now: datetime) -> FleetStatus:
    """Everything the tables show, read from the store as of ``now`` (or of the latest record
    when the database is ahead of ``now``)."""
    store = source.store
    records = store.latest_accounts()
    latched = store.fuse_latched()
    held = len(store.list_actions(statuses=[ActionStatus.BLOCKED]))
    leader = store.leader()
    mode = None if source.settings is None else ModeSummary.of(source.settings)
    if not records:
        return FleetStatus(now, None, source.database, latched, held, leader=leader, mode=mode)
    latest = _latest_record(records, store.latest_seen())
    as_of, note = now, None
    if latest is not None and latest > now:
        as_of = latest
        note = (
            f"the database holds records up to {timestamp(latest)}, after this machine's clock "
            f"({timestamp(now)}): shown as of its latest record (a demo or simulation wrote it)"
        )
    policy = policy_of(source.settings)
    lookback = policy.lookback
    threshold = policy.idle_clock.threshold_percent
    view = store.load_status_view(as_of, lookback, as_of - lookback, threshold)
    view = replace(view, evidence=policy.evidence)  # FleetView.evidence_of: as the idle rule
    shared = _Shared.of(view, store.list_findings(seen_since=as_of - lookback))
    instances = [
        _instance_status(instance, view, shared, policy=policy)
        for instance in _ordered(view.instances.values())
    ]
    accounts = [_account_status(record, view, policy.evidence) for record in records]
    return FleetStatus(
        as_of,
        note,
        source.database,
        latched,
        held,
        tuple(accounts),
        tuple(instances),
        tuple(view.protections),
        leader,
        mode,
    )


def _latest_record(accounts: Sequence[AccountRecord], seen: datetime | None) -> datetime | None:
    moments = [seen] if seen is not None else []
    for record in accounts:
        moments += [t for t in (record.view.last_poll_ok_at, record.view.last_poll_error_at) if t]
    return max(moments, default=None)


def _ordered(instances: Any) -> list[InstanceView]:
    """Present instances first, then gone ones; each by account and id."""
    return sorted(
        instances,
        key=lambda v: (v.state is InstanceState.GONE, v.latest.account, v.latest.instance_id),
    )


def _account_status(
    record: AccountRecord, view: FleetView, evidence: Mapping[str, AccountEvidence]
) -> AccountStatus:
    account = record.view
    snapshot = account.latest
    rate, source = _spend_rate(account, view)
    balance = snapshot.balance_usd if snapshot is not None else None
    runway = balance / rate if balance is not None and rate else None
    known = evidence.get(account.account)
    return AccountStatus(
        account,
        record.last_poll_error_message,
        rate,
        source,
        runway,
        known.summary if known is not None else None,
    )


def _spend_rate(account: AccountView, view: FleetView) -> tuple[float | None, str | None]:
    """The account's spend in $/h and where the figure comes from: the provider's own, else the
    sum of what its instances bill (unknown when any of them is)."""
    snapshot = account.latest
    if snapshot is not None and snapshot.spend_usd_per_hour is not None:
        return snapshot.spend_usd_per_hour, "provider"
    rates = [billed_rate(instance) for instance in view.instances_of(account.account)]
    known = [rate for rate in rates if rate is not None]
    if len(known) < len(rates):
        return None, None
    return sum(known), "instances"


InstanceKey = tuple[str, str | None]


@dataclass(frozen=True, slots=True)
class _Shared:
    """What each instance's row reads from the view and the findings, indexed once: scanning every
    finding, action and notice for each of 1,000 instances was a fifth of ``status``'s CPU."""

    findings: dict[InstanceKey, list[FindingRecord]]
    pending: dict[InstanceKey, list[ActionRecord]]  # open actions, in the view's order
    actions: dict[str, ActionRecord]  # the view's actions by idempotency key
    notices: dict[str, EpisodeNotices]  # plan.action_due's index, built once

    @classmethod
    def of(cls, view: FleetView, findings: Iterable[FindingRecord]) -> _Shared:
        by_instance: dict[InstanceKey, list[FindingRecord]] = {}
        for finding in findings:
            by_instance.setdefault((finding.account, finding.instance_id), []).append(finding)
        pending: dict[InstanceKey, list[ActionRecord]] = {}
        for action in view.recent_actions:
            if action.status in OPEN_ACTION_STATUSES:
                pending.setdefault((action.account, action.instance_id), []).append(action)
        return cls(
            findings=by_instance,
            pending=pending,
            actions={action.idempotency_key: action for action in view.recent_actions},
            notices=index_notices(view.notice_times),
        )


def _instance_status(
    instance: InstanceView, view: FleetView, shared: _Shared, *, policy: Policy
) -> InstanceStatus:
    latest = instance.latest
    mine = (latest.account, latest.instance_id)
    pending = tuple(shared.pending.get(mine, ()))
    snoozes = [s.until for s in view.snoozes if (s.account, s.instance_id) == mine]
    gone = instance.state is InstanceState.GONE
    protected = None if gone else policy.protection(latest, view.protections)
    return InstanceStatus(
        view=instance,
        since=state_since(instance),
        usd_per_hour=0.0 if gone else billed_rate(instance),
        gpu=gpu_activity(
            instance, view.now, policy.idle_clock, view.evidence_of(latest).proves_idle
        ),
        pending=pending,
        # A protected instance has nothing due: the planner never acts on it.
        due=() if gone or protected else _due(instance, view, shared, policy),
        snoozed_until=max(snoozes, default=None),
        protected=protected,
    )


def _due(
    instance: InstanceView, view: FleetView, shared: _Shared, policy: Policy
) -> tuple[FindingRecord, ...]:
    """Destructive findings the latest evaluation still had for the instance and whose action
    the planner has still to carry out, each due when it will (``plan.action_due``: not before
    a standing warning is ``warn_before`` old; nothing once its action — or, in monitor mode,
    its dry run — is recorded). "Latest": seen less than a poll interval before the account's
    last poll (evaluation follows polling; a cleared finding is not seen again)."""
    latest = instance.latest
    account = view.accounts.get(latest.account)
    polled = (
        [t for t in (account.last_poll_ok_at, account.last_poll_error_at) if t] if account else []
    )
    last_poll = max(polled, default=None)
    due: list[FindingRecord] = []
    for finding in shared.findings.get((latest.account, latest.instance_id), ()):
        if finding.action is ActionKind.NOTIFY:
            continue
        if last_poll is not None and finding.last_seen + policy.poll_interval <= last_poll:
            continue
        at = action_due(
            finding.episode_key,
            finding.action,
            finding.due_at,
            dry_run=policy.dry_run(finding.rule),
            lead=policy.warn_before(finding.rule),
            actions=shared.actions,
            notices=shared.notices,
            now=view.now,
        )
        if at is not None:
            due.append(replace(finding, due_at=at))
    return tuple(due)
