"""Prometheus metrics of watchdog-gpu (names: the contract in deploy/README.md).

One private :class:`~prometheus_client.CollectorRegistry` holds counters and the probe histogram,
fed by what the loop reports (``record_*``, or ``record_tick`` for a whole tick — one or the
other for a phase, never both), and gauges read from the store at scrape time. A scrape never
fails because of the store: a part it cannot read is logged, counted in
``watchdog_gpu_collect_errors_total{part}`` and left out. No label holds a secret; an unknown
kind is counted as ``other``.
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
