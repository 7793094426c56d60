"""The official ``runpod`` SDK against the simulated RunPod GraphQL dialect."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.official_clients.conftest import OfficialClient
from tests.support.sim_world import ServedWorld, adapter
from watchdog_gpu.model import InstanceState

pytestmark = pytest.mark.official_clients


def test_the_sdk_lists_pods_with_its_own_query(runpod: OfficialClient, sim: ServedWorld) -> None:
    pods = {pod["id"]: pod for pod in runpod.run("list")}

    assert set(pods) == {"k3f9x2m7q1w8za", "q7w2e9r4t6y1ui", "z1x2c3v4b5n6m7", "w3e4r5t6y7u8io"}
    assert pods["k3f9x2m7q1w8za"]["desiredStatus"] == "RUNNING"
    assert pods["k3f9x2m7q1w8za"]["machine"] == {"gpuDisplayName": "RTX 4090"}
    assert pods["w3e4r5t6y7u8io"]["podType"] == "INTERRUPTABLE"
    [request] = sim.servers.requests("runpod")
    assert (request.method, request.path, request.auth_scheme) == ("POST", "/graphql", "bearer")
    assert request.content_type == "application/json"


def test_the_sdk_reads_one_pod_and_the_user(runpod: OfficialClient) -> None:
    assert runpod.run("show", "q7w2e9r4t6y1ui")["name"] == "jupyter-a100-idle"
    user = runpod.run("user")
    assert user["networkVolumes"][0]["id"] == "agv6w2qcg7"


def test_a_stop_by_the_sdk_is_seen_stopped_by_our_adapter(
    runpod: OfficialClient, sim: ServedWorld
) -> None:
    assert runpod.run("stop", "k3f9x2m7q1w8za") == {
        "id": "k3f9x2m7q1w8za",
        "desiredStatus": "EXITED",
    }

    provider = adapter(sim, "runpod-a")
    try:
        states = {item.instance_id: item.state for item in provider.list_instances(sim.clock.now())}
    finally:
        provider.close()
    assert states["k3f9x2m7q1w8za"] is InstanceState.STOPPED
    assert sim.world.state("runpod-a", "k3f9x2m7q1w8za") == "stopped"


def test_a_terminate_by_the_sdk_is_seen_gone_by_our_adapter(
    runpod: OfficialClient, sim: ServedWorld
) -> None:
    assert runpod.run("destroy", "q7w2e9r4t6y1ui") is None
    sim.clock.advance(timedelta(minutes=1))

    assert runpod.run("show", "q7w2e9r4t6y1ui") is None
    provider = adapter(sim, "runpod-a")
    try:
        listed = {item.instance_id for item in provider.list_instances(sim.clock.now())}
        provider.destroy("q7w2e9r4t6y1ui")  # "pod not found to terminate": success
    finally:
        provider.close()
    assert "q7w2e9r4t6y1ui" not in listed
    assert sim.world.state("runpod-a", "q7w2e9r4t6y1ui") == "gone"


def test_a_second_terminate_by_the_sdk_fails_as_on_runpod(
    runpod: OfficialClient, sim: ServedWorld
) -> None:
    runpod.run("destroy", "q7w2e9r4t6y1ui")
    sim.clock.advance(timedelta(minutes=1))

    again = runpod.call("destroy", "q7w2e9r4t6y1ui")
    assert again.returncode != 0
    assert "pod not found to terminate" in again.stderr
