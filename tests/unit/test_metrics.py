"""The Prometheus metrics: counters from loop events, gauges read from a real SQLite store at
scrape time, the metric-name contract of deploy/README.md, and the loopback endpoint."""

from __future__ import annotations

import re
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from watchdog_gpu import __version__
from watchdog_gpu.clock import VirtualClock
from watchdog_gpu.config import load_settings
from watchdog_gpu.config.sections import RulesConfig
from watchdog_gpu.errors import StoreError
from watchdog_gpu.evidence import account_evidence
from watchdog_gpu.fuse_count import acted_in_last_hour
from watchdog_gpu.metrics import (
    Metrics,
    MetricsConfig,
    new_registry,
    serve_metrics,
    stop_metrics,
)
from watchdog_gpu.metrics.standby import standby_registry
from watchdog_gpu.model import (
    AccountObservation,
    AccountSnapshot,
    ActionKind,
    ActionStatus,
    Finding,
    GpuSample,
    InstanceSnapshot,
    InstanceState,
    PlannedAction,
    PlannedNotification,
    PlanStatus,
    ProbeOutcome,
    ProbeStatus,
    SampleSource,
    Severity,
    Verdict,
    VolumeSnapshot,
)
from watchdog_gpu.plan import Decision, Plan, action_key
from watchdog_gpu.reports import DeliveryReport, ExecutorReport, StepOutcome, TickReport
from watchdog_gpu.rules import budget as budget_rule
from watchdog_gpu.rules.budget import BudgetConfig, BudgetLimits
from watchdog_gpu.rules.hygiene import HygieneConfig
from watchdog_gpu.spend import day_start
from watchdog_gpu.store import Store, create_engine_for, sqlite_url

ROOT = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)
NOW = T0 + timedelta(minutes=60)
VAST, RUNPOD = "vast-main", "runpod-lab"
ACCOUNTS = {VAST: "vast", RUNPOD: "runpod", "lambda-new": "lambda"}


def at(minute: float) -> datetime:
    return T0 + timedelta(minutes=minute)


def snapshot(
    instance_id: str,
    state: InstanceState,
    minute: float,
    *,
    account: str = VAST,
    compute: float | None = 1.0,
    storage: float | None = 0.0,
    gpu_count: int = 1,
) -> InstanceSnapshot:
    return InstanceSnapshot(
        provider=ACCOUNTS[account],
        account=account,
        instance_id=instance_id,
        name=f"job-{instance_id}",
        state=state,
        raw_state=state.value,
        observed_at=at(minute),
        compute_usd_per_hour=compute,
        storage_usd_per_hour=storage,
        gpu_count=gpu_count,
        ssh_host="127.0.0.1",
        ssh_port=2222,
    )


def poll(
    store: Store,
    minute: float,
    account: str,
    *instances: InstanceSnapshot,
    balance: float | None = None,
    volumes: tuple[VolumeSnapshot, ...] = (),
) -> None:
    account_snapshot = AccountSnapshot(
        provider=ACCOUNTS[account], account=account, observed_at=at(minute), balance_usd=balance
    )
    store.record_observation(
        AccountObservation(account_snapshot, tuple(instances), volumes=volumes), at(minute)
    )


def gpu_sample(instance_id: str, minute: float, sm: float | None) -> GpuSample:
    verdict = Verdict.UNKNOWN if sm is None else Verdict.BUSY if sm > 5 else Verdict.IDLE
    return GpuSample(VAST, instance_id, at(minute), 0, verdict, SampleSource.DMON, sm=sm)


def probed(store: Store, instance_id: str, minute: float, sm: float | None) -> None:
    store.record_probe(
        ProbeOutcome(
            VAST,
            instance_id,
            at(minute),
            ProbeStatus.OK,
            1.0,
            samples=(gpu_sample(instance_id, minute, sm),),
            interactive_login=False,
        )
    )


def volume(volume_id: str, usd_per_hour: float | None) -> VolumeSnapshot:
    return VolumeSnapshot("runpod", RUNPOD, volume_id, f"vol-{volume_id}", NOW, 50.0, usd_per_hour)


