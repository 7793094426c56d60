"""budget: day/month/rate ceilings globally and per account, balance floors, time zones and
unknown cost."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from tests.unit.rules.builders import account_view, at, fleet, instance, running, span
from watchdog_gpu.fleet import AccountView, FleetView, InstanceView
from watchdog_gpu.model import ActionKind, Finding, InstanceState, Severity
from watchdog_gpu.rules.budget import BudgetConfig, BudgetLimits, evaluate, spend_since

START = at(0)
UNTIL = at(600)


def vast(start: datetime = START, until: datetime = UNTIL, rate: float = 1.0) -> InstanceView:
    return running(start, until, compute=rate, storage=0.0, account="vast-main", instance_id="1")


def runpod(start: datetime = START, until: datetime = UNTIL, rate: float = 2.0) -> InstanceView:
    return running(
        start,
        until,
        compute=rate,
        storage=0.0,
        account="rp-main",
        provider="runpod",
        instance_id="a",
    )


def judge(
    now: datetime,
    *instances: InstanceView,
    config: BudgetConfig,
    accounts: tuple[AccountView, ...] = (),
) -> dict[str, Finding]:
    view: FleetView = fleet(now, *instances, accounts=accounts)
    return {finding.subject: finding for finding in evaluate(view, now, config)}


def test_nothing_is_enforced_without_a_ceiling() -> None:
    assert judge(at(600), vast(), runpod(), config=BudgetConfig()) == {}


def test_the_global_daily_ceiling_counts_spend_across_two_providers() -> None:
    # $1/h + $2/h from 20:00 UTC: $5 is reached 100 minutes in.
    config = BudgetConfig(daily_usd=5.0)
    assert judge(at(90), vast(), runpod(), config=config) == {}
    findings = judge(at(110), vast(), runpod(), config=config)
    assert set(findings) == {"vast-main/1", "rp-main/a"}
    for finding in findings.values():
        assert finding.severity is Severity.CRITICAL
        assert finding.action is ActionKind.DESTROY
        assert finding.episode_started_at == at(100)
        assert finding.due_at == at(100)  # skip_grace: act at once
        assert "global daily spend $5.50 reached the $5.00 ceiling" in finding.summary


def test_an_account_ceiling_only_concerns_that_account() -> None:
    config = BudgetConfig(accounts={"vast-main": BudgetLimits(daily_usd=1.0)})
    findings = judge(at(90), vast(), runpod(), config=config)
    assert set(findings) == {"vast-main/1"}
    assert findings["vast-main/1"].episode_started_at == at(60)
    assert findings["vast-main/1"].evidence["scopes"] == "account vast-main"


def test_the_day_is_counted_in_the_configured_time_zone() -> None:
    # 20:00 UTC on 2 March is 21:00 in Berlin; the Berlin day starts again at 23:00 UTC.
    now = at(200)  # 23:20 UTC: $10 since 20:00 UTC, but only $1 since the Berlin midnight
    assert judge(now, vast(), runpod(), config=BudgetConfig(daily_usd=5.0)) != {}
    berlin = BudgetConfig(daily_usd=5.0, timezone="Europe/Berlin")
    assert judge(now, vast(), runpod(), config=berlin) == {}


def test_a_new_local_day_starts_a_new_episode() -> None:
    berlin = BudgetConfig(daily_usd=5.0, timezone="Europe/Berlin")
    first = judge(at(170), vast(), runpod(), config=berlin)["vast-main/1"]  # 22:50 UTC, Mar 2
    second = judge(at(300), vast(), runpod(), config=berlin)["vast-main/1"]  # 01:00 UTC, Mar 3
    assert first.episode_started_at == at(100)
    assert second.episode_started_at == at(280)  # 23:00 UTC + $5 at $3/h = 100 minutes
    assert first.episode_key != second.episode_key


def test_the_monthly_ceiling_ignores_last_month() -> None:
    start = datetime(2026, 2, 27, 0, 0, tzinfo=UTC)
    job = running(start, datetime(2026, 3, 5, tzinfo=UTC), compute=2.0, storage=0.0)
    config = BudgetConfig(monthly_usd=100.0)
    assert judge(datetime(2026, 3, 3, 1, 0, tzinfo=UTC), job, config=config) == {}
    (finding,) = judge(datetime(2026, 3, 3, 3, 0, tzinfo=UTC), job, config=config).values()
    assert finding.episode_started_at == datetime(2026, 3, 3, 2, 0, tzinfo=UTC)
    assert spend_since(datetime(2026, 3, 3, 3, 0, tzinfo=UTC), config) == datetime(
        2026, 3, 1, tzinfo=UTC
    )


def test_the_rate_ceiling_is_dated_from_when_the_rate_rose_above_it() -> None:
    config = BudgetConfig(max_usd_per_hour=2.5)
    late = runpod(start=at(50), until=at(60))
    assert judge(at(40), vast(until=at(40)), config=config) == {}
    assert judge(at(60), vast(), late, config=BudgetConfig(max_usd_per_hour=3.0)) == {}
    findings = judge(at(60), vast(), late, config=config)
    assert {f.episode_started_at for f in findings.values()} == {at(50)}
    assert "spend rate $3.00/h exceeds the $2.50/h ceiling" in findings["vast-main/1"].summary


def test_the_providers_reported_rate_counts_when_it_is_higher() -> None:
    config = BudgetConfig(max_usd_per_hour=3.0)
    reports = (account_view("vast-main", balance=100.0, spend_rate=5.0),)
    assert judge(at(60), vast(), config=config) == {}
    (finding,) = judge(at(60), vast(), config=config, accounts=reports).values()
    assert "$5.00/h" in finding.summary
    # A reported rate cannot be dated: the instance's own state start is the episode.
    assert finding.episode_started_at == at(0)
    assert finding.evidence["breach_started_at"] is None


def test_a_balance_under_the_floor_concerns_that_account() -> None:
    config = BudgetConfig(min_balance_usd=1.0)
    accounts = (
        account_view("vast-main", balance=0.5),
        account_view("rp-main", provider="runpod", balance=40.0),
    )
    findings = judge(at(60), vast(), runpod(), config=config, accounts=accounts)
    assert set(findings) == {"vast-main/1"}
    assert "balance $0.50 is at or under the $1.00 floor" in findings["vast-main/1"].summary


def test_a_floor_on_a_balance_the_provider_does_not_vouch_for_only_alerts() -> None:
    # RunPod's clientBalance is the spendable balance; Vast documents no such field for every
    # kind of key (docs/providers.md, "Balances"): its floor alerts and never destroys.
    config = BudgetConfig(min_balance_usd=1.0)
    accounts = (
        account_view("vast-main", balance=0.5),
        account_view("rp-main", provider="runpod", balance=0.5),
    )
    findings = judge(at(60), vast(), runpod(), config=config, accounts=accounts)
    assert findings["vast-main/1"].action is ActionKind.NOTIFY
    assert findings["vast-main/1"].severity is Severity.CRITICAL
    assert "alert only" in findings["vast-main/1"].summary
    assert findings["rp-main/a"].action is ActionKind.DESTROY


def test_an_instance_in_an_unknown_state_is_reported_in_an_emergency_never_destroyed() -> None:
    config = BudgetConfig(daily_usd=0.5)
    unknown = instance(
        span(InstanceState.UNKNOWN, at(0), at(60), compute=None, storage=None),
        instance_id="u",
    )
    findings = judge(at(60), vast(), unknown, config=config)
    assert findings["vast-main/u"].action is ActionKind.NOTIFY
    assert findings["vast-main/1"].action is ActionKind.DESTROY


def test_a_vast_floor_with_a_spend_ceiling_reached_too_still_acts() -> None:
    config = BudgetConfig(min_balance_usd=1.0, daily_usd=0.5)
    accounts = (account_view("vast-main", balance=0.5),)
    (finding,) = judge(at(60), vast(), config=config, accounts=accounts).values()
    assert finding.action is ActionKind.DESTROY


def test_a_balance_equal_to_the_floor_has_reached_it() -> None:
    config = BudgetConfig(min_balance_usd=1.0)
    accounts = (account_view("vast-main", balance=1.0),)
    findings = judge(at(60), vast(), config=config, accounts=accounts)
    assert set(findings) == {"vast-main/1"}
    assert "balance $1.00 is at or under the $1.00 floor" in findings["vast-main/1"].summary
    above = (account_view("vast-main", balance=1.01),)
    assert judge(at(60), vast(), config=config, accounts=above) == {}


def test_an_unreadable_account_keeps_billing_its_last_known_rate() -> None:
    # Vast was last listed at 60 minutes ($6/h) and its polls fail since; RunPod is listed
    # every minute ($2/h). $10 is reached at 75 minutes only if Vast keeps counting.
    config = BudgetConfig(daily_usd=10.0)
    failing = replace(
        account_view("vast-main"),
        last_poll_ok_at=at(60),
        last_poll_error_kind="transient",
        last_poll_error_at=at(90),
    )
    accounts = (failing, account_view("rp-main", provider="runpod"))
    listed_until = at(60)
    findings = judge(
        at(90),
        vast(until=listed_until, rate=6.0),
        runpod(until=at(90)),
        config=config,
        accounts=accounts,
    )
    assert set(findings) == {"vast-main/1", "rp-main/a"}
    finding = findings["rp-main/a"]
    assert finding.episode_started_at == at(75)
    assert "estimated at the last known rates" in finding.summary
    assert "$3.00 estimated" in finding.summary  # 30 minutes at $6/h


def test_an_account_floor_overrides_the_global_floor() -> None:
    config = BudgetConfig(
        min_balance_usd=1.0, accounts={"vast-main": BudgetLimits(min_balance_usd=0.2)}
    )
    accounts = (account_view("vast-main", balance=0.5),)
    assert judge(at(60), vast(), config=config, accounts=accounts) == {}


def test_only_billing_instances_are_acted_on() -> None:
    stopped_billing = instance(
        span(InstanceState.STOPPED, at(0), at(600), storage=0.1), instance_id="s"
    )
    stopped_free = instance(
        span(InstanceState.STOPPED, at(0), at(600), storage=0.0), instance_id="f"
    )
    gone = instance(
        span(InstanceState.RUNNING, at(0), at(10)),
        span(InstanceState.GONE, at(11), at(600)),
        instance_id="g",
    )
    unknown = instance(span(InstanceState.UNKNOWN, at(0), at(600)), instance_id="u")
    config = BudgetConfig(accounts={"vast-main": BudgetLimits(daily_usd=1.0)})
    findings = judge(at(600), vast(), stopped_billing, stopped_free, gone, unknown, config=config)
    assert set(findings) == {"vast-main/1", "vast-main/s", "vast-main/u"}


def test_unknown_cost_is_reported_not_counted() -> None:
    unknown = instance(span(InstanceState.UNKNOWN, at(0), at(600)), instance_id="u")
    config = BudgetConfig(daily_usd=3.0)
    assert judge(at(170), vast(), unknown, config=config) == {}
    findings = judge(at(230), vast(), unknown, config=config)
    assert set(findings) == {"vast-main/1", "vast-main/u"}  # an unknown rate may be billing
    finding = findings["vast-main/1"]
    assert finding.evidence["spend_unknown"] is True
    assert "3.8 instance-hours of unknown cost, not counted" in finding.summary
    # $1/h alone reaches $3 at 180 minutes: the unknown instance added nothing.
    assert finding.episode_started_at == at(180)


def test_grace_when_configured() -> None:
    config = BudgetConfig(daily_usd=5.0, skip_grace=False, warn_before=timedelta(minutes=15))
    finding = judge(at(110), vast(), runpod(), config=config)["vast-main/1"]
    assert finding.due_at == at(115)
    assert finding.evidence["skip_grace"] is False


def test_the_action_comes_from_the_config() -> None:
    config = BudgetConfig(daily_usd=5.0, action="stop")
    assert {f.action for f in judge(at(110), vast(), runpod(), config=config).values()} == {
        ActionKind.STOP
    }


def test_one_finding_per_instance_lists_every_breach() -> None:
    config = BudgetConfig(daily_usd=5.0, accounts={"vast-main": BudgetLimits(daily_usd=1.0)})
    findings = judge(at(110), vast(), runpod(), config=config)
    vast_finding = findings["vast-main/1"]
    assert vast_finding.evidence["scopes"] == "global, account vast-main"
    assert "and 1 more" in vast_finding.summary
    # The earliest dated breach (the account's $1 at 60 minutes) starts the episode.
    assert vast_finding.episode_started_at == at(60)
    assert findings["rp-main/a"].episode_started_at == at(100)


def test_the_episode_is_stable_across_ticks() -> None:
    config = BudgetConfig(daily_usd=1.0)
    keys = {
        finding.episode_key
        for minute in range(100, 200, 7)
        for finding in judge(at(minute), vast(), config=config).values()
    }
    assert len(keys) == 1


def test_an_instance_started_after_the_breach_is_due_at_once() -> None:
    config = BudgetConfig(daily_usd=5.0)
    newcomer = running(at(150), at(160), compute=0.5, storage=0.0, instance_id="new")
    finding = judge(at(160), vast(), runpod(), newcomer, config=config)["vast-main/new"]
    assert finding.episode_started_at == at(150)
    assert finding.due_at == at(150)
