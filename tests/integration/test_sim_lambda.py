"""The simulated Lambda Cloud dialect over real loopback HTTP."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import httpx
import pytest

from tests.support.sim_world import ServedWorld, served_world

H100 = "0920582c7ff041399e34823a0be62549"
A10 = "ddaedf1b7a0e41ac981711504493b242"


@pytest.fixture
def sim() -> Iterator[ServedWorld]:
    with served_world() as served:
        yield served


@pytest.fixture
def client(sim: ServedWorld) -> Iterator[httpx.Client]:
    with httpx.Client(
        base_url=sim.url("lambda") + "/api/v1",
        headers={"Authorization": "Bearer sim-lambda-a"},
        timeout=5,
    ) as http:
        yield http


def test_instances_are_listed_with_status_and_price_in_cents(client: httpx.Client) -> None:
    data = {item["id"]: item for item in client.get("/instances").json()["data"]}

    assert data[H100]["status"] == "active"
    assert data[H100]["instance_type"]["price_cents_per_hour"] == 249
    assert data[H100]["ip"] == "127.0.0.1"
    assert data[A10]["status"] == "booting"
    assert "ip" not in data[A10]
    assert data[A10]["actions"]["restart"]["reason_code"] == "vm-has-not-launched"


def test_terminate_answers_terminating_then_the_instance_disappears(
    sim: ServedWorld, client: httpx.Client
) -> None:
    answer = client.post("/instance-operations/terminate", json={"instance_ids": [H100]}).json()
    assert [item["status"] for item in answer["data"]["terminated_instances"]] == ["terminating"]
    sim.clock.advance(timedelta(minutes=2))

    assert [item["id"] for item in client.get("/instances").json()["data"]] == [A10]
    missing = client.get(f"/instances/{H100}")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "global/object-does-not-exist"
    again = client.post("/instance-operations/terminate", json={"instance_ids": [H100]})
    assert again.status_code == 404


def test_basic_auth_with_the_key_as_user_works_and_a_bad_key_is_401(sim: ServedWorld) -> None:
    url = sim.url("lambda") + "/api/v1/instances"
    assert httpx.get(url, auth=("sim-lambda-a", "")).status_code == 200
    assert httpx.get(url, headers={"Authorization": "Basic sim-lambda-a"}).status_code == 200
    refused = httpx.get(url, headers={"Authorization": "Bearer wrong"})
    assert refused.status_code == 401
    assert refused.json()["error"]["code"] == "global/invalid-api-key"
    assert httpx.get(url).status_code == 401


def test_the_api_prefix_is_optional(sim: ServedWorld) -> None:
    bare = httpx.get(
        sim.url("lambda") + "/instances", headers={"Authorization": "Bearer sim-lambda-a"}
    )
    assert len(bare.json()["data"]) == 2


def test_file_systems_ssh_keys_types_and_rename(client: httpx.Client, sim: ServedWorld) -> None:
    systems = {item["name"]: item for item in client.get("/file-systems").json()["data"]}
    assert systems["old-datasets"]["is_in_use"] is False
    assert systems["old-datasets"]["bytes_used"] == 1024 * 2**30
    in_use = client.delete("/filesystems/398578a2336b49079e74043f0bd2cfe8")
    assert in_use.status_code == 400
    deleted = client.delete("/filesystems/7c1e2a9b0d3f4e5a8b6c7d8e9f0a1b2c").json()
    assert deleted == {"data": {"deleted_ids": ["7c1e2a9b0d3f4e5a8b6c7d8e9f0a1b2c"]}}

    [key] = client.get("/ssh-keys").json()["data"]
    assert key["name"] == "ops-laptop"
    types = client.get("/instance-types").json()["data"]
    assert types["gpu_1x_h100_pcie"]["instance_type"]["price_cents_per_hour"] == 249

    renamed = client.post(f"/instances/{H100}", json={"name": "renamed"}).json()["data"]
    assert renamed["name"] == "renamed"


def test_lambda_has_no_stop_endpoint(client: httpx.Client) -> None:
    assert client.post(f"/instances/{H100}/stop").status_code == 404