def record_fleet(store: Store) -> None:
    """One hour of a small fleet, polled every 10 minutes (the expected figures in the tests
    are worked out by hand from this):

    vast-main: 101 running $1/h, busy at minute 15 and idle from minute 20; 102 running $2/h,
    busy; 103 running $1+0.5/h, paused at minute 20 (storage $0.5/h); 104 running $0.5/h, never
    probed (blind); 105 running $1/h, gone at minute 10. runpod-lab: 201 stopped (storage $0.2/h);
    202 running at an unknown compute rate (storage $0.1/h); volumes at $0.05/h and unknown.
    """
    for minute in range(0, 61, 10):
        vast = [
            snapshot("101", InstanceState.RUNNING, minute),
            snapshot("102", InstanceState.RUNNING, minute, compute=2.0),
            snapshot(
                "103",
                InstanceState.RUNNING if minute < 20 else InstanceState.PAUSED,
                minute,
                storage=0.5,
            ),
            snapshot("104", InstanceState.RUNNING, minute, compute=0.5),
        ]
        if minute == 0:
            vast.append(snapshot("105", InstanceState.RUNNING, minute))
        poll(store, minute, VAST, *vast, balance=25.0)
        runpod = [
            snapshot("201", InstanceState.STOPPED, minute, account=RUNPOD, storage=0.2),
            snapshot(
                "202", InstanceState.RUNNING, minute, account=RUNPOD, compute=None, storage=0.1
            ),
        ]
        volumes = (volume("v1", 0.05), volume("v2", None)) if minute == 60 else ()
        poll(store, minute, RUNPOD, *runpod, volumes=volumes)
    probed(store, "101", 5, 0.0)
    probed(store, "101", 15, 80.0)
    for minute in range(20, 61, 2):
        probed(store, "101", minute, 0.0)
    probed(store, "102", 58, 90.0)
    probed(store, "102", 60, 95.0)


def scraped(registry: CollectorRegistry) -> str:
    return generate_latest(registry).decode()


def exported_names(registry: CollectorRegistry) -> set[str]:
    names = set()
    for family in registry.collect():
        names.add(f"{family.name}_total" if family.type == "counter" else family.name)
    return names


@pytest.fixture
def fleet_registry(store: Store) -> CollectorRegistry:
    record_fleet(store)
    registry = CollectorRegistry()
    budget = BudgetConfig(daily_usd=10.0, accounts={VAST: BudgetLimits(monthly_usd=100.0)})
    config = MetricsConfig(accounts=ACCOUNTS, budget=budget)
    Metrics(registry, config, store=store, clock=VirtualClock(NOW))
    return registry


def value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    """One sample's value (every call is a scrape of its own)."""
    return registry.get_sample_value(name, labels)


def actions(
    registry: CollectorRegistry, rule: str, action: str, outcome: str, *, account: str = VAST
) -> float | None:
    """``watchdog_gpu_actions_total`` of one account, rule, action and outcome."""
    labels = {"account": account, "rule": rule, "action": action, "outcome": outcome}
    return value(registry, "watchdog_gpu_actions_total", **labels)


def collect_once(
    registry: CollectorRegistry,
) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of one scrape, by name and sorted labels."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in registry.collect()
        for sample in family.samples
    }


# -- the contract -----------------------------------------------------------------------------


def readme_metric_names() -> set[str]:
    """Every metric named in a table of deploy/README.md (the contract and the further ones)."""
    readme = (ROOT / "deploy" / "README.md").read_text()
    return set(re.findall(r"^\| `(watchdog_gpu_[a-z_]+)` \|", readme, flags=re.MULTILINE))


def test_the_exporter_exports_exactly_the_metric_names_the_deploy_readme_lists(
    fleet_registry: CollectorRegistry,
) -> None:
    documented = readme_metric_names()
    standby = {
        name
        for name in exported_names(standby_registry("vps-2"))
        if name.startswith("watchdog_gpu_")  # not process_* and python_*
    }

    assert exported_names(fleet_registry) | standby == documented
    assert standby == {"watchdog_gpu_up", "watchdog_gpu_standby"}
    assert "watchdog_gpu_actions_total" in documented


def test_the_alert_rules_only_use_names_the_exporter_exports(
    fleet_registry: CollectorRegistry,
) -> None:
    alerts = (ROOT / "deploy" / "prometheus" / "alerts.yml").read_text()
    named = re.findall(r"watchdog_gpu_[a-z_]+", alerts)
    # a histogram is read through its _sum/_count/_bucket series
    used = {re.sub(r"_seconds_(sum|count|bucket)$", "_seconds", name) for name in named}

    assert used
    assert used - exported_names(fleet_registry) - exported_names(standby_registry("n")) == set()


def test_no_created_series_are_exposed(store: Store) -> None:
    registry = CollectorRegistry()
    metrics = Metrics(
        registry, MetricsConfig(accounts=ACCOUNTS), store=store, clock=VirtualClock(NOW)
    )
    metrics.record_poll(VAST, "vast", "ok")

    assert "_created" not in scraped(registry)


# -- gauges read from the store ---------------------------------------------------------------


def test_instances_are_counted_by_account_provider_and_state_with_zeros_and_without_gone_ones(
    fleet_registry: CollectorRegistry,
) -> None:
    def count(account: str, provider: str, state: str) -> float | None:
        return value(
            fleet_registry,
            "watchdog_gpu_instances",
            account=account,
            provider=provider,
            state=state,
        )

    assert count(VAST, "vast", "running") == 3  # 101, 102, 104 (105 is gone)
    assert count(VAST, "vast", "paused") == 1
    assert count(VAST, "vast", "stopped") == 0
    assert count(RUNPOD, "runpod", "stopped") == 1
    assert count(RUNPOD, "runpod", "running") == 1
    assert count("lambda-new", "lambda", "running") == 0  # configured, never polled
    assert count(VAST, "vast", "gone") is None


