"""low_balance: the account balance is low, or the runway (balance ÷ spend rate) is short.

Intent: a prepaid balance running out stops instances on the provider's terms (RunPod deletes
data without a network volume); tell the user while there is time to act. Notifies only.

```toml
[rules.low_balance]
min_balance_usd = 5.0
min_runway = "6h"
```
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import ClassVar

from pydantic import Field

from watchdog_gpu.durations import PositiveDuration
from watchdog_gpu.fleet import AccountView, FleetView
from watchdog_gpu.model import ActionKind, Finding, Severity
from watchdog_gpu.money import at_or_under
from watchdog_gpu.rules.base import RuleConfig, RuleSpec
from watchdog_gpu.spend import current_rate, day_start

NAME = "low_balance"
CRITICAL_RUNWAY_HOURS = 1.0


class LowBalanceConfig(RuleConfig):
    """Notify when the balance is low or the runway (balance / spend rate) is short."""

    min_balance_usd: float | None = Field(
        default=5.0, ge=0, description="Warn when the balance is at or under this."
    )
    LEGACY_DURATIONS: ClassVar[Mapping[str, tuple[str, str]]] = {
        "min_runway_hours": ("min_runway", "h")
    }

    min_runway: PositiveDuration | None = Field(
        default=timedelta(hours=6),
        description=(
            "Warn when balance / spend rate is under this.\n(Formerly min_runway_hours = "
            "6.0, still read, with a deprecation note in `config check`.)"
        ),
    )

    @property
    def min_runway_hours(self) -> float | None:
        """``min_runway`` in hours (the deprecated key's unit)."""
        return None if self.min_runway is None else self.min_runway.total_seconds() / 3600


def evaluate(view: FleetView, now: datetime, config: LowBalanceConfig) -> list[Finding]:
    """One finding per account whose balance or runway is short.

    The spend rate is the larger of the account's instances' billed rates and the rate the
    provider reports. Severity is critical when the balance is $0 or less or the runway is under
    an hour, warning otherwise.

    The view holds only the latest account snapshot, so the rule cannot tell when the balance
    fell; the episode is dated to the start of the current UTC day, and a critical finding has
    its own topic. So the user hears at most once a day while the balance stays low, and once
    more when it becomes critical — never once per tick.
    """
    findings: list[Finding] = []
    for account in view.accounts.values():
        finding = _account_finding(view, account, now, config)
        if finding is not None:
            findings.append(finding)
    return findings


@dataclass(frozen=True, slots=True)
class _Funds:
    """An account's balance, what it spends, and how long the balance lasts at that rate."""

    balance: float
    rate: float  # $/h
    runway: float | None  # hours; None: nothing bills

    @property
    def critical(self) -> bool:
        """$0 or less, or under an hour of runway."""
        short = self.runway is not None and self.runway < CRITICAL_RUNWAY_HOURS
        return at_or_under(self.balance, 0.0) or short

    def reasons(self, config: LowBalanceConfig) -> list[str]:
        """Why the balance is low (empty: it is not)."""
        reasons: list[str] = []
        floor = config.min_balance_usd
        if floor is not None and at_or_under(self.balance, floor):
            reasons.append(f"balance ${self.balance:.2f} is at or under ${floor:.2f}")
        short = config.min_runway_hours
        if self.runway is not None and short is not None and self.runway < short:
            reasons.append(f"runway {self.runway:.1f} h at ${self.rate:.2f}/h is under {short:g} h")
        if not reasons and at_or_under(self.balance, 0.0):
            reasons.append(f"balance ${self.balance:.2f}")
        return reasons


def _account_finding(
    view: FleetView, account: AccountView, now: datetime, config: LowBalanceConfig
) -> Finding | None:
    latest = account.latest
    if latest is None or latest.balance_usd is None:
        return None
    balance = latest.balance_usd
    instances_rate = current_rate(view.instances_of(account.account))
    rate = max(instances_rate.usd_per_hour, latest.spend_usd_per_hour or 0.0)
    funds = _Funds(balance, rate, max(balance, 0.0) / rate if rate > 0 else None)
    reasons = funds.reasons(config)
    if not reasons:
        return None
    critical = funds.critical
    episode = day_start(now, "UTC")
    # The warning and the critical finding are one condition: escalating (or easing) from one to
    # the other must not tell the owner the other one is "Resolved".
    other_severity = f"{NAME}:{account.account}{'' if critical else '[critical]'}"
    return Finding(
        rule=NAME,
        account=account.account,
        instance_id=None,
        severity=Severity.CRITICAL if critical else Severity.WARNING,
        action=ActionKind.NOTIFY,
        summary="; ".join(reasons),
        episode_started_at=episode,
        due_at=episode,
        evidence={
            "balance_usd": round(balance, 2),
            "spend_usd_per_hour": round(rate, 4),
            "runway_hours": round(funds.runway, 2) if funds.runway is not None else None,
            "reported_spend_usd_per_hour": latest.spend_usd_per_hour,
            "instances_with_unknown_rate": instances_rate.unknown_instances,
            "provider_spend_limit_usd_per_hour": latest.spend_limit_usd_per_hour,
            "balance_observed_at": latest.observed_at.isoformat(),
        },
        usd_per_hour_at_stake=rate,
        topic="critical" if critical else None,
        same_condition_as=(f"{other_severity}:{episode.isoformat()}",),
    )


RULE = RuleSpec(NAME, LowBalanceConfig, evaluate)
