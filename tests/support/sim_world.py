"""A simulated provider world on a virtual clock, served on loopback, for HTTP-level tests."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from watchdog_gpu.clock import VirtualClock
from watchdog_gpu.providers import PROVIDERS, BaseProvider, new_http_client
from watchdog_gpu.sim.faults import FaultSettings
from watchdog_gpu.sim.scenario import Scenario, load_scenario
from watchdog_gpu.sim.servers import SimServers, start_servers
from watchdog_gpu.sim.world import SimulatedWorld

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"
THREE_PROVIDERS = SCENARIOS / "three_providers.toml"


@dataclass
class ServedWorld:
    scenario: Scenario
    clock: VirtualClock
    world: SimulatedWorld
    servers: SimServers

    def url(self, provider: str) -> str:
        return self.servers.urls[provider]


@contextmanager
def served_world(
    path: Path = THREE_PROVIDERS, *, stall_seconds: float = 0.5
) -> Iterator[ServedWorld]:
    """Load ``path``, build its world on a virtual clock at the scenario start, serve it."""
    scenario = load_scenario(path)
    clock = VirtualClock(scenario.start)
    world = SimulatedWorld(scenario, clock)
    servers = start_servers(world, faults=FaultSettings(stall_seconds=stall_seconds))
    try:
        yield ServedWorld(scenario, clock, world, servers)
    finally:
        servers.stop()


def adapter(served: ServedWorld, account: str) -> BaseProvider:
    """Our own provider adapter for ``account``, pointed at the simulated server (as a user's
    ``api_url`` would point it at ``sim serve``), retrying on the world's virtual clock."""
    spec = served.scenario.account(account)
    client = new_http_client(served.url(spec.provider))
    return PROVIDERS[spec.provider](
        account,
        client,
        spec.effective_api_key,
        sleep=served.clock.sleep,
        monotonic=served.clock.monotonic,
        retry_budget_seconds=5,
    )