def test_the_spend_rate_splits_compute_and_storage_and_counts_unknown_rates_apart(
    fleet_registry: CollectorRegistry,
) -> None:
    def rate(account: str, provider: str, kind: str) -> tuple[float | None, float | None]:
        labels = {"account": account, "provider": provider, "kind": kind}
        return (
            fleet_registry.get_sample_value("watchdog_gpu_spend_rate_usd_per_hour", labels),
            fleet_registry.get_sample_value("watchdog_gpu_spend_rate_unknown_items", labels),
        )

    assert rate(VAST, "vast", "compute") == (3.5, 0)  # 1 + 2 + 0.5; 103 is paused
    assert rate(VAST, "vast", "storage") == (0.5, 0)
    assert rate(RUNPOD, "runpod", "compute") == (0.0, 1)  # 202's compute rate is unknown
    storage, unknown = rate(RUNPOD, "runpod", "storage")
    assert storage == pytest.approx(0.35)  # 201 + 202 + the priced volume
    assert unknown == 1  # the volume without a price
    assert rate("lambda-new", "lambda", "compute") == (0.0, 0)


def test_balance_is_exposed_only_when_the_provider_says_it(
    fleet_registry: CollectorRegistry,
) -> None:
    assert value(fleet_registry, "watchdog_gpu_balance_usd", account=VAST, provider="vast") == 25.0
    assert (
        value(fleet_registry, "watchdog_gpu_balance_usd", account=RUNPOD, provider="runpod") is None
    )


def test_the_last_successful_poll_survives_a_failed_poll_and_is_0_before_any(
    store: Store,
) -> None:
    poll(store, 0, VAST, snapshot("101", InstanceState.RUNNING, 0))
    poll(store, 10, VAST, snapshot("101", InstanceState.RUNNING, 10))
    store.record_poll_failure(VAST, "vast", "auth", "401 from the API", at(20))
    registry = CollectorRegistry()
    Metrics(registry, MetricsConfig(accounts=ACCOUNTS), store=store, clock=VirtualClock(at(20)))
    name = "watchdog_gpu_last_successful_poll_timestamp_seconds"

    assert value(registry, name, account=VAST, provider="vast") == at(10).timestamp()
    assert value(registry, name, account="lambda-new", provider="lambda") == 0


def test_unwatched_spend_is_the_last_listed_rate_of_an_account_that_cannot_be_listed(
    store: Store,
) -> None:
    poll(store, 0, VAST, snapshot("101", InstanceState.RUNNING, 0, compute=2.0))
    poll(store, 10, VAST, snapshot("101", InstanceState.RUNNING, 10, compute=2.0))
    poll(store, 10, RUNPOD, snapshot("201", InstanceState.RUNNING, 10, account=RUNPOD))
    store.record_poll_failure(VAST, "vast", "transient", "HTTP 500", at(20))
    registry = CollectorRegistry()
    Metrics(registry, MetricsConfig(accounts=ACCOUNTS), store=store, clock=VirtualClock(at(20)))
    name = "watchdog_gpu_unwatched_usd_per_hour"

    listed = value(registry, name, account=RUNPOD, provider="runpod")
    assert value(registry, name, account=VAST, provider="vast") == pytest.approx(2.0)
    assert listed == 0


def test_period_spend_is_known_dollars_with_unknown_time_apart_and_ceilings_only_when_set(
    fleet_registry: CollectorRegistry,
) -> None:
    def spend(scope: str, period: str) -> float | None:
        return value(fleet_registry, "watchdog_gpu_period_spend_usd", scope=scope, period=period)

    def ceiling(scope: str, period: str) -> float | None:
        return value(fleet_registry, "watchdog_gpu_period_ceiling_usd", scope=scope, period=period)

    # vast: 101 $1, 102 $2, 103 $1.5/h x 20 min + $0.5/h x 40 min, 104 $0.5, 105 $1/h x 10 min
    vast = 1.0 + 2.0 + 0.5 + 0.5 / 1.5 + 0.5 + 1.0 / 6
    assert spend(VAST, "day") == pytest.approx(vast)
    assert spend(VAST, "month") == pytest.approx(vast)
    assert spend(RUNPOD, "day") == pytest.approx(0.2)  # 201's storage; 202's cost is unknown
    assert spend("global", "day") == pytest.approx(vast + 0.2)
    unknown = "watchdog_gpu_period_spend_unknown_seconds"
    assert value(fleet_registry, unknown, scope=RUNPOD, period="day") == 3600
    assert value(fleet_registry, unknown, scope=VAST, period="day") == 0
    assert ceiling("global", "day") == 10.0
    assert ceiling("global", "month") is None
    assert ceiling(VAST, "month") == 100.0
    assert ceiling(VAST, "day") is None
    assert ceiling(RUNPOD, "day") is None


