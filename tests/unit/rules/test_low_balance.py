"""low_balance: a short balance or runway is told, once a day at most, critical when urgent."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from tests.unit.rules.builders import account_view, at, fleet, running
from watchdog_gpu.fleet import AccountView, InstanceView
from watchdog_gpu.model import ActionKind, Severity
from watchdog_gpu.rules.low_balance import LowBalanceConfig, evaluate

CONFIG = LowBalanceConfig()  # under $5, or under 6 h of runway


@dataclass(frozen=True)
class Case:
    name: str
    account: AccountView
    instances: tuple[InstanceView, ...]
    severity: Severity | None  # None: no finding


def billing(rate: float) -> InstanceView:
    return running(at(0), at(60), compute=rate, storage=0.0)


CASES = [
    Case("a healthy balance", account_view(balance=100.0), (billing(1.0),), None),
    Case("no balance reported (postpaid)", account_view(balance=None), (billing(1.0),), None),
    Case("balance under the threshold", account_view(balance=4.0), (), Severity.WARNING),
    Case("balance at the threshold", account_view(balance=5.0), (), Severity.WARNING),
    Case("balance just above the threshold", account_view(balance=5.01), (), None),
    Case(
        "runway under 6 h from the instances",
        account_view(balance=20.0),
        (billing(5.0),),
        Severity.WARNING,
    ),
    Case(
        "runway from the provider's reported rate when higher",
        account_view(balance=20.0, spend_rate=5.0),
        (billing(1.0),),
        Severity.WARNING,
    ),
    Case(
        "runway under an hour is critical",
        account_view(balance=6.0),
        (billing(8.0),),
        Severity.CRITICAL,
    ),
    Case("an empty balance is critical", account_view(balance=0.0), (), Severity.CRITICAL),
    Case(
        "a negative balance is critical",
        account_view(balance=-3.0),
        (billing(1.0),),
        Severity.CRITICAL,
    ),
    Case("no spend: runway is not short", account_view(balance=10.0), (), None),
]


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_low_balance_cases(case: Case) -> None:
    findings = evaluate(fleet(at(60), *case.instances, accounts=[case.account]), at(60), CONFIG)
    if case.severity is None:
        assert findings == []
        return
    (finding,) = findings
    assert finding.severity is case.severity
    assert finding.action is ActionKind.NOTIFY
    assert finding.instance_id is None


def test_the_evidence_shows_balance_rate_and_runway() -> None:
    view = fleet(at(60), billing(5.0), accounts=[account_view(balance=20.0)])
    (finding,) = evaluate(view, at(60), CONFIG)
    assert finding.evidence["balance_usd"] == 20.0
    assert finding.evidence["spend_usd_per_hour"] == pytest.approx(5.0)
    assert finding.evidence["runway_hours"] == pytest.approx(4.0)
    assert "runway 4.0 h at $5.00/h is under 6 h" in finding.summary


def test_one_episode_a_day_and_another_when_it_turns_critical() -> None:
    warning = fleet(at(60), billing(5.0), accounts=[account_view(balance=20.0)])
    critical = fleet(at(90), billing(5.0), accounts=[account_view(balance=2.0)])
    next_day = fleet(at(0, days=1), billing(5.0), accounts=[account_view(balance=20.0)])
    keys = [
        evaluate(warning, at(60), CONFIG)[0].episode_key,
        evaluate(warning, at(61), CONFIG)[0].episode_key,
        evaluate(critical, at(90), CONFIG)[0].episode_key,
        evaluate(next_day, at(0, days=1), CONFIG)[0].episode_key,
    ]
    assert keys[0] == keys[1]
    assert len(set(keys)) == 3


def test_thresholds_can_be_switched_off() -> None:
    config = LowBalanceConfig(min_balance_usd=None, min_runway=None)
    view = fleet(at(60), billing(5.0), accounts=[account_view(balance=1.0)])
    assert evaluate(view, at(60), config) == []
