"""What the scrape-time gauges say, computed from a :class:`~watchdog_gpu.fleet.FleetView`.

Pure functions of recorded values and ``now`` (no store, no prometheus_client), so they are
tested on views built by hand as well as on views a real store loaded. The collector turns their
rows into metric families. Unknown stays unknown: a rate the provider does not report is counted
apart, never added as $0, and an instance is "idle" only while its newest GPU data says so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from watchdog_gpu.config import Settings
from watchdog_gpu.config.accounts import RESERVED_ACCOUNT_NAME
from watchdog_gpu.evidence import AccountEvidence
from watchdog_gpu.fleet import FleetView
from watchdog_gpu.model import InstanceRef, InstanceState
from watchdog_gpu.rules import unobserved
from watchdog_gpu.rules.base import RuleConfig
from watchdog_gpu.rules.budget import BudgetConfig
from watchdog_gpu.rules.idle_clock import current_idle
from watchdog_gpu.rules.idle_gpu import IdleGpuConfig
from watchdog_gpu.rules.unobserved import UnobservedConfig
from watchdog_gpu.rules.windows import billed_rate, state_since
from watchdog_gpu.spend import (
    SpendFigure,
    current_rate,
    day_start,
    ledger_pieces,
    month_start,
    pieces_spend,
)

GLOBAL_SCOPE = RESERVED_ACCOUNT_NAME  # no account may be called so (config validation)
# Every state an instance can be counted in (gone ones are not counted).
COUNTED_STATES = tuple(state.value for state in InstanceState if state is not InstanceState.GONE)
COMPUTE, STORAGE = "compute", "storage"
_COMPUTE_STATES = frozenset({InstanceState.RUNNING, InstanceState.STARTING})


@dataclass(frozen=True, slots=True)
class MetricsConfig:
    """The configuration the gauges read (``from_settings`` builds it from the config file).

    ``accounts`` maps each configured account to its provider (they get series even before a
    poll worked); None means every account the store recorded.
    """

    accounts: Mapping[str, str] | None = None
    budget: BudgetConfig = field(default_factory=BudgetConfig)
    idle: IdleGpuConfig = field(default_factory=IdleGpuConfig)
    unobserved: UnobservedConfig = field(default_factory=UnobservedConfig)
    # Every rule's config by name (their action and error series start at 0) and each job
    # phase's interval (``watchdog_gpu_job_interval_seconds``, which the tick-behind alert reads).
    rules: Mapping[str, RuleConfig] = field(default_factory=dict)
    job_intervals: Mapping[str, timedelta] = field(default_factory=dict)
    # What each account's GPU evidence can prove (Settings.evidence): the blind-instance gauge
    # judges as the unobserved rule does.
    evidence: Mapping[str, AccountEvidence] = field(default_factory=dict)

    @property
    def lookback(self) -> timedelta:
        """How much GPU-sample history a scrape loads: enough for the blind window and an idle
        run of twice the idle limit (an idle time longer than that is shown as at least it)."""
        idle = self.idle.idle
        return max(self.unobserved.after, idle, timedelta(minutes=30)) * 2

    @classmethod
    def from_settings(
        cls, settings: Settings, job_intervals: Mapping[str, timedelta] | None = None
    ) -> MetricsConfig:
        """The configured accounts, every rule's settings and the jobs' intervals."""
        rules = settings.rules
        return cls(
            accounts={account.name: account.provider for account in settings.accounts},
            budget=rules.of(BudgetConfig),
            idle=rules.of(IdleGpuConfig),
            unobserved=rules.of(UnobservedConfig),
            rules=rules.by_name(),
            job_intervals=dict(job_intervals or {}),
            evidence=settings.evidence(),
        )


@dataclass(frozen=True, slots=True)
class RateRow:
    """An account's current spend rate of one kind, and how many items bill it at a rate the
    provider does not report (their cost is not in ``usd_per_hour``)."""

    account: str
    provider: str
    kind: str  # compute or storage
    usd_per_hour: float
    unknown: int


@dataclass(frozen=True, slots=True)
class PeriodRow:
    """Spend of one scope in the current day or month, with its ceiling when one is set."""

    scope: str  # "global" or an account name
    period: str  # day or month
    spent: SpendFigure
    ceiling_usd: float | None


@dataclass(frozen=True, slots=True)
class StateTimeRow:
    """How long an instance has been idle, paused or stopped."""

    account: str
    instance_id: str
    state: str  # idle, paused or stopped
    seconds: float


def account_providers(view: FleetView) -> dict[str, str]:
    """Every account of the view (configured or seen in an instance) → its provider."""
    providers = {name: account.provider for name, account in view.accounts.items()}
    for instance in view.instances.values():
        providers.setdefault(instance.latest.account, instance.latest.provider)
    return dict(sorted(providers.items()))


def instance_counts(view: FleetView) -> dict[tuple[str, str, str], int]:
    """(account, provider, state) → instances, with a 0 for every state of every account."""
    counts = {
        (account, provider, state): 0
        for account, provider in account_providers(view).items()
        for state in COUNTED_STATES
    }
    for instance in view.instances.values():
        latest = instance.latest
        if latest.state is not InstanceState.GONE:
            counts[(latest.account, latest.provider, latest.state.value)] += 1
    return counts


def spend_rates(view: FleetView) -> list[RateRow]:
    """Per account, what it bills now for compute (running and starting instances; an instance in
    an unknown state may be billing compute: unknown) and storage (every instance not gone, and
    its volumes)."""
    totals: dict[tuple[str, str], list[float]] = {}
    for account in account_providers(view):
        totals[(account, COMPUTE)] = [0.0, 0]
        totals[(account, STORAGE)] = [0.0, 0]
    for instance in view.instances.values():
        latest = instance.latest
        if latest.state is InstanceState.GONE:
            continue
        if latest.state in _COMPUTE_STATES or latest.state is InstanceState.UNKNOWN:
            rate = None if latest.state is InstanceState.UNKNOWN else latest.compute_usd_per_hour
            _add(totals[(latest.account, COMPUTE)], rate)
        _add(totals[(latest.account, STORAGE)], latest.storage_usd_per_hour)
    for volume in view.volumes:
        key = (volume.latest.account, STORAGE)
        if key in totals:
            _add(totals[key], volume.latest.usd_per_hour)
    providers = account_providers(view)
    return [
        RateRow(account, providers[account], kind, usd, int(unknown))
        for (account, kind), (usd, unknown) in sorted(totals.items())
    ]


def _add(total: list[float], rate: float | None) -> None:
    if rate is None:
        total[1] += 1
    else:
        total[0] += rate


def period_spend(view: FleetView, now: datetime, budget: BudgetConfig) -> list[PeriodRow]:
    """Spend in the current day and month (in the budget's time zone) of the whole fleet and of
    every account, with the budget rule's ceilings where they are configured (none while the
    rule is disabled)."""
    accounts = sorted(set(account_providers(view)) | set(budget.accounts))
    # The ledger's intervals once per account; the global scope is all of them.
    scopes = {name: ledger_pieces(view, until=now, accounts=(name,)) for name in accounts}
    scopes[GLOBAL_SCOPE] = [piece for name in accounts for piece in scopes[name]]
    starts = {"day": day_start(now, budget.timezone), "month": month_start(now, budget.timezone)}
    rows: list[PeriodRow] = []
    for scope in [GLOBAL_SCOPE, *accounts]:
        pieces = scopes[scope]
        limits = budget if scope == GLOBAL_SCOPE else budget.accounts.get(scope)
        for period, start in starts.items():
            ceiling = None
            if budget.enabled and limits is not None:
                ceiling = limits.daily_usd if period == "day" else limits.monthly_usd
            rows.append(PeriodRow(scope, period, pieces_spend(pieces, start, now), ceiling))
    return rows


def spend_since(now: datetime, budget: BudgetConfig) -> datetime:
    """How far back a view must hold spans for :func:`period_spend`: the month's start."""
    return month_start(now, budget.timezone)


