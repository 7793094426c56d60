"""Counters and the probe histogram, updated from what the loop reports.

:class:`Metrics` owns every metric of one registry: the counters here, and (given a store) the
:class:`~watchdog_gpu.metrics.collector.StoreCollector` that reads gauges at scrape time. Every
``record_*`` method is thread-safe (the scheduler's jobs call them from their own threads) and
never raises for an unexpected value: a label value outside its known set is counted as
``other``, so a new error kind can neither crash the loop nor grow the label set without bound.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
)

from watchdog_gpu.clock import Clock, SystemClock
from watchdog_gpu.metrics.collector import StoreCollector
from watchdog_gpu.metrics.gauges import MetricsConfig
from watchdog_gpu.model import ActionKind, ActionStatus, PlanStatus, ProbeOutcome, ProbeStatus
from watchdog_gpu.plan import Plan
from watchdog_gpu.reports import DeliveryReport, ExecutorReport, TickReport
from watchdog_gpu.rules.base import DestructiveRuleConfig

if TYPE_CHECKING:
    from watchdog_gpu.store import Store

OTHER = "other"
PROVIDER_ERROR_KINDS = ("auth", "rate_limited", "transient", "permanent", "not_found")
SSH_ERROR_KINDS = tuple(status.value for status in ProbeStatus if status is not ProbeStatus.OK)
# Executor outcomes that end (or, for unverified, mark) an action's story; each action is counted
# once per outcome it reaches, however many passes re-check it.
EXECUTOR_OUTCOMES = frozenset(
    {
        ActionStatus.VERIFIED.value,
        ActionStatus.UNVERIFIED.value,
        ActionStatus.FAILED.value,
        ActionStatus.HELD.value,
        ActionStatus.DRY_RUN.value,
    }
)
# Outcomes whose series start at 0 for every account and enabled rule (the Actions panel and
# increase() need a sample before the first event); the rarer ones appear when they happen.
INITIAL_ACTION_OUTCOMES = (
    ActionStatus.VERIFIED.value,
    ActionStatus.FAILED.value,
    ActionStatus.DRY_RUN.value,
)
NOTIFIED = "notified"
# The jobs of the daemon (jobs.py); a poll job per account is counted as phase "poll".
JOB_PHASES = ("poll", "probe", "evaluate", "act", "deliver", "prune")
JOB_EVENTS = ("error", "missed", "skipped")
JOB_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0)
PROBE_BUCKETS = (0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0, 120.0)
REMEMBERED = 10_000  # (action, outcome) pairs kept to count each once; old ones are forgotten


class _FirstTime:
    """A bounded memory of keys already counted (oldest forgotten first)."""

    def __init__(self, size: int) -> None:
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def __call__(self, key: str) -> bool:
        with self._lock:
            if key in self._seen:
                return False
            self._seen[key] = None
            if len(self._seen) > self._size:
                self._seen.popitem(last=False)
            return True


class Metrics:
    """Every watchdog-gpu metric on ``registry`` (see the package docstring for the API)."""

    def __init__(
        self,
        registry: CollectorRegistry,
        config: MetricsConfig | None = None,
        *,
        store: Store | None = None,
        clock: Clock | None = None,
    ) -> None:
        # Process-wide switch: no `_created` series next to counters and histograms (they double
        # the series count and promtool's users rarely want them).
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = registry
        self.config = config or MetricsConfig()
        self._providers = dict(self.config.accounts or {})
        self._first_time = _FirstTime(REMEMBERED)
        self.actions = Counter(
            "watchdog_gpu_actions",
            "stop/destroy/notify decisions by account, rule, action and outcome (incl. dry_run)",
            ["account", "rule", "action", "outcome"],
            registry=registry,
        )
        self.polls = Counter(
            "watchdog_gpu_polls",
            "provider polls by account and outcome (ok or failed)",
            ["account", "provider", "outcome"],
            registry=registry,
        )
        self.provider_errors = Counter(
            "watchdog_gpu_provider_errors",
            "failed provider calls by kind",
            ["account", "provider", "kind"],
            registry=registry,
        )
        self.ssh_errors = Counter(
            "watchdog_gpu_ssh_errors",
            "failed SSH probes by account and kind",
            ["account", "kind"],
            registry=registry,
        )
        self.probe_duration = Histogram(
            "watchdog_gpu_probe_duration_seconds",
            "duration of one SSH probe",
            buckets=PROBE_BUCKETS,
            registry=registry,
        )
        self.notifications = Counter(
            "watchdog_gpu_notifications",
            "notification delivery attempts by outcome (delivered, failed, unrouted)",
            ["outcome"],
            registry=registry,
        )
        self.rule_errors = Counter(
            "watchdog_gpu_rule_errors",
            "rule evaluations that raised (the other rules still ran)",
            ["rule"],
            registry=registry,
        )
        # The label is "phase", not "job": Prometheus gives every series the scrape job's "job"
        # label and would rename ours to "exported_job".
        self.job_duration = Histogram(
            "watchdog_gpu_job_duration_seconds",
            "duration of one run of a daemon job (poll, probe, evaluate, act, deliver, prune)",
            ["phase"],
            buckets=JOB_BUCKETS,
            registry=registry,
        )
        self.job_errors = Counter(
            "watchdog_gpu_job_errors",
            "job runs that raised (error), came too late to run (missed) or were skipped because "
            "the previous run still went on (skipped)",
            ["phase", "kind"],
            registry=registry,
        )
        self.job_interval = Gauge(
            "watchdog_gpu_job_interval_seconds",
            "the configured interval of each job (a job slower than this falls behind)",
            ["phase"],
            registry=registry,
        )
        self._initialise_series()
        if store is not None:
            registry.register(StoreCollector(store, clock or SystemClock(), self.config))

    def _initialise_series(self) -> None:
        """Known label sets start at 0, so the first error is an increase Prometheus can see
        (``increase()`` needs a sample before it)."""
        rule_actions = _rule_actions(self.config)
        for account, provider in self._providers.items():
            self._initialise_account(account, provider, rule_actions)
        for rule in rule_actions:
            self.rule_errors.labels(rule)
        for outcome in ("delivered", "failed", "unrouted"):
            self.notifications.labels(outcome)
        for phase in JOB_PHASES:
            for event in (*JOB_EVENTS, OTHER):
                self.job_errors.labels(phase, event)
        for phase, interval in self.config.job_intervals.items():
            self.job_interval.labels(phase).set(interval.total_seconds())

    def _initialise_account(
        self, account: str, provider: str, rule_actions: Mapping[str, ActionKind]
    ) -> None:
        for outcome in ("ok", "failed"):
            self.polls.labels(account, provider, outcome)
        for kind in (*PROVIDER_ERROR_KINDS, OTHER):
            self.provider_errors.labels(account, provider, kind)
        for kind in (*SSH_ERROR_KINDS, OTHER):
            self.ssh_errors.labels(account, kind)
        for rule, action in rule_actions.items():
            outcomes = INITIAL_ACTION_OUTCOMES if action != ActionKind.NOTIFY else (NOTIFIED,)
            for outcome in outcomes:
                self.actions.labels(account, rule, action.value, outcome)

    # -- a whole tick ------------------------------------------------------------------------

    def record_tick(self, report: TickReport) -> None:
        """Everything a :class:`~watchdog_gpu.reports.TickReport` says (``Watchdog(on_tick=...)``).
        Use either this or the per-phase methods for a phase, not both: counts would double."""
        for account, result in report.polled.items():
            self.record_poll(account, self._providers.get(account, OTHER), result)
        self.record_probes(report.probes)
        if report.plan is not None:
            self.record_plan(report.plan)
        self.record_rule_failures(report.failed_rules)
        if report.executed is not None:
            self.record_executor(report.executed)
        if report.delivered is not None:
            self.record_delivery(report.delivered)

    # -- per phase ---------------------------------------------------------------------------

    def record_poll(self, account: str, provider: str, result: str) -> None:
        """One poll of ``account``: ``result`` is "ok" or the ProviderError kind it failed with."""
        if result == "ok":
            self.polls.labels(account, provider, "ok").inc()
            return
        self.polls.labels(account, provider, "failed").inc()
        self.record_provider_error(account, provider, result)

    def record_provider_error(self, account: str, provider: str, kind: str) -> None:
        """A failed provider call (any call: poll, stop, destroy, verification listing)."""
        label = kind if kind in PROVIDER_ERROR_KINDS else OTHER
        self.provider_errors.labels(account, provider, label).inc()

    def record_probe(self, outcome: ProbeOutcome) -> None:
        """One SSH probe: its duration, and its failure kind unless it worked."""
        self.probe_duration.observe(max(0.0, outcome.duration_seconds))
        if outcome.status is not ProbeStatus.OK:
            self.record_ssh_error(outcome.status.value, outcome.account)

    def record_probes(self, outcomes: Iterable[ProbeOutcome]) -> None:
        for outcome in outcomes:
            self.record_probe(outcome)

    def record_ssh_error(self, kind: str, account: str = OTHER) -> None:
        """A failed probe outside :meth:`record_probe` (``kind``: a ProbeStatus value)."""
        self.ssh_errors.labels(account, kind if kind in SSH_ERROR_KINDS else OTHER).inc()

    def record_job(self, job_id: str, seconds: float) -> None:
        """One finished run of a daemon job (``poll:ACCOUNT`` counts as phase ``poll``)."""
        self.job_duration.labels(job_phase(job_id)).observe(max(0.0, seconds))

    def record_job_event(self, job_id: str, event: str) -> None:
        """A job run that raised (``error``), was ``missed`` or ``skipped``."""
        self.job_errors.labels(job_phase(job_id), event if event in JOB_EVENTS else OTHER).inc()

    def record_plan(self, plan: Plan) -> None:
        """The planner's decisions that end in no executor step: ``blocked`` (the fuse held a
        stop/destroy), ``notified`` (a notify-only finding) and ``protected`` (it would have
        acted). Each episode is counted once, though every tick re-plans it."""
        for decision in plan.decisions:
            finding = decision.finding
            if decision.status is PlanStatus.BLOCKED and decision.action is not None:
                action, outcome = decision.action.kind.value, "blocked"
            elif decision.status is PlanStatus.NOTIFY:
                action, outcome = ActionKind.NOTIFY.value, "notified"
            elif decision.status is PlanStatus.PROTECTED:
                action, outcome = finding.action.value, "protected"
            else:
                continue
            if self._first_time(f"{finding.episode_key}|{outcome}"):
                self.actions.labels(finding.account, finding.rule, action, outcome).inc()

    def record_executor(self, report: ExecutorReport) -> None:
        """The executor's outcomes: each action counted once per outcome it reaches."""
        for outcome in report.outcomes:
            key, status = outcome.key, outcome.status
            if status in EXECUTOR_OUTCOMES and self._first_time(f"{key}|{status}"):
                account = outcome.account or OTHER
                self.actions.labels(account, outcome.rule, outcome.kind.value, status).inc()

    def record_rule_failures(self, failed: Mapping[str, str]) -> None:
        """Rules that raised this tick (rule name → error text; the text is not exposed)."""
        for rule in failed:
            self.rule_errors.labels(rule).inc()

    def record_delivery(self, report: DeliveryReport) -> None:
        """One notification delivery pass."""
        self.notifications.labels("delivered").inc(report.delivered)
        self.notifications.labels("failed").inc(report.failed)
        self.notifications.labels("unrouted").inc(report.unrouted)


def job_phase(job_id: str) -> str:
    """The metric label of a job: its id without the account of a poll job."""
    phase = job_id.split(":", 1)[0]
    return phase if phase in JOB_PHASES else OTHER


def _rule_actions(config: MetricsConfig) -> dict[str, ActionKind]:
    """Every enabled rule and what it does: its configured stop/destroy, or notify."""
    return {
        name: ActionKind(rule.action)
        if isinstance(rule, DestructiveRuleConfig)
        else ActionKind.NOTIFY
        for name, rule in config.rules.items()
        if rule.enabled
    }
