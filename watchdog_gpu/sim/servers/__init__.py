"""Real HTTP servers on loopback speaking the Vast, RunPod and Lambda dialects over one world.

>>> servers = start_servers(world)            # doctest: +SKIP
>>> servers.urls                               # doctest: +SKIP
{'vast': 'http://127.0.0.1:41001', 'runpod': 'http://127.0.0.1:41002', 'lambda': ...}
>>> servers.stop()                             # doctest: +SKIP
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from watchdog_gpu.sim.faults import FaultSettings
from watchdog_gpu.sim.servers.base import (
    Dialect,
    RequestRecord,
    SimHTTPServer,
    serve_in_thread,
    stop_server,
)
from watchdog_gpu.sim.servers.lambda_cloud import LambdaDialect
from watchdog_gpu.sim.servers.runpod import RunpodDialect
from watchdog_gpu.sim.servers.vast import VastDialect
from watchdog_gpu.sim.world import SimulatedWorld

DIALECTS: dict[str, type[Dialect]] = {
    "vast": VastDialect,
    "runpod": RunpodDialect,
    "lambda": LambdaDialect,
}

__all__ = ["DIALECTS", "RequestRecord", "SimServers", "start_servers"]


@dataclass
class SimServers:
    """The running servers of one world: ``urls`` by provider, ``stop()`` to end them."""

    servers: dict[str, SimHTTPServer]
    threads: dict[str, threading.Thread] = field(default_factory=dict)

    @property
    def urls(self) -> dict[str, str]:
        return {provider: server.url for provider, server in self.servers.items()}

    def requests(self, provider: str) -> list[RequestRecord]:
        """What the ``provider`` server has been asked so far (no secrets)."""
        return self.servers[provider].requests()

    def stop(self) -> None:
        """Stop every server and wait for its threads (idempotent)."""
        for provider, server in self.servers.items():
            stop_server(server, self.threads.pop(provider, None))

    def __enter__(self) -> SimServers:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def start_servers(
    world: SimulatedWorld,
    *,
    host: str = "127.0.0.1",
    faults: FaultSettings | None = None,
    providers: tuple[str, ...] = ("vast", "runpod", "lambda"),
) -> SimServers:
    """Start one server per provider dialect on ``host`` (ephemeral ports) serving ``world``.

    Returns once every server accepts connections. Bind only to loopback unless you mean it.
    """
    settings = faults or FaultSettings()
    running = SimServers(servers={})
    try:
        for provider in providers:
            server = SimHTTPServer(DIALECTS[provider](world, settings), host)
            running.servers[provider] = server
            running.threads[provider] = serve_in_thread(server)
    except BaseException:
        running.stop()
        raise
    return running