def state_times(view: FleetView, now: datetime, idle: IdleGpuConfig) -> list[StateTimeRow]:
    """Idle, paused and stopped time of every instance not gone (running and busy, or running
    without fresh GPU data, gives no row). Idle time runs from the idle rule's clock
    (:func:`~watchdog_gpu.rules.idle_clock.current_idle`), as ``status`` shows it."""
    rows: list[StateTimeRow] = []
    for instance in view.instances.values():
        latest = instance.latest
        since: datetime | None = None
        if latest.state in (InstanceState.PAUSED, InstanceState.STOPPED):
            since, label = state_since(instance), latest.state.value
        else:
            # The idle rule's own clock: the one definition of "idle since".
            evidence = view.evidence_of(latest)  # what may prove idle, as the rule
            episode = current_idle(instance, now, idle.clock_settings, evidence.proves_idle)
            since, label = (episode.start if episode is not None else None), "idle"
        if since is not None:
            seconds = max(0.0, (now - since).total_seconds())
            rows.append(StateTimeRow(latest.account, latest.instance_id, label, seconds))
    return rows


@dataclass(frozen=True, slots=True)
class IdleRateRow:
    """What an account's idle instances bill per hour now (known rates only)."""

    account: str
    provider: str
    usd_per_hour: float


def idle_rates(view: FleetView, times: Sequence[StateTimeRow]) -> list[IdleRateRow]:
    """Per account (0 for one with none), what the instances :func:`state_times` calls idle —
    the idle rule's clock runs for them — bill per hour in their current state (an unknown rate
    adds nothing: the spend-rate gauges count those apart)."""
    providers = account_providers(view)
    totals = dict.fromkeys(providers, 0.0)
    for row in times:
        instance = view.instances.get(InstanceRef(row.account, row.instance_id).key)
        rate = billed_rate(instance) if instance is not None and row.state == "idle" else None
        if rate is not None:
            totals[row.account] = totals.get(row.account, 0.0) + rate
    return [
        IdleRateRow(account, providers.get(account, ""), usd)
        for account, usd in sorted(totals.items())
    ]


def blind_instances(view: FleetView, now: datetime, config: UnobservedConfig) -> int:
    """Running instances without usable GPU data for the unobserved rule's ``after``, and
    instances in an unmapped provider state for as long (the same judgement as the rule, which
    alerts about each of them)."""
    return len(unobserved.evaluate(view, now, config))


def with_evidence(view: FleetView, config: MetricsConfig) -> FleetView:
    """``view`` with what each configured account's GPU evidence can prove."""
    return replace(view, evidence=config.evidence) if config.evidence else view


@dataclass(frozen=True, slots=True)
class UnwatchedRow:
    account: str
    provider: str
    usd_per_hour: float


def unwatched_rates(view: FleetView) -> list[UnwatchedRow]:
    """Per configured account: what its instances billed per hour at its last listing while it
    cannot be listed now (its latest poll failed), 0 while it can — the money the
    account_health rule says is unprotected (known rates only)."""
    rows: list[UnwatchedRow] = []
    for name, account in sorted(view.accounts.items()):
        rate = 0.0
        if account.unreadable_since is not None:
            billing = [i for i in view.instances_of(name) if i.state is not InstanceState.GONE]
            rate = current_rate(billing).usd_per_hour
        rows.append(UnwatchedRow(name, account.provider, rate))
    return rows
