"""budget: spend ceilings per day / month, a balance floor and a $/h ceiling.

Intent: the runaway — 8×H100 launched by mistake, a script looping over instance creation. When a
ceiling is reached every billing, unprotected instance of the scope is destroyed (an emergency:
grace is skipped unless configured), and protected ones that keep billing are reported
critically. Spend is the ledger's (:func:`watchdog_gpu.spend.period_spend`), unknown spend
estimated pessimistically, never $0. Scopes, rates, findings and dating: ``docs/safety.md``,
"Period spend" and "Unknown cost".

```toml
[rules.budget]
daily_usd = 50.0
monthly_usd = 500.0
max_usd_per_hour = 10.0
min_balance_usd = 1.0
timezone = "Europe/Berlin"
skip_grace = true

[rules.budget.accounts.vast-main]
daily_usd = 20.0
```
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from pydantic import Field

from watchdog_gpu.capabilities import CAPABILITIES
from watchdog_gpu.durations import Duration, TimeZoneName
from watchdog_gpu.fleet import AccountView, FleetView, InstanceView, VolumeLedger
from watchdog_gpu.model import ActionKind, Finding, InstanceState, Severity
from watchdog_gpu.money import at_or_under
from watchdog_gpu.rules.base import DestructiveRuleConfig, RuleSpec, StrictModel
from watchdog_gpu.rules.windows import billed_rate, state_since
from watchdog_gpu.spend import (
    BillingPiece,
    SpendFigure,
    current_rate,
    day_start,
    ledger_pieces,
    month_start,
    pieces_spend,
    rate_exceeded_since,
    spend_crossing_time,
    volumes_rate,
)

NAME = "budget"


class BudgetLimits(StrictModel):
    daily_usd: float | None = Field(
        default=None, gt=0, description="Ceiling on spend in the current day.", examples=[50.0]
    )
    monthly_usd: float | None = Field(
        default=None, gt=0, description="Ceiling on spend in the current month.", examples=[500.0]
    )
    max_usd_per_hour: float | None = Field(
        default=None, gt=0, description="Ceiling on the current spend rate.", examples=[10.0]
    )
    min_balance_usd: float | None = Field(
        default=None,
        ge=0,
        description=(
            "A balance floor destroys only where the provider documents the balance as "
            "spendable (RunPod's clientBalance); on Vast it alerts critically and acts on "
            "nothing (docs/providers.md, Balances)."
        ),
        examples=[1.0],
    )


class BudgetConfig(DestructiveRuleConfig, BudgetLimits):
    """Spend ceilings (across every provider, days and months counted in "timezone"). No ceiling is
    set unless configured; when one is reached every billing, unprotected instance of the scope
    is destroyed at once (skip_grace) and protected ones that keep billing are reported
    critically.
    """

    timezone: TimeZoneName = Field(
        default="UTC", description="Days and months are counted in this zone."
    )
    skip_grace: bool = Field(
        default=True, description="A budget emergency acts at once, without the warning grace."
    )
    warn_before: Duration = Field(
        default=timedelta(0),
        description="The warning goes out this long before the action (when grace applies).",
    )
    accounts: dict[str, BudgetLimits] = Field(
        default_factory=dict,
        description="Per-account ceilings (same four options), keyed by account name:",
        examples=[
            {
                "vast-main": {
                    "daily_usd": 20.0,
                    "monthly_usd": 200.0,
                    "max_usd_per_hour": 4.0,
                    "min_balance_usd": 2.0,
                }
            }
        ],
    )


@dataclass(frozen=True, slots=True)
class Breach:
    """One ceiling of one scope that is reached."""

    scope: str  # "global" or "account NAME"
    kind: str  # "daily", "monthly", "rate" or "balance"
    description: str
    started_at: datetime | None  # None: the recorded data cannot date it
    spend_unknown: bool = False
    alert_only: bool = False  # a floor on a balance the provider does not vouch for


def evaluate(view: FleetView, now: datetime, config: BudgetConfig) -> list[Finding]:
    """One critical finding per billing instance of every scope whose ceiling is reached."""
    zone = ZoneInfo(config.timezone)
    everyone = tuple(view.instances.values())
    by_instance: dict[str, list[Breach]] = {}
    pieces = LedgerByAccount(view, now)
    every_account = tuple(sorted({*view.accounts, *(i.latest.account for i in everyone)}))

    def charge(breaches: Iterable[Breach], instances: Iterable[InstanceView]) -> None:
        found = list(breaches)
        if not found:
            return
        for instance in instances:
            if _bills(instance):
                by_instance.setdefault(instance.latest.ref.key, []).extend(found)

    charge(
        _spend_breaches("global", config, Scope(view, every_account, pieces), now=now, zone=zone),
        everyone,
    )
    for account, limits in sorted(config.accounts.items()):
        mine = view.instances_of(account)
        scope = Scope(view, (account,), pieces)
        charge(_spend_breaches(f"account {account}", limits, scope, now=now, zone=zone), mine)
    for account_view in view.accounts.values():
        override = config.accounts.get(account_view.account)
        floor = override.min_balance_usd if override is not None else None
        if floor is None:
            floor = config.min_balance_usd
        breach = _balance_breach(account_view, floor)
        if breach is not None:
            charge([breach], view.instances_of(account_view.account))
    return [
        _finding(view.instances[key], breaches, config)
        for key, breaches in sorted(by_instance.items())
    ]


class LedgerByAccount:
    """The ledger's intervals of each account up to ``now``, built on first use (only a scope
    with a spend ceiling reads them) and shared by every scope and period of the tick."""

    __slots__ = ("_built", "_now", "_view")

    def __init__(self, view: FleetView, now: datetime) -> None:
        self._view = view
        self._now = now
        self._built: dict[str, list[BillingPiece]] = {}

    def of(self, account: str) -> list[BillingPiece]:
        built = self._built.get(account)
        if built is None:
            built = ledger_pieces(self._view, until=self._now, accounts=(account,))
            self._built[account] = built
        return built


@dataclass(frozen=True, slots=True)
class Scope:
    """The accounts a ceiling covers, with the ledger's intervals of each."""

    view: FleetView
    accounts: tuple[str, ...]
    ledger: LedgerByAccount

    def pieces(self, accounts: Iterable[str] | None = None) -> list[BillingPiece]:
        chosen = self.accounts if accounts is None else accounts
        return [piece for name in chosen for piece in self.ledger.of(name)]

    @property
    def instances(self) -> tuple[InstanceView, ...]:
        wanted = frozenset(self.accounts)
        return tuple(i for i in self.view.instances.values() if i.latest.account in wanted)

    @property
    def account_views(self) -> tuple[AccountView, ...]:
        return tuple(self.view.accounts[a] for a in self.accounts if a in self.view.accounts)


