"""Our own provider adapters against the simulated servers: what they observe is the world, and
what they do changes the world, over real loopback HTTP."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import httpx
import pytest

from tests.support.sim_world import ServedWorld, adapter, served_world
from watchdog_gpu.errors import PermanentError, RateLimitedError, TransientError
from watchdog_gpu.model import InstanceState, billed_usd_per_hour
from watchdog_gpu.providers import PROVIDERS, new_http_client
from watchdog_gpu.sim.scenario import ApiMode

ACCOUNTS = ("vast-a", "runpod-a", "lambda-a")


@pytest.fixture
def sim() -> Iterator[ServedWorld]:
    with served_world(stall_seconds=0.5) as served:
        yield served


@pytest.mark.parametrize("account", ACCOUNTS)
def test_the_adapter_observes_the_worlds_instances_states_and_rates(
    sim: ServedWorld, account: str
) -> None:
    sim.clock.advance(timedelta(hours=2))
    provider = adapter(sim, account)
    try:
        observation = provider.observe(sim.clock.now())
    finally:
        provider.close()

    world_views = {view.instance_id: view for view in sim.world.list_instances(account)}
    seen = {snapshot.instance_id: snapshot for snapshot in observation.instances}
    assert set(seen) == set(world_views)
    for instance_id, snapshot in seen.items():
        view = world_views[instance_id]
        expected = InstanceState(view.state)
        if view.provider == "runpod" and expected is InstanceState.PAUSED:
            # RunPod shows an interrupted spot pod like a user-stopped one: a stopped disk.
            expected = InstanceState.STOPPED
        assert snapshot.state == expected, instance_id
        assert snapshot.interruptible == view.interruptible
        if view.compute_billed:
            assert snapshot.compute_usd_per_hour == pytest.approx(view.compute_usd_per_hour)
        assert snapshot.storage_usd_per_hour == pytest.approx(view.storage_usd_per_hour)
        # What the watchdog thinks the instance bills is what the world bills.
        assert billed_usd_per_hour(
            snapshot.state, snapshot.compute_usd_per_hour, snapshot.storage_usd_per_hour
        ) == pytest.approx(view.billed_usd_per_hour)
    world_account = sim.world.account_view(account)
    if world_account.balance_usd is None:
        assert observation.account.balance_usd is None
    else:
        assert observation.account.balance_usd == pytest.approx(world_account.balance_usd)
    assert {volume.volume_id for volume in observation.volumes} == {
        volume.volume_id for volume in sim.world.volumes(account)
    }
    assert len(observation.ssh_keys) == len(sim.world.ssh_keys(account))


@pytest.mark.parametrize(
    ("account", "instance_id"),
    [
        ("vast-a", "9002"),
        ("runpod-a", "q7w2e9r4t6y1ui"),
        ("lambda-a", "0920582c7ff041399e34823a0be62549"),
    ],
)
def test_a_destroy_through_the_adapter_makes_the_instance_gone_after_the_provider_delay(
    sim: ServedWorld, account: str, instance_id: str
) -> None:
    provider = adapter(sim, account)
    try:
        provider.destroy(instance_id)
        sim.clock.advance(timedelta(minutes=2))
        listed = {snapshot.instance_id for snapshot in provider.list_instances(sim.clock.now())}
        provider.destroy(instance_id)  # already gone is success
    finally:
        provider.close()

    assert instance_id not in listed
    assert sim.world.state(account, instance_id) == "gone"


@pytest.mark.parametrize(
    ("account", "instance_id"), [("vast-a", "9001"), ("runpod-a", "k3f9x2m7q1w8za")]
)
def test_a_stop_through_the_adapter_stops_the_instance(
    sim: ServedWorld, account: str, instance_id: str
) -> None:
    provider = adapter(sim, account)
    try:
        provider.stop(instance_id)
        [snapshot] = [
            item
            for item in provider.list_instances(sim.clock.now())
            if item.instance_id == instance_id
        ]
    finally:
        provider.close()

    assert snapshot.state is InstanceState.STOPPED
    assert sim.world.state(account, instance_id) == "stopped"


@pytest.mark.parametrize("account", ACCOUNTS)
@pytest.mark.parametrize(
    ("mode", "error"),
    [
        ("error500", TransientError),
        ("ratelimit", RateLimitedError),
        ("timeout", TransientError),
        ("malformed", PermanentError),
    ],
)
def test_each_injected_fault_reaches_the_adapter_as_its_typed_error(
    sim: ServedWorld, account: str, mode: ApiMode, error: type[Exception]
) -> None:
    sim.world.set_api_mode(account, mode)
    spec = sim.scenario.account(account)
    provider = PROVIDERS[spec.provider](
        account,
        new_http_client(sim.url(spec.provider), timeout=httpx.Timeout(0.2)),
        spec.effective_api_key,
        sleep=sim.clock.sleep,
        monotonic=sim.clock.monotonic,
        retry_budget_seconds=3,
    )
    try:
        with pytest.raises(error):
            provider.list_instances(sim.clock.now())
    finally:
        provider.close()


def test_the_adapter_never_sends_the_key_in_the_url(sim: ServedWorld) -> None:
    for account in ACCOUNTS:
        provider = adapter(sim, account)
        try:
            provider.observe(sim.clock.now())
        finally:
            provider.close()
    for provider_name in ("vast", "runpod", "lambda"):
        records = sim.servers.requests(provider_name)
        assert records
        assert all(record.auth_scheme == "bearer" for record in records)
        assert all("api_key" not in record.query_keys for record in records)
