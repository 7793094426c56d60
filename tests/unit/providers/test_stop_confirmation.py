"""A stop the watchdog asked for is confirmed by the listing that follows it, also for spot
instances that the provider may show as paused (model.stop_took_effect, used by the executor)."""

from __future__ import annotations

import pytest

from tests.contract.provider_harness import NOW, fixture_json
from tests.unit.providers.rows import vast_bid_row
from watchdog_gpu.model import InstanceState, stop_took_effect
from watchdog_gpu.providers.parsing import runpod, vast


@pytest.mark.parametrize(
    ("intended", "expected_state"),
    [
        ("stopped", InstanceState.STOPPED),  # what our PUT {"state": "stopped"} leaves
        ("running", InstanceState.PAUSED),  # shown held off its GPU: stopped all the same
    ],
)
def test_a_stopped_vast_bid_instance_confirms_the_stop(
    intended: str, expected_state: InstanceState
) -> None:
    snapshot = vast.parse_instance(
        vast_bid_row(actual_status="stopped", intended_status=intended), account="a", now=NOW
    )

    assert snapshot.state is expected_state
    assert stop_took_effect(snapshot.state, interruptible=snapshot.interruptible)


def test_an_exited_runpod_spot_pod_confirms_the_stop() -> None:
    payload = fixture_json("runpod/myself_pods.json")
    pods = {pod.instance_id: pod for pod in runpod.parse_pods(payload, account="a", now=NOW)}
    spot = pods["w3e4r5t6y7u8io"]

    assert spot.interruptible
    assert stop_took_effect(spot.state, interruptible=spot.interruptible)


@pytest.mark.parametrize(
    ("state", "interruptible", "confirmed"),
    [
        (InstanceState.STOPPED, False, True),
        (InstanceState.PAUSED, True, True),
        (InstanceState.PAUSED, False, False),  # not a spot instance: paused is not our stop
        (InstanceState.RUNNING, True, False),
        (InstanceState.STARTING, True, False),  # a loading bid instance has not stopped
        (InstanceState.UNKNOWN, True, False),
    ],
)
def test_only_a_stopped_or_spot_paused_listing_confirms(
    state: InstanceState, interruptible: bool, confirmed: bool
) -> None:
    assert stop_took_effect(state, interruptible=interruptible) is confirmed