def _bills(instance: InstanceView) -> bool:
    if instance.state is InstanceState.GONE:
        return False
    rate = billed_rate(instance)
    return rate is None or rate > 0


def _spend_breaches(
    scope_name: str, limits: BudgetLimits, scope: Scope, *, now: datetime, zone: ZoneInfo
) -> list[Breach]:
    breaches: list[Breach] = []
    periods = (("daily", limits.daily_usd, day_start), ("monthly", limits.monthly_usd, month_start))
    for kind, ceiling, period_start in periods:
        if ceiling is None:
            continue
        pieces = scope.pieces()
        start = period_start(now, zone)
        spent = pieces_spend(pieces, start, now)
        if spent.usd >= ceiling:
            reached = spend_crossing_time(pieces, start, now, ceiling) or start
            failing = [v.account for v in scope.account_views if v.last_poll_error_kind is not None]
            unread = pieces_spend(scope.pieces(failing), start, now)
            text = (
                f"{scope_name} {kind} spend ${spent.usd:.2f} reached the ${ceiling:.2f} ceiling"
                f"{_unknown_note(spent, unread.estimated_usd)}"
            )
            breaches.append(Breach(scope_name, kind, text, reached, not spent.complete))
    if limits.max_usd_per_hour is not None:
        breach = _rate_breach(scope_name, limits.max_usd_per_hour, scope, now)
        if breach is not None:
            breaches.append(breach)
    return breaches


def _unknown_note(spent: SpendFigure, estimated_usd: float) -> str:
    """What the spend figure holds besides listed facts: dollars estimated for accounts that
    cannot be read, time with no known rate."""
    notes: list[str] = []
    if estimated_usd > 0:
        notes.append(
            f"including ${estimated_usd:.2f} estimated at the last known rates of accounts "
            "that cannot be listed now"
        )
    if not spent.complete:
        hours = spent.unknown_seconds / 3600
        notes.append(f"plus {hours:.1f} instance-hours of unknown cost, not counted")
    return f" ({'; '.join(notes)})" if notes else ""


def _rate_breach(scope_name: str, ceiling: float, scope: Scope, now: datetime) -> Breach | None:
    """The scope's spend rate (:func:`_scope_rate`) over its ceiling, or None."""
    total, unknown = _scope_rate(scope)
    if total <= ceiling:
        return None
    lookback = min((instance.first_seen for instance in scope.instances), default=now)
    started = rate_exceeded_since(scope.pieces(), now, ceiling, lookback)
    note = f" ({unknown} instance(s) with an unknown rate not counted)" if unknown else ""
    text = f"{scope_name} spend rate ${total:.2f}/h exceeds the ${ceiling:.2f}/h ceiling{note}"
    return Breach(scope_name, "rate", text, started, unknown > 0)