def test_period_spend_counts_volumes_and_is_the_figure_the_budget_rule_reads(
    store: Store,
) -> None:
    # A stopped pod's disk at $0.20/h and a network volume at $0.30/h for an hour: $0.50.
    for minute in range(0, 61, 10):
        stopped = snapshot("201", InstanceState.STOPPED, minute, account=RUNPOD, storage=0.2)
        poll(store, minute, RUNPOD, stopped, volumes=(volume("v1", 0.3),))
    registry = CollectorRegistry()
    budget = BudgetConfig(daily_usd=0.45)
    config = MetricsConfig(accounts={RUNPOD: "runpod"}, budget=budget)
    Metrics(registry, config, store=store, clock=VirtualClock(NOW))

    spent = value(registry, "watchdog_gpu_period_spend_usd", scope=RUNPOD, period="day")
    assert spent == pytest.approx(0.5)
    view = store.load_fleet_view(NOW, timedelta(hours=1), day_start(NOW, "UTC"))
    (finding,) = budget_rule.evaluate(view, NOW, budget)
    assert "daily spend $0.50 reached the $0.45 ceiling" in str(finding.evidence["breaches"])


def test_a_disabled_budget_rule_exposes_no_ceiling(store: Store) -> None:
    record_fleet(store)
    registry = CollectorRegistry()
    budget = BudgetConfig(enabled=False, daily_usd=10.0)
    Metrics(registry, MetricsConfig(budget=budget), store=store, clock=VirtualClock(NOW))

    assert "watchdog_gpu_period_ceiling_usd{" not in scraped(registry)
    assert value(registry, "watchdog_gpu_period_spend_usd", scope="global", period="day")


def test_paused_stopped_and_idle_time_is_exposed_per_instance_and_busy_or_gone_ones_have_none(
    fleet_registry: CollectorRegistry,
) -> None:
    series = {
        (labels["account"], labels["instance_id"], labels["state"]): sample_value
        for family in fleet_registry.collect()
        if family.name == "watchdog_gpu_instance_state_seconds"
        for _, labels, sample_value, *_ in family.samples
    }

    assert series == {
        # The idle rule's clock: from the first idle sample after the busy one at minute 15.
        (VAST, "101", "idle"): 40 * 60,
        (VAST, "103", "paused"): 40 * 60,
        (RUNPOD, "201", "stopped"): 60 * 60,
    }


def test_the_idle_rate_is_what_the_instances_on_the_idle_clock_bill_per_account(
    fleet_registry: CollectorRegistry,
) -> None:
    series = {
        (labels["account"], labels["provider"]): sample_value
        for family in fleet_registry.collect()
        if family.name == "watchdog_gpu_idle_usd_per_hour"
        for _, labels, sample_value, *_ in family.samples
    }

    # 101 ($1/h) is the one instance the idle clock runs for; 102 is busy, 103 paused (its
    # storage is not idle GPU money), 104 blind; every other account has its 0.
    assert series == {(VAST, "vast"): 1.0, (RUNPOD, "runpod"): 0.0, ("lambda-new", "lambda"): 0.0}


def test_an_idle_instance_at_an_unknown_rate_adds_nothing_to_the_idle_rate(store: Store) -> None:
    for minute in range(0, 31, 10):
        poll(store, minute, VAST, snapshot("101", InstanceState.RUNNING, minute, compute=None))
    for minute in range(0, 31, 2):
        probed(store, "101", minute, 0.0)
    registry = CollectorRegistry()
    Metrics(
        registry, MetricsConfig(accounts={VAST: "vast"}), store=store, clock=VirtualClock(at(30))
    )

    assert value(
        registry,
        "watchdog_gpu_instance_state_seconds",
        account=VAST,
        instance_id="101",
        state="idle",
    )
    assert value(registry, "watchdog_gpu_idle_usd_per_hour", account=VAST, provider="vast") == 0.0


def test_an_instance_whose_newest_sample_is_stale_is_not_called_idle(store: Store) -> None:
    poll(store, 0, VAST, snapshot("101", InstanceState.RUNNING, 0))
    for minute in range(0, 21, 2):
        probed(store, "101", minute, 0.0)
    poll(store, 30, VAST, snapshot("101", InstanceState.RUNNING, 30))
    registry = CollectorRegistry()
    Metrics(registry, MetricsConfig(), store=store, clock=VirtualClock(at(30)))

    # 10 minutes without a sample: the GPU may be working now; it is blind time, not idle time
    assert "watchdog_gpu_instance_state_seconds{" not in scraped(registry)
    registry_then = CollectorRegistry()
    Metrics(registry_then, MetricsConfig(), store=store, clock=VirtualClock(at(21)))
    idle = value(
        registry_then,
        "watchdog_gpu_instance_state_seconds",
        account=VAST,
        instance_id="101",
        state="idle",
    )
    # The idle rule's clock: no activity seen, so it counts from arming (arm_after, minute 20).
    assert idle == 60


def test_blind_instances_are_running_ones_without_usable_gpu_data_for_the_unobserved_window(
    fleet_registry: CollectorRegistry,
) -> None:
    # 104 and runpod's 202 were never probed in an hour; 101 and 102 have fresh samples
    assert value(fleet_registry, "watchdog_gpu_blind_instances") == 2


