"""The daemon's ``/metrics`` endpoint: the leader's (:func:`start_metrics`, fed by the jobs
through :class:`MetricsObserver`) and a standby's (:func:`start_standby_metrics`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from watchdog_gpu.clock import Clock
from watchdog_gpu.config import Settings
from watchdog_gpu.config.sections import MetricsSection
from watchdog_gpu.model import ProbeOutcome
from watchdog_gpu.reports import DeliveryReport, ExecutorReport, TickReport
from watchdog_gpu.schedule import phase_intervals
from watchdog_gpu.wiring import Assembly

if TYPE_CHECKING:
    from watchdog_gpu.metrics import Metrics


class MetricsObserver:
    """Feeds the per-phase ``record_*`` methods of :class:`watchdog_gpu.metrics.Metrics` from
    the jobs (never ``record_tick``: the polls are recorded one by one as they happen)."""

    def __init__(self, metrics: Metrics, providers: Mapping[str, str]) -> None:
        self.metrics = metrics
        self.providers = dict(providers)

    def on_poll(self, account: str, result: str, now: datetime) -> None:
        self.metrics.record_poll(account, self.providers.get(account, "other"), result)

    def on_probe(self, outcomes: Sequence[ProbeOutcome], now: datetime) -> None:
        self.metrics.record_probes(outcomes)

    def on_tick(self, report: TickReport) -> None:
        if report.plan is not None:
            self.metrics.record_plan(report.plan)
        self.metrics.record_rule_failures(report.failed_rules)

    def on_executor(self, report: ExecutorReport, now: datetime) -> None:
        self.metrics.record_executor(report)

    def on_delivery(self, report: DeliveryReport | None, now: datetime) -> None:
        if report is not None:
            self.metrics.record_delivery(report)

    def on_job_event(self, job_id: str, event: str) -> None:
        self.metrics.record_job_event(job_id, event)

    def on_job_done(self, job_id: str, seconds: float) -> None:
        self.metrics.record_job(job_id, seconds)


class MetricsAddressError(Exception):
    """The metrics endpoint cannot listen where ``[metrics]`` says (the port is taken, the
    address is not this machine's): a configuration problem, not a transient one."""


def start_metrics_or_explain(
    settings: Settings, assembly: Assembly, clock: Clock
) -> tuple[MetricsObserver, Callable[[], None]]:
    """:func:`start_metrics`, with a bind failure turned into a MetricsAddressError naming the
    address, the port and the settings to change."""
    try:
        return start_metrics(settings, assembly, clock)
    except OSError as error:
        raise MetricsAddressError(_unbindable(settings.metrics, error)) from error


def _unbindable(endpoint: MetricsSection, error: OSError) -> str:
    reason = error.strerror or str(error)
    return (
        f"the metrics endpoint cannot listen on {endpoint.listen_address} port "
        f"{endpoint.port}: {reason}. Stop whatever holds it, or choose another "
        "`[metrics] port` (or `listen_address`, or set `enabled = false`) in the "
        "configuration"
    )


def start_metrics(
    settings: Settings, assembly: Assembly, clock: Clock
) -> tuple[MetricsObserver, Callable[[], None]]:
    """Serve ``/metrics`` on the configured address; returns the observer for the jobs and the
    function that stops the endpoint. Raises OSError when the address cannot be bound."""
    from watchdog_gpu.metrics import (
        Metrics,
        MetricsConfig,
        new_registry,
        serve_metrics,
        stop_metrics,
    )

    registry = new_registry()
    config = MetricsConfig.from_settings(settings, phase_intervals(settings))
    metrics = Metrics(registry, config, store=assembly.store, clock=clock)
    endpoint = settings.metrics
    server, thread = serve_metrics(endpoint.listen_address, endpoint.port, registry)
    providers = {account.name: account.provider for account in settings.accounts}
    return MetricsObserver(metrics, providers), lambda: stop_metrics(server, thread)


def start_standby_metrics(endpoint: MetricsSection | None, node: str) -> Callable[[], None] | None:
    if endpoint is None or not endpoint.enabled:
        return None
    from watchdog_gpu.metrics import stop_metrics
    from watchdog_gpu.metrics.standby import serve_standby_metrics

    try:
        server, thread = serve_standby_metrics(endpoint.listen_address, endpoint.port, node)
    except OSError as error:
        raise MetricsAddressError(_unbindable(endpoint, error)) from error
    return lambda: stop_metrics(server, thread)
