"""The simulated Vast.ai dialect over real loopback HTTP."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest

from tests.support.sim_world import ServedWorld, served_world

KEY = {"Authorization": "Bearer sim-vast-a"}


@pytest.fixture
def sim() -> Iterator[ServedWorld]:
    with served_world() as served:
        yield served


@pytest.fixture
def client(sim: ServedWorld) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=sim.url("vast"), headers=KEY, timeout=5) as http:
        yield http


def rows_by_id(payload: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {row["id"]: row for row in payload["instances"]}


def test_the_legacy_list_shows_each_existing_instance_with_its_status_and_prices(
    sim: ServedWorld, client: httpx.Client
) -> None:
    sim.clock.advance(timedelta(hours=2))
    payload = client.get("/api/v0/instances/", params={"owner": "me"}).json()

    rows = rows_by_id(payload)
    assert payload["instances_found"] == 4 == len(rows)  # 9005 does not exist yet
    busy = rows[9001]
    assert (busy["actual_status"], busy["intended_status"], busy["cur_state"]) == ("running",) * 3
    assert busy["num_gpus"] == 2
    assert busy["gpu_util"] == pytest.approx(94.0)
    assert busy["storage_total_cost"] == pytest.approx(100 * 0.15 / 720)
    assert busy["dph_total"] == pytest.approx(0.62 + 100 * 0.15 / 720)
    assert busy["ports"]["22/tcp"][0]["HostPort"] == str(busy["ssh_port"])
    assert busy["ssh_host"] == "127.0.0.1"
    paused = rows[9003]
    assert paused["is_bid"] is True
    # Outbid, the documented way: scheduling while its user wants it running, bid below min_bid.
    assert (paused["actual_status"], paused["intended_status"], paused["cur_state"]) == (
        "scheduling",
        "running",
        "stopped",
    )
    assert paused["dph_base"] < paused["min_bid"]
    assert paused["instance"]["gpuCostPerHour"] == 0
    assert paused["ports"] is None
    assert rows[9004]["instance"]["totalHour"] == pytest.approx(200 * 0.20 / 720)


def test_v1_pages_follow_next_token_until_it_is_null(
    sim: ServedWorld, client: httpx.Client
) -> None:
    seen: list[int] = []
    params: dict[str, str | int] = {
        "limit": 3,
        "order_by": json.dumps([{"col": "id", "dir": "desc"}]),
    }
    while True:
        page = client.get("/api/v1/instances/", params=params).json()
        assert page["success"] is True
        assert page["total_instances"] == 4
        seen.extend(row["id"] for row in page["instances"])
        if page["next_token"] is None:
            break
        params["after_token"] = page["next_token"]
    assert seen == [9004, 9003, 9002, 9001]
    assert page["label_counts"]["train-llama"] == 1


def test_v1_filters_and_column_selection_work_and_computed_columns_are_refused(
    client: httpx.Client,
) -> None:
    filtered = client.get(
        "/api/v1/instances/",
        params={
            "select_filters": json.dumps({"actual_status": {"in": ["stopped"]}}),
            "select_cols": json.dumps(["id", "actual_status", "no_such_column"]),
        },
    ).json()
    assert filtered["instances"] == [
        {"id": 9004, "actual_status": "stopped", "no_such_column": None}
    ]

    refused = client.get(
        "/api/v1/instances/", params={"select_filters": json.dumps({"dph_total": {"lt": 1}})}
    )
    assert refused.status_code == 400
    assert refused.json()["error"] == "invalid_request"
    bad_token = client.get("/api/v1/instances/", params={"after_token": "not-a-token"})
    assert (bad_token.status_code, bad_token.json()["error"]) == (400, "invalid_token")


def test_one_instance_is_an_object_under_a_plural_key_and_null_once_gone(
    sim: ServedWorld, client: httpx.Client
) -> None:
    assert client.get("/api/v0/instances/9002/").json()["instances"]["label"] == "notebook-idle"

    assert client.request("DELETE", "/api/v0/instances/9002/", json={}).json() == {"success": True}
    during = client.get("/api/v0/instances/9002/").json()["instances"]
    assert during["next_state"] == "unloaded"
    sim.clock.advance(timedelta(minutes=1))

    assert client.get("/api/v0/instances/9002/").json() == {"instances": None}
    assert 9002 not in rows_by_id(client.get("/api/v0/instances/").json())
    again = client.request("DELETE", "/api/v0/instances/9002/", json={})
    assert again.status_code == 404
    assert again.json()["error"] == "no_such_instance"
    assert sim.world.state("vast-a", "9002") == "gone"


def test_stop_and_start_through_put_change_the_world(
    sim: ServedWorld, client: httpx.Client
) -> None:
    assert client.put("/api/v0/instances/9001/", json={"state": "stopped"}).json()["success"]
    assert sim.world.state("vast-a", "9001") == "stopped"
    row = client.get("/api/v0/instances/9001/").json()["instances"]
    assert row["actual_status"] == "stopped"

    client.put("/api/v0/instances/", json={"ids": [9001], "state": "running"})
    assert sim.world.state("vast-a", "9001") == "running"
    refused = client.put("/api/v0/instances/9001/", json={"state": "exploded"})
    assert refused.status_code == 400


def test_bulk_destroy_and_labels(sim: ServedWorld, client: httpx.Client) -> None:
    client.put("/api/v0/instances/9004/", json={"label": "keep-me"})
    assert client.get("/api/v0/instances/9004/").json()["instances"]["label"] == "keep-me"

    client.request("DELETE", "/api/v0/instances/", json={"instance_ids": [9003, 9004]})
    sim.clock.advance(timedelta(minutes=1))
    assert sorted(rows_by_id(client.get("/api/v0/instances/").json())) == [9001, 9002]


def test_users_current_reports_credit_spend_and_echoes_the_key_as_vast_does(
    sim: ServedWorld, client: httpx.Client
) -> None:
    sim.clock.advance(timedelta(hours=1))
    user = client.get("/api/v0/users/current").json()

    spent = sim.world.account_view("vast-a").total_spend_usd
    assert user["credit"] == pytest.approx(50.0 - spent)
    assert user["total_spend"] == pytest.approx(-spent)
    assert user["api_key"] == "sim-vast-a"


def test_accounts_are_told_apart_by_their_keys(client: httpx.Client, sim: ServedWorld) -> None:
    other = httpx.get(
        sim.url("vast") + "/api/v0/instances/",
        headers={"Authorization": "Bearer second-vast-key"},
    ).json()
    assert [row["label"] for row in other["instances"]] == ["other-account-same-id"]
    legacy = httpx.get(sim.url("vast") + "/api/v0/instances/?api_key=second-vast-key").json()
    assert legacy == other


def test_a_missing_key_is_403_and_a_wrong_key_is_401(sim: ServedWorld) -> None:
    missing = httpx.get(sim.url("vast") + "/api/v0/instances/")
    wrong = httpx.get(
        sim.url("vast") + "/api/v0/instances/", headers={"Authorization": "Bearer nope"}
    )
    assert (missing.status_code, missing.json()["msg"]) == (403, "This action requires login.")
    assert (wrong.status_code, wrong.json()["msg"]) == (401, "Invalid user key")
    assert "nope" not in wrong.text


def test_ssh_keys_and_volumes(sim: ServedWorld, client: httpx.Client) -> None:
    [key] = client.get("/api/v0/ssh/").json()
    assert key["key"].startswith("ssh-ed25519 ")
    created = client.post("/api/v0/ssh/", json={"ssh_key": "ssh-rsa AAAAB3 new@ci"}).json()
    assert created["success"] is True
    assert len(client.get("/api/v0/ssh/").json()) == 2
    client.delete(f"/api/v0/ssh/{created['key']['id']}/")
    assert len(client.get("/api/v0/ssh/").json()) == 1
    assert client.post("/api/v0/ssh/", json={}).json()["error"] == "no_ssh_key"

    [volume] = client.get("/api/v0/volumes", params={"owner": "me", "type": "all_volume"}).json()[
        "volumes"
    ]
    assert volume["storage_total_cost"] == pytest.approx(500 * 0.20 / 720)
    assert client.request("DELETE", "/api/v0/volumes/", json={"id": volume["id"]}).json() == {
        "success": True
    }
    gone = client.request("DELETE", "/api/v0/volumes/", json={"id": volume["id"]})
    assert (gone.status_code, gone.json()["error"]) == (404, "no_such_volume")


def test_unknown_endpoints_are_404_and_bad_json_is_400(client: httpx.Client) -> None:
    assert client.get("/api/v0/nothing/").status_code == 404
    bad = client.put(
        "/api/v0/instances/9001/",
        content=b"{not json",
        headers={"Content-Type": "application/json"},
    )
    assert bad.status_code == 400


def test_the_journal_records_requests_without_secrets(
    sim: ServedWorld, client: httpx.Client
) -> None:
    client.get("/api/v0/instances/", params={"owner": "me"})
    [record] = sim.servers.requests("vast")
    assert (record.method, record.path, record.query_keys) == (
        "GET",
        "/api/v0/instances",
        ("owner",),
    )
    assert record.auth_scheme == "bearer"
    assert "sim-vast-a" not in repr(record)


def test_the_key_never_reaches_the_log_even_in_a_legacy_query_parameter(
    sim: ServedWorld, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="watchdog_gpu.sim")
    httpx.get(sim.url("vast") + "/api/v0/instances/?api_key=second-vast-key")
    httpx.get(sim.url("vast") + "/api/v0/users/current", headers=KEY)
    httpx.get(sim.url("vast") + "/api/v0/users/current", headers={"Authorization": "Bearer typo"})

    assert "path=/api/v0/instances" in caplog.text
    for secret in ("second-vast-key", "sim-vast-a", "typo"):
        assert secret not in caplog.text