@pytest.mark.parametrize(("idle_evidence", "blind"), [("ssh", 2), ("provider_api", 1)])
def test_a_pod_seen_only_through_idle_readings_is_blind_unless_its_account_opts_in(
    store: Store, idle_evidence: str, blind: int
) -> None:
    # RunPod's 202 reads 0 % at every poll: no usable data unless the readings may prove idle
    # (the unobserved rule's judgement, Settings.evidence).
    record_fleet(store)
    store.record_samples(
        [
            GpuSample(RUNPOD, "202", at(minute), 0, Verdict.IDLE, SampleSource.PROVIDER_API, sm=0.0)
            for minute in range(0, 61, 10)
        ]
    )
    evidence = {RUNPOD: account_evidence(RUNPOD, "runpod", ssh=False, idle_evidence=idle_evidence)}
    registry = CollectorRegistry()
    Metrics(
        registry,
        MetricsConfig(accounts=ACCOUNTS, evidence=evidence),
        store=store,
        clock=VirtualClock(NOW),
    )
    assert value(registry, "watchdog_gpu_blind_instances") == blind


@pytest.mark.parametrize(("idle_evidence", "shown"), [("ssh", False), ("provider_api", True)])
def test_the_idle_gauge_counts_provider_readings_only_where_they_may_prove_idle(
    store: Store, idle_evidence: str, shown: bool
) -> None:
    # The gauge shows the idle rule's own clock: RunPod's readings alone start it only for an
    # account that opted in (evidence.py), exactly as idle_gpu counts them.
    record_fleet(store)
    store.record_samples(
        [
            GpuSample(RUNPOD, "202", at(minute), 0, Verdict.IDLE, SampleSource.PROVIDER_API, sm=0.0)
            for minute in range(0, 61, 1)
        ]
    )
    evidence = {RUNPOD: account_evidence(RUNPOD, "runpod", ssh=False, idle_evidence=idle_evidence)}
    registry = CollectorRegistry()
    Metrics(
        registry,
        MetricsConfig(accounts=ACCOUNTS, evidence=evidence),
        store=store,
        clock=VirtualClock(NOW),
    )
    idle = value(
        registry,
        "watchdog_gpu_instance_state_seconds",
        account=RUNPOD,
        instance_id="202",
        state="idle",
    )
    assert (idle is not None) is shown


def step(key: str, rule: str, status: str) -> StepOutcome:
    """An executor outcome of a destroy on the Vast account."""
    return StepOutcome(key, rule, status, VAST, ActionKind.DESTROY)


def planned(key: str, kind: ActionKind = ActionKind.DESTROY) -> PlannedAction:
    return PlannedAction(key, VAST, "101", "idle_gpu", kind, False, "idle", T0, key)


def test_unverified_kills_counts_calls_not_yet_confirmed_including_one_being_rechecked(
    store: Store,
) -> None:
    for key, status in [
        ("a", "called"),
        ("b", "unverified"),
        ("c", "verified"),
        ("d", "pending"),
        ("e", "dry_run"),
        ("f", "failed"),
    ]:
        store.enqueue_action(planned(f"{key}:destroy"), status)
    registry = CollectorRegistry()
    Metrics(registry, MetricsConfig(), store=store, clock=VirtualClock(NOW))

    assert value(registry, "watchdog_gpu_unverified_kills") == 2
    claimed = store.claim_actions(NOW, "executor", statuses=("unverified",))
    assert [row.idempotency_key for row in claimed] == ["b:destroy"]
    assert value(registry, "watchdog_gpu_unverified_kills") == 2


def test_the_fuse_gauge_is_the_fuses_own_count_leaving_dry_runs_out(store: Store) -> None:
    at = NOW - timedelta(minutes=10)
    for key, dry_run, status in [
        ("real", False, ActionStatus.VERIFIED),
        ("dry-1", True, ActionStatus.DRY_RUN),
        ("dry-2", True, ActionStatus.DRY_RUN),
        ("held", False, ActionStatus.BLOCKED),
    ]:
        action = PlannedAction(
            key, VAST, "101", "idle_gpu", ActionKind.DESTROY, dry_run, "", at, key
        )
        store.enqueue_action(action, status)
    registry = CollectorRegistry()
    Metrics(registry, MetricsConfig(), store=store, clock=VirtualClock(NOW))
    view = store.load_fleet_view(NOW, timedelta(hours=1), NOW - timedelta(hours=1))

    assert acted_in_last_hour(view.recent_actions, NOW) == 1
    assert value(registry, "watchdog_gpu_fuse_actions_last_hour") == 1


def test_the_notification_backlog_counts_undelivered_messages(store: Store) -> None:
    for key in ("n1", "n2", "n3"):
        store.enqueue_notification(PlannedNotification(key, Severity.WARNING, "title", "body", T0))
    store.mark_notification_delivered("n2", NOW)
    registry = CollectorRegistry()
    Metrics(registry, MetricsConfig(), store=store, clock=VirtualClock(NOW))

    assert value(registry, "watchdog_gpu_notification_backlog") == 2


