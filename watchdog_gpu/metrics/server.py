"""The HTTP endpoint: ``/metrics`` of one registry, served by prometheus_client's own server."""

from __future__ import annotations

import logging
import threading
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, ProcessCollector, start_http_server
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector

log = logging.getLogger(__name__)

DEFAULT_LISTEN_ADDRESS = "127.0.0.1"
STOP_TIMEOUT_SECONDS = 5.0


def new_registry(*, process_metrics: bool = True) -> CollectorRegistry:
    """A private registry (no global state), with the ``process_*`` / ``python_*`` metrics the
    default registry would have given when ``process_metrics``."""
    registry = CollectorRegistry()
    if process_metrics:
        ProcessCollector(registry=registry)
        PlatformCollector(registry=registry)
        GCCollector(registry=registry)
    return registry


def serve_metrics(
    listen_address: str, port: int, registry: CollectorRegistry
) -> tuple[WSGIServer, threading.Thread]:
    """Serve ``registry`` on ``http://listen_address:port/metrics`` from a daemon thread.

    ``listen_address`` is passed explicitly because prometheus_client binds every interface
    (``0.0.0.0``) unless told otherwise; the endpoint has no authentication. ``port`` 0 picks a
    free port: read it back from ``server.server_port``. Returns ``(server, thread)`` for
    :func:`stop_metrics`. Raises OSError when the address cannot be bound (port in use, an
    address this host does not have).
    """
    server, thread = start_http_server(port, addr=listen_address, registry=registry)
    log.info("metrics endpoint listening address=%s port=%d", listen_address, server.server_port)
    return server, thread


def stop_metrics(server: WSGIServer, thread: threading.Thread) -> None:
    """Stop serving and release the port (waits a few seconds for the thread at most)."""
    server.shutdown()
    server.server_close()
    thread.join(STOP_TIMEOUT_SECONDS)
