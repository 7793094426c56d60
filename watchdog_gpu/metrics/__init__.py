"""Prometheus metrics of watchdog-gpu (product.md §8; names: the contract in deploy/README.md).

Two kinds of metrics live on one private :class:`~prometheus_client.CollectorRegistry`:

- **counters and the probe histogram**, updated from what the loop reports (``record_*``);
- **gauges read from the store at scrape time** (instances, spend rates, balances, last
  successful poll, period spend vs ceiling, idle/paused/stopped time, unverified kills, blind
  instances, notification backlog, ``watchdog_gpu_up``, build info). A scrape never fails
  because of the store: a part it cannot read is logged, counted in
  ``watchdog_gpu_collect_errors_total{part}`` and left out.

The daemon::

    registry = new_registry()                        # process_* and python_* metrics included
    metrics = Metrics(registry, MetricsConfig.from_settings(settings), store=store, clock=clock)
    server, thread = serve_metrics(settings.metrics.listen_address, settings.metrics.port,
                                   registry)         # port 0: server.server_port says which
    ...
    metrics.record_poll(account, provider, result)   # result: "ok" or a ProviderError kind
    metrics.record_probes(outcomes)                  # duration histogram + SSH errors by kind
    metrics.record_plan(plan)                        # blocked / notified / protected decisions
    metrics.record_executor(executor_report)         # verified/unverified/failed/held/dry_run
    metrics.record_delivery(delivery_report)         # notifications delivered / failed / unrouted
    metrics.record_rule_failures(failed_rules)
    metrics.record_provider_error(account, provider, kind)   # a failed call outside a poll
    metrics.record_ssh_error(kind)                   # a failed probe outside record_probe
    ...
    stop_metrics(server, thread)

or, when a whole tick runs at once (``once``, the simulator): ``Watchdog(...,
on_tick=metrics.record_tick)``, which records every phase of the :class:`TickReport` — use one
or the other for a phase, never both. ``_created`` series are disabled (process-wide). No label
ever holds a secret: labels are account and provider names, rule names, instance ids and
bounded kinds (an unknown kind is counted as ``other``).
"""

from watchdog_gpu.metrics.collector import StoreCollector
from watchdog_gpu.metrics.gauges import MetricsConfig
from watchdog_gpu.metrics.recorder import Metrics
from watchdog_gpu.metrics.server import (
    DEFAULT_LISTEN_ADDRESS,
    new_registry,
    serve_metrics,
    stop_metrics,
)

__all__ = [
    "DEFAULT_LISTEN_ADDRESS",
    "Metrics",
    "MetricsConfig",
    "StoreCollector",
    "new_registry",
    "serve_metrics",
    "stop_metrics",
]