class BacklogFailingStore(Store):
    """A real store whose outbox count fails, as a locked or corrupt table would make it."""

    def notification_backlog(self) -> int:
        raise StoreError("database error: database disk image is malformed")


def test_a_store_part_that_fails_is_counted_and_the_rest_is_still_exposed(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    record_fleet(store)
    registry = CollectorRegistry()
    failing = BacklogFailingStore(store.engine)
    Metrics(registry, MetricsConfig(accounts=ACCOUNTS), store=failing, clock=VirtualClock(NOW))

    scraped(registry)
    values = collect_once(registry)

    assert values[("watchdog_gpu_up", ())] == 1
    assert ("watchdog_gpu_notification_backlog", ()) not in values
    assert values[("watchdog_gpu_collect_errors_total", (("part", "notifications"),))] == 2
    assert values[("watchdog_gpu_collect_errors_total", (("part", "fleet"),))] == 0
    assert values[("watchdog_gpu_blind_instances", ())] == 2
    assert "part=notifications" in caplog.text
    assert "malformed" in caplog.text


def test_a_database_that_cannot_be_read_at_all_still_answers_up(tmp_path: Path) -> None:
    # A file that is not a database: every read fails.
    broken = tmp_path / "broken.db"
    broken.write_bytes(b"this is not an SQLite database" * 100)
    registry = CollectorRegistry()
    store = Store(create_engine_for(sqlite_url(broken)))
    Metrics(registry, MetricsConfig(accounts=ACCOUNTS), store=store, clock=VirtualClock(NOW))

    values = collect_once(registry)
    store.engine.dispose()

    assert values[("watchdog_gpu_up", ())] == 1
    assert values[("watchdog_gpu_build_info", (("version", __version__),))] == 1
    for part in ("fleet", "notifications", "actions"):
        assert values[("watchdog_gpu_collect_errors_total", (("part", part),))] == 1


# -- counters from loop events ----------------------------------------------------------------


def test_each_action_is_counted_once_per_outcome_it_reaches(store: Store) -> None:
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    first = ExecutorReport(
        (
            step(f"idle_gpu:vast-main/101:{T0.isoformat()}:destroy", "idle_gpu", "unverified"),
            StepOutcome(
                f"paused_interruptible:vast-main/7:{T0.isoformat()}:stop",
                "paused_interruptible",
                "dry_run",
                VAST,
                ActionKind.STOP,
            ),
            step(
                f"idle_gpu:vast-main/102:{T0.isoformat()}:destroy",
                "idle_gpu",
                "pending",
            ),  # a retry: no outcome
        )
    )
    later = ExecutorReport(
        (
            step(
                f"idle_gpu:vast-main/101:{T0.isoformat()}:destroy",
                "idle_gpu",
                "unverified",
            ),  # re-checked
            step(f"idle_gpu:vast-main/101:{T0.isoformat()}:destroy", "idle_gpu", "verified"),
        )
    )
    metrics.record_executor(first)
    metrics.record_executor(later)

    assert actions(registry, "idle_gpu", "destroy", "unverified") == 1
    assert actions(registry, "idle_gpu", "destroy", "verified") == 1
    assert actions(registry, "paused_interruptible", "stop", "dry_run") == 1
    assert actions(registry, "idle_gpu", "destroy", "pending") is None


def test_known_label_sets_start_at_zero_so_panels_and_increase_see_the_first_event() -> None:
    registry = CollectorRegistry()
    Metrics(registry, MetricsConfig(accounts=ACCOUNTS, rules=RulesConfig().by_name()))

    assert actions(registry, "idle_gpu", "destroy", "verified", account=RUNPOD) == 0
    assert actions(registry, "idle_gpu", "destroy", "dry_run", account=RUNPOD) == 0
    assert actions(registry, "low_balance", "notify", "notified", account=RUNPOD) == 0
    assert value(registry, "watchdog_gpu_rule_errors_total", rule="budget") == 0
    assert value(registry, "watchdog_gpu_ssh_errors_total", account=VAST, kind="other") == 0
    labels = {"account": VAST, "provider": "vast", "kind": "other"}
    assert value(registry, "watchdog_gpu_provider_errors_total", **labels) == 0
    assert value(registry, "watchdog_gpu_job_errors_total", phase="evaluate", kind="skipped") == 0
    assert value(registry, "watchdog_gpu_job_errors_total", phase="poll", kind="other") == 0
    # a disabled rule gets no series
    disabled = RulesConfig().by_name() | {"hygiene": HygieneConfig(enabled=False)}
    other = CollectorRegistry()
    Metrics(other, MetricsConfig(accounts=ACCOUNTS, rules=disabled))
    assert other.get_sample_value("watchdog_gpu_rule_errors_total", {"rule": "hygiene"}) is None


def test_action_outcomes_are_counted_for_the_account_and_kind_of_the_actions_row() -> None:
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    instance = Finding("idle_gpu", RUNPOD, "9", Severity.WARNING, ActionKind.DESTROY, "s", T0, T0)
    account = Finding("budget", VAST, None, Severity.WARNING, ActionKind.STOP, "s", T0, T0)
    destroy = action_key(instance, ActionKind.DESTROY)
    stop = action_key(account, ActionKind.STOP, dry_run=True)
    metrics.record_executor(
        ExecutorReport(
            (
                StepOutcome(destroy, "idle_gpu", "verified", RUNPOD, ActionKind.DESTROY),
                StepOutcome(stop, "budget", "dry_run", VAST, ActionKind.STOP),
            )
        )
    )

    assert actions(registry, "idle_gpu", "destroy", "verified", account=RUNPOD) == 1
    assert actions(registry, "budget", "stop", "dry_run") == 1


def test_job_runs_fill_the_duration_histogram_and_errors_are_counted_by_phase() -> None:
    registry = CollectorRegistry()
    intervals = {"poll": timedelta(seconds=60), "evaluate": timedelta(seconds=60)}
    metrics = Metrics(registry, MetricsConfig(job_intervals=intervals))

    metrics.record_job("poll:vast-main", 0.4)
    metrics.record_job("poll:runpod-lab", 1.6)
    metrics.record_job("evaluate", 75.0)
    metrics.record_job_event("evaluate", "skipped")
    metrics.record_job_event("poll:vast-main", "error")
    metrics.record_job_event("a-job-from-the-future", "exploded")

    histogram = "watchdog_gpu_job_duration_seconds"
    assert value(registry, f"{histogram}_count", phase="poll") == 2
    assert value(registry, f"{histogram}_sum", phase="poll") == pytest.approx(2.0)
    assert value(registry, f"{histogram}_bucket", phase="evaluate", le="60.0") == 0
    assert value(registry, "watchdog_gpu_job_errors_total", phase="evaluate", kind="skipped") == 1
    assert value(registry, "watchdog_gpu_job_errors_total", phase="poll", kind="error") == 1
    assert value(registry, "watchdog_gpu_job_errors_total", phase="other", kind="other") == 1
    assert value(registry, "watchdog_gpu_job_interval_seconds", phase="evaluate") == 60
    assert "account" not in scraped(registry).split("watchdog_gpu_job_duration")[1][:200]


def finding(rule: str, instance_id: str, action: ActionKind) -> Finding:
    return Finding(rule, VAST, instance_id, Severity.WARNING, action, "s", T0, T0)


def test_blocked_notified_and_protected_decisions_are_counted_once_per_episode() -> None:
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    blocked = finding("idle_gpu", "101", ActionKind.DESTROY)
    decisions = (
        Decision(blocked, PlanStatus.BLOCKED, False, action=planned("k:destroy")),
        Decision(finding("low_balance", "102", ActionKind.NOTIFY), PlanStatus.NOTIFY, False),
        Decision(finding("budget", "103", ActionKind.STOP), PlanStatus.PROTECTED, False),
        Decision(finding("idle_gpu", "104", ActionKind.DESTROY), PlanStatus.WAIT, False),
    )
    for _tick in range(3):  # every tick re-plans the same episodes
        metrics.record_plan(Plan(decisions))

    assert actions(registry, "idle_gpu", "destroy", "blocked") == 1
    assert actions(registry, "low_balance", "notify", "notified") == 1
    assert actions(registry, "budget", "stop", "protected") == 1
    assert 'outcome="wait"' not in scraped(registry)


def test_polls_and_provider_errors_are_counted_by_kind_with_known_kinds_starting_at_zero() -> None:
    registry = CollectorRegistry()
    metrics = Metrics(registry, MetricsConfig(accounts=ACCOUNTS))

    assert (
        value(
            registry,
            "watchdog_gpu_provider_errors_total",
            account=VAST,
            provider="vast",
            kind="auth",
        )
        == 0
    )
    metrics.record_poll(VAST, "vast", "ok")
    metrics.record_poll(VAST, "vast", "auth")
    metrics.record_poll(VAST, "vast", "something_new")
    metrics.record_provider_error(VAST, "vast", "transient")

    def errors(kind: str) -> float | None:
        return value(
            registry, "watchdog_gpu_provider_errors_total", account=VAST, provider="vast", kind=kind
        )

    assert errors("auth") == 1
    assert errors("transient") == 1
    assert errors("other") == 1
    assert (
        value(registry, "watchdog_gpu_polls_total", account=VAST, provider="vast", outcome="ok")
        == 1
    )
    assert (
        value(registry, "watchdog_gpu_polls_total", account=VAST, provider="vast", outcome="failed")
        == 2
    )


def test_probes_fill_the_latency_histogram_and_failed_ones_count_as_ssh_errors() -> None:
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    outcomes = [
        ProbeOutcome(VAST, "101", NOW, ProbeStatus.OK, 0.8),
        ProbeOutcome(VAST, "102", NOW, ProbeStatus.TIMEOUT, 30.0),
        ProbeOutcome(VAST, "103", NOW, ProbeStatus.HOST_KEY_CHANGED, 0.2),
    ]
    metrics.record_probes(outcomes)
    metrics.record_ssh_error("a_kind_from_the_future", RUNPOD)

    histogram = "watchdog_gpu_probe_duration_seconds"
    assert value(registry, f"{histogram}_count") == 3
    assert value(registry, f"{histogram}_sum") == pytest.approx(31.0)
    assert value(registry, f"{histogram}_bucket", le="1.0") == 2

    def errors(account: str, kind: str) -> float | None:
        return value(registry, "watchdog_gpu_ssh_errors_total", account=account, kind=kind)

    assert errors(VAST, "timeout") == 1
    assert errors(VAST, "host_key_changed") == 1
    assert errors(VAST, "unreachable") is None  # no accounts configured: nothing initialised
    assert errors(RUNPOD, "other") == 1


def test_a_tick_report_records_every_phase() -> None:
    registry = CollectorRegistry()
    metrics = Metrics(registry, MetricsConfig(accounts=ACCOUNTS))
    report = TickReport(
        NOW,
        polled={VAST: "ok", RUNPOD: "rate_limited"},
        probes=[ProbeOutcome(VAST, "101", NOW, ProbeStatus.UNREACHABLE, 5.0)],
        plan=Plan(
            (Decision(finding("low_balance", "1", ActionKind.NOTIFY), PlanStatus.NOTIFY, False),)
        ),
        failed_rules={"hygiene": "KeyError: 'x'"},
        executed=ExecutorReport(
            (
                StepOutcome(
                    f"max_runtime:{RUNPOD}/7:2026-12-01T00:00:00+00:00:stop",
                    "max_runtime",
                    "verified",
                    RUNPOD,
                    ActionKind.STOP,
                ),
            )
        ),
        delivered=DeliveryReport(delivered=2, failed=1),
    )

    metrics.record_tick(report)

    assert (
        value(registry, "watchdog_gpu_polls_total", account=VAST, provider="vast", outcome="ok")
        == 1
    )
    assert (
        value(
            registry,
            "watchdog_gpu_provider_errors_total",
            account=RUNPOD,
            provider="runpod",
            kind="rate_limited",
        )
        == 1
    )
    assert value(registry, "watchdog_gpu_ssh_errors_total", account=VAST, kind="unreachable") == 1
    assert (
        value(
            registry,
            "watchdog_gpu_actions_total",
            account=VAST,
            rule="low_balance",
            action="notify",
            outcome="notified",
        )
        == 1
    )
    assert (
        value(
            registry,
            "watchdog_gpu_actions_total",
            account=RUNPOD,
            rule="max_runtime",
            action="stop",
            outcome="verified",
        )
        == 1
    )
    assert value(registry, "watchdog_gpu_rule_errors_total", rule="hygiene") == 1
    assert value(registry, "watchdog_gpu_notifications_total", outcome="delivered") == 2
    assert value(registry, "watchdog_gpu_notifications_total", outcome="failed") == 1
    assert "KeyError" not in scraped(registry)


# -- configuration and the endpoint -----------------------------------------------------------


def test_the_config_comes_from_settings_and_no_secret_reaches_a_label(
    tmp_path: Path, store: Store
) -> None:
    config_file = tmp_path / "config.toml"
    config_file.write_text(
        '[[accounts]]\nname = "vast-main"\nprovider = "vast"\napi_key = { env = "VAST_KEY" }\n'
        '[rules.budget]\ndaily_usd = 42.0\n[rules.unobserved]\nafter = "45m"\n',
        encoding="utf-8",
    )
    settings = load_settings(config_file, {"VAST_KEY": "canary-secret-1234"})
    config = MetricsConfig.from_settings(settings)
    record_fleet(store)
    registry = CollectorRegistry()
    Metrics(registry, config, store=store, clock=VirtualClock(NOW))

    assert config.accounts == {"vast-main": "vast"}
    assert config.unobserved.after == timedelta(minutes=45)
    assert value(registry, "watchdog_gpu_period_ceiling_usd", scope="global", period="day") == 42.0
    assert "canary-secret" not in scraped(registry)
    # runpod-lab is recorded but no longer configured: its instances are left out
    assert (
        value(
            registry, "watchdog_gpu_instances", account=RUNPOD, provider="runpod", state="stopped"
        )
        is None
    )


def test_the_endpoint_serves_the_registry_on_loopback_and_a_free_port(store: Store) -> None:
    registry = new_registry()
    Metrics(registry, MetricsConfig(accounts=ACCOUNTS), store=store, clock=VirtualClock(NOW))
    server, thread = serve_metrics("127.0.0.1", 0, registry)
    try:
        host, port = server.server_address[:2]
        assert host == "127.0.0.1"
        assert port != 0
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            body = response.read().decode()
    finally:
        stop_metrics(server, thread)

    assert "watchdog_gpu_up 1.0" in body
    assert "process_cpu_seconds_total" in body or "python_info" in body
    assert not thread.is_alive()