def _scope_rate(scope: Scope) -> tuple[float, int]:
    """The scope's spend rate in $/h: per account the larger of what its instances and volumes
    bill and the provider's reported account rate; and how many instances' rates are unknown."""
    by_account: dict[str, list[InstanceView]] = {}
    for instance in scope.instances:
        by_account.setdefault(instance.latest.account, []).append(instance)
    volumes: dict[str, list[VolumeLedger]] = {}
    for volume in scope.view.volume_ledgers:
        volumes.setdefault(volume.account, []).append(volume)
    reported = {
        view.account: view.latest.spend_usd_per_hour
        for view in scope.account_views
        if view.latest is not None and view.latest.spend_usd_per_hour is not None
    }
    total = 0.0
    unknown = 0
    for account in sorted(set(by_account) | set(reported) | (set(volumes) & set(scope.accounts))):
        figure = current_rate(by_account.get(account, ())) + volumes_rate(volumes.get(account, ()))
        unknown += figure.unknown_instances
        total += max(figure.usd_per_hour, reported.get(account) or 0.0)
    return total, unknown


def _balance_breach(account: AccountView, floor: float | None) -> Breach | None:
    balance = account.latest.balance_usd if account.latest is not None else None
    # At or under: a balance equal to the floor has reached it.
    if floor is None or balance is None or not at_or_under(balance, floor):
        return None
    text = f"account {account.account} balance ${balance:.2f} is at or under the ${floor:.2f} floor"
    capabilities = CAPABILITIES.get(account.provider)
    if capabilities is not None and not capabilities.balance_spendable:
        # docs/providers.md, "Balances": an uncertain balance never destroys an account.
        text += (
            f" ({capabilities.display_name} does not document this balance as spendable for "
            "every kind of key: alert only)"
        )
        return Breach(f"account {account.account}", "balance", text, None, alert_only=True)
    return Breach(f"account {account.account}", "balance", text, None)


def _finding(instance: InstanceView, breaches: Sequence[Breach], config: BudgetConfig) -> Finding:
    since = state_since(instance)
    breached = min((b.started_at for b in breaches if b.started_at is not None), default=None)
    episode = max(since, breached) if breached is not None else since
    due_at = episode if config.skip_grace else episode + config.warn_before
    latest = instance.latest
    unique = list(dict.fromkeys(breach.description for breach in breaches))
    more = f" (and {len(unique) - 1} more)" if len(unique) > 1 else ""
    return Finding(
        rule=NAME,
        account=latest.account,
        instance_id=latest.instance_id,
        severity=Severity.CRITICAL,
        action=ActionKind.NOTIFY if _alert_only(instance, breaches) else ActionKind(config.action),
        summary=f"budget emergency: {unique[0]}{more}",
        episode_started_at=episode,
        due_at=due_at,
        evidence={
            "instance_name": latest.name,
            **_breach_evidence(breaches, breached),
            "skip_grace": config.skip_grace,
        },
        usd_per_hour_at_stake=billed_rate(instance),
    )


def _breach_evidence(
    breaches: Sequence[Breach], breached: datetime | None
) -> dict[str, str | bool | None]:
    return {
        "breaches": "; ".join(dict.fromkeys(breach.description for breach in breaches)),
        "scopes": ", ".join(dict.fromkeys(breach.scope for breach in breaches)),
        "kinds": ", ".join(dict.fromkeys(breach.kind for breach in breaches)),
        "breach_started_at": breached.isoformat() if breached is not None else None,
        "spend_unknown": any(breach.spend_unknown for breach in breaches),
    }


def _alert_only(instance: InstanceView, breaches: Sequence[Breach]) -> bool:
    # An instance in a state we cannot read (an unmapped provider state, Vast "offline") may
    # bill nothing; it is reported with the emergency, never acted on (docs/providers.md).
    if instance.state is InstanceState.UNKNOWN:
        return True
    return all(breach.alert_only for breach in breaches)


RULE = RuleSpec(NAME, BudgetConfig, evaluate, emergency=True)


def spend_since(now: datetime, config: BudgetConfig) -> datetime:
    """How far back the fleet view's spans must reach for this rule: the start of the current
    month in the budget's time zone (pass it as the store's ``spend_since``)."""
    return month_start(now, config.timezone)
