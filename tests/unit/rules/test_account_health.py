"""account_health: an account that cannot be listed is told — a rejected key at once, an outage
after ``outage_after`` — with what it cannot protect meanwhile."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from tests.unit.rules.builders import account_view, at, fleet, instance, running, span
from watchdog_gpu.fleet import AccountView, FleetView
from watchdog_gpu.model import ActionKind, InstanceState, Severity
from watchdog_gpu.rules.account_health import (
    RULE,
    AccountHealthConfig,
    cleared_reason,
    evaluate,
)

CONFIG = AccountHealthConfig()  # 10 minutes


def failing(kind: str, *, ok_at: datetime | None, error_at: datetime) -> AccountView:
    return replace(
        account_view("vast-main"),
        last_poll_ok_at=ok_at,
        last_poll_error_kind=kind,
        last_poll_error_at=error_at,
        first_seen=at(0),
    )


def fleet_of(account: AccountView, now: datetime) -> FleetView:
    busy = running(at(0), at(60), compute=2.0, storage=0.5, account="vast-main", instance_id="1")
    stopped = instance(
        span(InstanceState.STOPPED, at(0), at(60), storage=0.25),
        account="vast-main",
        instance_id="2",
    )
    gone = instance(span(InstanceState.GONE, at(0), at(60)), account="vast-main", instance_id="3")
    return fleet(now, busy, stopped, gone, accounts=[account])


def test_a_working_account_is_not_told() -> None:
    assert evaluate(fleet_of(account_view("vast-main"), at(90)), at(90), CONFIG) == []


def test_an_outage_is_told_once_it_lasted_outage_after() -> None:
    account = failing("transient", ok_at=at(60), error_at=at(69))
    assert evaluate(fleet_of(account, at(69)), at(69), CONFIG) == []
    account = failing("transient", ok_at=at(60), error_at=at(70))
    (finding,) = evaluate(fleet_of(account, at(70)), at(70), CONFIG)
    assert finding.severity is Severity.WARNING
    assert finding.action is ActionKind.NOTIFY
    assert finding.instance_id is None
    assert finding.episode_started_at == at(60)
    assert finding.evidence["error_kind"] == "transient"
    assert finding.evidence["instances_at_risk"] == 2
    assert finding.evidence["usd_per_hour_at_risk"] == 2.75
    assert "2 instance(s) at $2.75/h" in finding.summary
    # The whole outage is one episode.
    later = failing("transient", ok_at=at(60), error_at=at(200))
    (again,) = evaluate(fleet_of(later, at(200)), at(200), CONFIG)
    assert again.episode_key == finding.episode_key


def test_a_rejected_key_is_critical_at_once() -> None:
    account = failing("auth", ok_at=at(60), error_at=at(61))
    (finding,) = evaluate(fleet_of(account, at(61)), at(61), CONFIG)
    assert finding.severity is Severity.CRITICAL
    assert finding.topic == "bad_key"
    assert "rejects the API key" in finding.summary


def test_an_account_that_never_worked_is_unreadable_since_its_first_poll() -> None:
    account = failing("permanent", ok_at=None, error_at=at(15))
    (finding,) = evaluate(fleet_of(account, at(15)), at(15), CONFIG)
    assert finding.episode_started_at == at(0)


def test_outage_after_is_configurable() -> None:
    config = AccountHealthConfig(outage_after=timedelta(minutes=30))
    account = failing("transient", ok_at=at(60), error_at=at(80))
    assert evaluate(fleet_of(account, at(80)), at(80), config) == []


def test_the_resolution_says_whether_the_account_recovered() -> None:
    broken = fleet_of(failing("auth", ok_at=at(60), error_at=at(90)), at(90))
    (finding,) = evaluate(broken, at(90), CONFIG)
    ok = fleet_of(account_view("vast-main"), at(90))
    assert cleared_reason(finding, ok).startswith("recovered")
    assert "now failing with auth" in cleared_reason(finding, broken)
    assert RULE.cleared_reason(finding, ok) == cleared_reason(finding, ok)  # the rule's hook
