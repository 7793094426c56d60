"""``/metrics`` of a standby: a node that shares a PostgreSQL database with a leading watchdog.

A standby neither polls nor probes, so it has none of the fleet's series (the leader serves
them; two nodes serving them would count every instance twice). It still answers the scrape
(deploy/README.md has Prometheus scrape every node): ``watchdog_gpu_up`` 1 — so
``WatchdogGpuTargetDown`` tells a dead standby from a healthy one — and
``watchdog_gpu_standby{node}`` 1, which ``WatchdogGpuNoLeader`` reads (standbys and no leader).
When the node takes over, this endpoint is stopped and the leader's own starts on the same port.
"""

from __future__ import annotations

import threading
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Gauge

from watchdog_gpu.metrics.server import new_registry, serve_metrics


def standby_registry(node: str) -> CollectorRegistry:
    """The standby's registry: ``watchdog_gpu_up`` and ``watchdog_gpu_standby{node}``, both 1,
    beside the ``process_*`` and ``python_*`` metrics."""
    registry = new_registry()
    Gauge("watchdog_gpu_up", "1 while the watchdog-gpu daemon runs", registry=registry).set(1)
    Gauge(
        "watchdog_gpu_standby",
        "1 while this node stands by for the leader of the watchdogs sharing its database",
        ["node"],
        registry=registry,
    ).labels(node).set(1)
    return registry


def serve_standby_metrics(
    listen_address: str, port: int, node: str
) -> tuple[WSGIServer, threading.Thread]:
    """Serve a standby's metrics on ``listen_address:port``; raises OSError when the address
    cannot be bound. Stop it with :func:`watchdog_gpu.metrics.stop_metrics`."""
    return serve_metrics(listen_address, port, standby_registry(node))
