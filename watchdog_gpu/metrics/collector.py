"""The scrape-time collector: gauges read from the store when Prometheus asks.

Reading at scrape time (instead of setting gauges from the loop) means a gauge can never be
stale or keep a series of an instance that is gone: every scrape builds the families afresh
from one fleet view, so ``instance_id`` cardinality is bounded by the instances that exist.

A scrape never fails because of the store: each part (fleet view, notification backlog, action
outbox) is read on its own; a part that raises is logged, counted in
``watchdog_gpu_collect_errors_total{part}`` and left out, and the rest is still exposed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from watchdog_gpu import __version__
from watchdog_gpu.clock import Clock
from watchdog_gpu.errors import StoreError
from watchdog_gpu.fleet import FleetView
from watchdog_gpu.fuse_count import acted_in_last_hour
from watchdog_gpu.metrics import gauges
from watchdog_gpu.model import ActionResult, ActionStatus
from watchdog_gpu.store.rows import ActionRow

if TYPE_CHECKING:
    from watchdog_gpu.store import Store

log = logging.getLogger(__name__)

Family = GaugeMetricFamily | CounterMetricFamily
PARTS = ("fleet", "notifications", "actions", "leadership")
# Statuses of a stop/destroy whose provider call went out (or may have) and is not confirmed yet.
_SENT = frozenset({ActionStatus.CALLED.value, ActionStatus.UNVERIFIED.value})


def unverified_kills(rows: Iterable[ActionRow]) -> int:
    """Stop/destroy actions sent to the provider and not yet confirmed by a re-listing: called
    or unverified, or claimed by an executor that is verifying or calling them right now."""
    return sum(1 for row in rows if row.status in _SENT or _being_verified_or_called(row))


def _being_verified_or_called(row: ActionRow) -> bool:
    return row.status == ActionStatus.CLAIMED.value and (
        row.claimed_from in _SENT or row.result == ActionResult.CALLING
    )


class StoreCollector(Collector):
    """Builds the store-backed families on every scrape (see the module docstring)."""

    def __init__(self, store: Store, clock: Clock, config: gauges.MetricsConfig) -> None:
        self.store = store
        self.clock = clock
        self.config = config
        self._errors = dict.fromkeys(PARTS, 0)
        self._lock = threading.Lock()

    def describe(self) -> Iterator[Family]:
        # Names only: the registry must not read the store when the collector is registered.
        return iter(_empty_families().values())

    def collect(self) -> Iterator[Family]:
        now = self.clock.now()
        families = _empty_families()
        families["watchdog_gpu_up"].add_metric([], 1)
        families["watchdog_gpu_build_info"].add_metric([__version__], 1)
        self._part("fleet", lambda: self._fleet(now, families))
        self._part("notifications", lambda: self._backlog(families))
        self._part("actions", lambda: self._actions(families))
        self._part("leadership", lambda: self._leadership(families))
        with self._lock:
            for part, errors in self._errors.items():
                families["watchdog_gpu_collect_errors"].add_metric([part], errors)
        return iter(families.values())

    def _part(self, part: str, read: Callable[[], None]) -> None:
        try:
            read()
        except StoreError as error:
            log.warning("metrics: reading a part failed part=%s error=%s", part, error)
            self._count_error(part)
        except Exception:  # a bug in one part must not take the whole endpoint down
            log.exception("metrics: computing a part failed part=%s", part)
            self._count_error(part)

    def _count_error(self, part: str) -> None:
        with self._lock:
            self._errors[part] += 1

    def _backlog(self, families: dict[str, Family]) -> None:
        backlog = self.store.notification_backlog()
        families["watchdog_gpu_notification_backlog"].add_metric([], backlog)

    def _leadership(self, families: dict[str, Family]) -> None:
        leader = self.store.leader()
        if leader is not None:  # PostgreSQL teams only (store/leadership.py)
            families["watchdog_gpu_leader"].add_metric([leader.node], 1)
            families["watchdog_gpu_leader_since_timestamp_seconds"].add_metric(
                [leader.node], leader.since.timestamp()
            )

    def _actions(self, families: dict[str, Family]) -> None:
        statuses = (*sorted(_SENT), ActionStatus.CLAIMED.value)
        count = unverified_kills(self.store.list_actions(statuses=statuses))
        families["watchdog_gpu_unverified_kills"].add_metric([], count)

    def _fleet(self, now: datetime, families: dict[str, Family]) -> None:
        config = self.config
        accounts = dict(config.accounts) if config.accounts is not None else None
        since = gauges.spend_since(now, config.budget)
        view = gauges.with_evidence(
            self.store.load_fleet_view(now, config.lookback, since, accounts), config
        )
        # Computed into a scratch dict first: a failure part-way leaves no half-filled family.
        scratch = _empty_families()
        _fill_fleet(view, now, config, scratch)
        for name, family in scratch.items():
            families[name].samples.extend(family.samples)


def _fill_fleet(
    view: FleetView, now: datetime, config: gauges.MetricsConfig, families: dict[str, Family]
) -> None:
    # The fuse's own count (dry runs and the budget emergency's are not in it), as `fuse status`.
    families["watchdog_gpu_fuse_actions_last_hour"].add_metric(
        [], acted_in_last_hour(view.recent_actions, now)
    )
    for (account, provider, state), count in gauges.instance_counts(view).items():
        families["watchdog_gpu_instances"].add_metric([account, provider, state], count)
    for rate in gauges.spend_rates(view):
        labels = [rate.account, rate.provider, rate.kind]
        families["watchdog_gpu_spend_rate_usd_per_hour"].add_metric(labels, rate.usd_per_hour)
        families["watchdog_gpu_spend_rate_unknown_items"].add_metric(labels, rate.unknown)
    _fill_accounts(view, families)
    _fill_period_spend(view, now, config, families)
    _fill_instance_times(view, now, config, families)


def _fill_accounts(view: FleetView, families: dict[str, Family]) -> None:
    providers = gauges.account_providers(view)
    for name, account_view in view.accounts.items():
        labels = [name, providers[name]]
        latest = account_view.latest
        balance = latest.balance_usd if latest is not None else None
        if balance is not None:
            families["watchdog_gpu_balance_usd"].add_metric(labels, balance)
        # 0 (1970) when no poll worked yet: "never" must look older than any alert threshold.
        last_ok = account_view.last_poll_ok_at
        last_ok_seconds = last_ok.timestamp() if last_ok is not None else 0.0
        families["watchdog_gpu_last_successful_poll_timestamp_seconds"].add_metric(
            labels, last_ok_seconds
        )


def _fill_period_spend(
    view: FleetView, now: datetime, config: gauges.MetricsConfig, families: dict[str, Family]
) -> None:
    for row in gauges.period_spend(view, now, config.budget):
        labels = [row.scope, row.period]
        families["watchdog_gpu_period_spend_usd"].add_metric(labels, row.spent.usd)
        families["watchdog_gpu_period_spend_unknown_seconds"].add_metric(
            labels, row.spent.unknown_seconds
        )
        if row.ceiling_usd is not None:
            families["watchdog_gpu_period_ceiling_usd"].add_metric(labels, row.ceiling_usd)


def _fill_instance_times(
    view: FleetView, now: datetime, config: gauges.MetricsConfig, families: dict[str, Family]
) -> None:
    times = gauges.state_times(view, now, config.idle)
    for time_row in times:
        labels = [time_row.account, time_row.instance_id, time_row.state]
        families["watchdog_gpu_instance_state_seconds"].add_metric(labels, time_row.seconds)
    for idle in gauges.idle_rates(view, times):
        families["watchdog_gpu_idle_usd_per_hour"].add_metric(
            [idle.account, idle.provider], idle.usd_per_hour
        )
    blind = gauges.blind_instances(view, now, config.unobserved)
    families["watchdog_gpu_blind_instances"].add_metric([], blind)
    for unwatched in gauges.unwatched_rates(view):
        families["watchdog_gpu_unwatched_usd_per_hour"].add_metric(
            [unwatched.account, unwatched.provider], unwatched.usd_per_hour
        )


def _empty_families() -> dict[str, Family]:
    """Every family the collector exposes, without samples, by name."""
    account = ["account", "provider"]
    period = ["scope", "period"]
    specs: list[Family] = [
        GaugeMetricFamily("watchdog_gpu_up", "1 while the watchdog-gpu daemon runs"),
        GaugeMetricFamily(
            "watchdog_gpu_leader",
            "1 for the node that leads the watchdogs sharing a PostgreSQL database",
            labels=["node"],
        ),
        GaugeMetricFamily(
            "watchdog_gpu_leader_since_timestamp_seconds",
            "Unix time the leading node took over",
            labels=["node"],
        ),
        GaugeMetricFamily(
            "watchdog_gpu_build_info", "the running watchdog-gpu version", labels=["version"]
        ),
        GaugeMetricFamily(
            "watchdog_gpu_instances",
            "instances by normalised state (gone ones are not counted)",
            labels=[*account, "state"],
        ),
        GaugeMetricFamily(
            "watchdog_gpu_spend_rate_usd_per_hour",
            "what the account bills now, by kind (compute or storage); known rates only",
            labels=[*account, "kind"],
        ),
        GaugeMetricFamily(
            "watchdog_gpu_spend_rate_unknown_items",
            "instances and volumes billing this kind at a rate the provider does not report",
            labels=[*account, "kind"],
        ),
        GaugeMetricFamily(
            "watchdog_gpu_balance_usd",
            "prepaid balance or credit (absent when the API does not say)",
            labels=account,
        ),
        GaugeMetricFamily(
            "watchdog_gpu_last_successful_poll_timestamp_seconds",
            "Unix time of the last poll of the account that worked (0: none yet)",
            labels=account,
        ),
        GaugeMetricFamily(
            "watchdog_gpu_period_spend_usd",
            "known spend in the current day or month (budget time zone); scope: global or account",
            labels=period,
        ),
        GaugeMetricFamily(
            "watchdog_gpu_period_spend_unknown_seconds",
            "instance-seconds of the period whose cost is unknown (not in period_spend_usd)",
            labels=period,
        ),
        GaugeMetricFamily(
            "watchdog_gpu_period_ceiling_usd",
            "the configured spend ceiling of the scope and period",
            labels=period,
        ),
        GaugeMetricFamily(
            "watchdog_gpu_instance_state_seconds",
            "how long an instance has been idle, paused or stopped",
            labels=["account", "instance_id", "state"],
        ),
        GaugeMetricFamily(
            "watchdog_gpu_idle_usd_per_hour",
            "what the account's instances idle by the idle rule's clock bill per hour now "
            "(known rates only)",
            labels=account,
        ),
        GaugeMetricFamily(
            "watchdog_gpu_fuse_actions_last_hour",
            "stops/destroys of the last hour that count towards the fuse's max_actions_per_hour",
        ),
        GaugeMetricFamily(
            "watchdog_gpu_unverified_kills",
            "stop/destroy calls sent but not yet confirmed by a re-listing",
        ),
        GaugeMetricFamily(
            "watchdog_gpu_blind_instances",
            "running instances without usable GPU data for the unobserved rule's window, and "
            "instances in an unmapped provider state for as long",
        ),
        GaugeMetricFamily(
            "watchdog_gpu_unwatched_usd_per_hour",
            "what an account that cannot be listed billed per hour at its last listing "
            "(0 while it can be listed)",
            labels=account,
        ),
        GaugeMetricFamily(
            "watchdog_gpu_notification_backlog", "notifications waiting in the outbox"
        ),
        CounterMetricFamily(
            "watchdog_gpu_collect_errors",
            "scrapes that could not read or compute a part of the store-backed metrics",
            labels=["part"],
        ),
    ]
    return {family.name: family for family in specs}
