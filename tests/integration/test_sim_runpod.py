"""The simulated RunPod GraphQL dialect over real loopback HTTP."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest

from tests.support.sim_world import ServedWorld, served_world

PODS = """
query Pods {
  myself {
    pods {
      id name desiredStatus podType costPerHr gpuCount volumeInGb
      machine { gpuDisplayName podHostId }
      runtime { uptimeInSeconds ports { ip isIpPublic privatePort publicPort type }
                gpus { id gpuUtilPercent memoryUtilPercent } }
    }
  }
}
"""


@pytest.fixture
def sim() -> Iterator[ServedWorld]:
    with served_world() as served:
        yield served


@pytest.fixture
def client(sim: ServedWorld) -> Iterator[httpx.Client]:
    with httpx.Client(
        base_url=sim.url("runpod"), headers={"Authorization": "Bearer sim-runpod-a"}, timeout=5
    ) as http:
        yield http


def graphql(client: httpx.Client, query: str, **variables: Any) -> dict[str, Any]:
    response = client.post("/graphql", json={"query": query, "variables": variables})
    assert response.status_code == 200, response.text
    payload: dict[str, Any] = response.json()
    return payload


def pods(client: httpx.Client) -> dict[str, dict[str, Any]]:
    return {pod["id"]: pod for pod in graphql(client, PODS)["data"]["myself"]["pods"]}


def test_pods_show_status_type_and_per_gpu_utilisation(client: httpx.Client) -> None:
    listed = pods(client)

    assert set(listed) == {"k3f9x2m7q1w8za", "q7w2e9r4t6y1ui", "z1x2c3v4b5n6m7", "w3e4r5t6y7u8io"}
    busy = listed["k3f9x2m7q1w8za"]
    assert (busy["desiredStatus"], busy["podType"]) == ("RUNNING", "RESERVED")
    assert [gpu["gpuUtilPercent"] for gpu in busy["runtime"]["gpus"]] == [94]
    ssh = busy["runtime"]["ports"][0]
    assert (ssh["ip"], ssh["privatePort"], ssh["isIpPublic"]) == ("127.0.0.1", 22, True)
    idle = listed["q7w2e9r4t6y1ui"]
    assert [gpu["gpuUtilPercent"] for gpu in idle["runtime"]["gpus"]] == [0, 0]
    assert listed["z1x2c3v4b5n6m7"]["runtime"] is None  # starting: RUNNING without a runtime
    spot = listed["w3e4r5t6y7u8io"]
    assert (spot["desiredStatus"], spot["podType"], spot["runtime"]) == (
        "EXITED",
        "INTERRUPTABLE",
        None,
    )
    assert set(busy) == {
        "id",
        "name",
        "desiredStatus",
        "podType",
        "costPerHr",
        "gpuCount",
        "volumeInGb",
        "machine",
        "runtime",
    }


def test_account_balance_spend_rate_limit_keys_and_network_volumes(
    sim: ServedWorld, client: httpx.Client
) -> None:
    sim.clock.advance(timedelta(hours=1))
    me = graphql(
        client,
        "query Account { myself { id email clientBalance currentSpendPerHr spendLimit "
        "notifyLowBalance pubKey networkVolumes { id name size dataCenterId } } }",
    )["data"]["myself"]

    account = sim.world.account_view("runpod-a")
    assert me["clientBalance"] == pytest.approx(100.0 - account.total_spend_usd)
    assert me["currentSpendPerHr"] == pytest.approx(account.spend_usd_per_hour)
    assert me["spendLimit"] == 40
    assert me["pubKey"].splitlines()[1] == "/home/ops/.ssh/id_ed25519.pub"
    assert me["networkVolumes"] == [
        {"id": "agv6w2qcg7", "name": "datasets-eu", "size": 500, "dataCenterId": "SIM-LO-1"}
    ]


def test_pod_stop_exits_the_pod_and_terminate_returns_null_then_the_pod_is_gone(
    sim: ServedWorld, client: httpx.Client
) -> None:
    stopped = graphql(
        client,
        'mutation { podStop(input: { podId: "k3f9x2m7q1w8za" }) { id desiredStatus } }',
    )
    assert stopped == {"data": {"podStop": {"id": "k3f9x2m7q1w8za", "desiredStatus": "EXITED"}}}
    assert sim.world.state("runpod-a", "k3f9x2m7q1w8za") == "stopped"

    terminated = graphql(client, 'mutation { podTerminate(input: { podId: "k3f9x2m7q1w8za" }) }')
    assert terminated == {"data": {"podTerminate": None}}
    assert pods(client)["k3f9x2m7q1w8za"]["desiredStatus"] == "TERMINATED"
    sim.clock.advance(timedelta(minutes=1))
    assert "k3f9x2m7q1w8za" not in pods(client)

    again = graphql(client, 'mutation { podTerminate(input: { podId: "k3f9x2m7q1w8za" }) }')
    assert again["errors"][0]["message"] == "pod not found to terminate"
    assert again["data"] == {"podTerminate": None}
    single = graphql(
        client, "query ($id: String!) { pod(input: {podId: $id}) { id } }", id="k3f9x2m7q1w8za"
    )
    assert single == {"data": {"pod": None}}


def test_resume_brings_a_stopped_pod_back(sim: ServedWorld, client: httpx.Client) -> None:
    resumed = graphql(
        client,
        'mutation { podBidResume(input: {podId: "w3e4r5t6y7u8io", bidPerGpu: 0.4, gpuCount: 1})'
        " { id desiredStatus } }",
    )
    assert resumed["data"]["podBidResume"]["desiredStatus"] == "RUNNING"
    assert sim.world.state("runpod-a", "w3e4r5t6y7u8io") == "running"


def test_an_unknown_field_fails_the_whole_document_with_http_400(client: httpx.Client) -> None:
    response = client.post("/graphql", json={"query": "query { myself { clientBalanceUsd } }"})
    assert response.status_code == 400
    assert "clientBalanceUsd" in response.json()["errors"][0]["message"]
    assert client.post("/graphql", json={"query": "query { myself {"}).status_code == 400
    assert client.post("/graphql", json={"nothing": 1}).status_code == 400


def test_a_strict_account_refuses_undocumented_pod_fields_with_http_200(
    sim: ServedWorld, client: httpx.Client
) -> None:
    sim.world.set_api_mode("runpod-a", "strict")
    asked = PODS.replace("costPerHr", "costPerHr networkVolumeId")

    refused = client.post("/graphql", json={"query": asked})

    assert refused.status_code == 200
    (error,) = refused.json()["errors"]
    assert error["message"] == 'Cannot query field "networkVolumeId" on type "Pod".'
    assert error["extensions"]["code"] == "GRAPHQL_VALIDATION_FAILED"
    assert "data" not in refused.json()
    assert len(pods(client)) == 4  # the documented fields are served as usual


def test_a_wrong_or_missing_key_is_401_and_the_query_parameter_key_works(
    sim: ServedWorld,
) -> None:
    url = sim.url("runpod") + "/graphql"
    body = {"query": "query { myself { id } }"}
    assert httpx.post(url, json=body).status_code == 401
    assert httpx.post(url, json=body, headers={"Authorization": "Bearer x"}).status_code == 401
    via_query = httpx.post(url, json=body, params={"api_key": "sim-runpod-a"})
    assert via_query.json()["data"]["myself"]["id"].startswith("user_")


def test_update_user_settings_replaces_every_public_key(
    sim: ServedWorld, client: httpx.Client
) -> None:
    updated = graphql(
        client,
        'mutation { updateUserSettings(input: {pubKey: "ssh-ed25519 AAAA one\\nssh-ed25519 BBBB'
        ' two"}) { id pubKey } }',
    )
    assert updated["data"]["updateUserSettings"]["pubKey"] == (
        "ssh-ed25519 AAAA one\nssh-ed25519 BBBB two"
    )
    assert len(sim.world.ssh_keys("runpod-a")) == 2


def test_rest_v2_lists_pods_with_actual_status_and_zero_cost_when_exited(
    sim: ServedWorld,
) -> None:
    headers = {"Authorization": "Bearer sim-runpod-a"}
    listed = httpx.get(sim.url("runpod") + "/v2/pods", headers=headers).json()["pods"]
    by_id = {pod["id"]: pod for pod in listed}

    assert by_id["k3f9x2m7q1w8za"]["status"] == "RUNNING"
    assert by_id["k3f9x2m7q1w8za"]["cost"] == 0.69
    assert by_id["z1x2c3v4b5n6m7"]["status"] == "STARTING"
    spot = by_id["w3e4r5t6y7u8io"]
    assert (spot["status"], spot["cost"], spot["actions"]) == (
        "EXITED",
        0.0,
        ["start", "terminate"],
    )


def test_rest_v2_actions_and_delete_change_the_world_and_errors_are_problem_json(
    sim: ServedWorld,
) -> None:
    base = sim.url("runpod") + "/v2/pods/"
    headers = {"Authorization": "Bearer sim-runpod-a"}
    stopped = httpx.post(base + "k3f9x2m7q1w8za/action", json={"action": "stop"}, headers=headers)
    assert stopped.json()["status"] == "EXITED"
    assert httpx.delete(base + "q7w2e9r4t6y1ui", headers=headers).status_code == 204
    sim.clock.advance(timedelta(minutes=1))

    missing = httpx.get(base + "q7w2e9r4t6y1ui", headers=headers)
    assert missing.status_code == 404
    assert missing.headers["Content-Type"] == "application/problem+json"
    assert missing.json()["title"] == "Not Found"
    assert httpx.get(base + "x", headers={"Authorization": "Bearer bad"}).status_code == 401
    assert sim.world.state("runpod-a", "k3f9x2m7q1w8za") == "stopped"


def test_rest_v1_lists_a_bare_array_and_stops_and_terminates(sim: ServedWorld) -> None:
    base = sim.url("runpod") + "/v1/pods"
    headers = {"Authorization": "Bearer sim-runpod-a"}
    listed = httpx.get(base, headers=headers).json()
    assert isinstance(listed, list)
    assert {pod["id"]: pod["interruptible"] for pod in listed}["w3e4r5t6y7u8io"] is True

    assert httpx.post(base + "/k3f9x2m7q1w8za/stop", headers=headers).json()["desiredStatus"] == (
        "EXITED"
    )
    assert httpx.delete(base + "/k3f9x2m7q1w8za", headers=headers).status_code == 204
    sim.clock.advance(timedelta(minutes=1))
    gone = httpx.get(base + "/k3f9x2m7q1w8za", headers=headers)
    assert (gone.status_code, gone.json()) == (404, {"message": "Pod not found"})
