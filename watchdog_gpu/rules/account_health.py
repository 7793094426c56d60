"""account_health: a provider account that cannot be read is told — a rejected key at once, any
other failure once it has lasted ``outage_after`` — and told again once it can be read.

While an account cannot be listed nothing in it can be protected, so the user hears it, with the
instances at risk and what they billed an hour. One episode per outage, from the last poll that
worked. Notifies only; exact semantics: ``docs/safety.md``, "Outage alerts".

```toml
[rules.account_health]
outage_after = "10m"
```
"""

from __future__ import annotations

from datetime import datetime, timedelta

from pydantic import Field

from watchdog_gpu.durations import Duration, format_duration
from watchdog_gpu.fleet import AccountView, FleetView, InstanceView
from watchdog_gpu.model import ActionKind, Finding, InstanceState, Severity
from watchdog_gpu.rules.base import RuleConfig, RuleSpec
from watchdog_gpu.spend import RateFigure, current_rate

NAME = "account_health"
AUTH_ERROR_KIND = "auth"
# Topics (part of the episode key): a rejected key and an outage are told separately.
BAD_KEY = "bad_key"
OUTAGE = "outage"


class AccountHealthConfig(RuleConfig):
    """Notify when a provider account cannot be read: a rejected API key (HTTP 401/403) at once and
    critically; any other failure (5xx, timeouts, a listing that cannot be read) once no poll
    has worked for "outage_after", with the instances and $/h it cannot protect meanwhile. One
    message when it starts, one when the account can be listed again.
    """

    outage_after: Duration = Field(
        default=timedelta(minutes=10),
        description=(
            "An account that cannot be listed this long is told (a rejected key: at once)."
        ),
    )


def evaluate(view: FleetView, now: datetime, config: AccountHealthConfig) -> list[Finding]:
    """One finding per account that cannot be read: critical for a rejected key, a warning for
    an outage that lasted ``outage_after``."""
    findings: list[Finding] = []
    for account in sorted(view.accounts.values(), key=lambda item: item.account):
        finding = _account_finding(view, account, now, config)
        if finding is not None:
            findings.append(finding)
    return findings


def _account_finding(
    view: FleetView, account: AccountView, now: datetime, config: AccountHealthConfig
) -> Finding | None:
    since = account.unreadable_since
    kind = account.last_poll_error_kind
    if since is None or kind is None:
        return None
    bad_key = kind == AUTH_ERROR_KIND
    if not bad_key and now - since < config.outage_after:
        return None
    at_risk = _at_risk(view, account.account)
    rate = current_rate(at_risk)
    return Finding(
        rule=NAME,
        account=account.account,
        instance_id=None,
        severity=Severity.CRITICAL if bad_key else Severity.WARNING,
        action=ActionKind.NOTIFY,
        summary=_summary(kind, now - since, _risk(len(at_risk), rate)),
        episode_started_at=since,
        due_at=since if bad_key else since + config.outage_after,
        evidence={
            "error_kind": kind,
            "unreadable_since": since.isoformat(),
            "last_error_at": account.last_poll_error_at.isoformat()
            if account.last_poll_error_at
            else None,
            "instances_at_risk": len(at_risk),
            "usd_per_hour_at_risk": round(rate.usd_per_hour, 4),
            "instances_at_unknown_rate": rate.unknown_instances,
        },
        usd_per_hour_at_stake=rate.usd_per_hour,
        topic=BAD_KEY if bad_key else OUTAGE,
    )


def _at_risk(view: FleetView, account: str) -> list[InstanceView]:
    """The account's instances that may still bill (all but the gone ones)."""
    return [i for i in view.instances_of(account) if i.state is not InstanceState.GONE]


def _risk(instances: int, rate: RateFigure) -> str:
    unknown = f" (+{rate.unknown_instances} at an unknown rate)" if rate.unknown_instances else ""
    return f"{instances} instance(s) at ${rate.usd_per_hour:.2f}/h{unknown}"


def _summary(kind: str, lasted: timedelta, risk: str) -> str:
    if kind == AUTH_ERROR_KIND:
        return (
            f"the provider rejects the API key: {risk} unprotected — fix or replace the key; "
            "nothing in this account can be watched or stopped meanwhile"
        )
    return (
        f"cannot be listed for {format_duration(max(lasted, timedelta(0)))} ({kind}): {risk} "
        "unprotected — its instances cannot be watched or stopped meanwhile; their spend is "
        "estimated at the last known rates"
    )


def cleared_reason(finding: Finding, view: FleetView) -> str:
    """Why an account_health episode ended, for its resolution message."""
    account = finding.account
    current = view.accounts.get(account)
    if current is None:
        return "account no longer configured"
    if current.last_poll_error_kind is None:
        return f"recovered: account {account} can be listed again"
    kind = current.last_poll_error_kind
    return f"account {account} still cannot be listed, now failing with {kind}"


RULE = RuleSpec(NAME, AccountHealthConfig, evaluate, cleared=cleared_reason)
