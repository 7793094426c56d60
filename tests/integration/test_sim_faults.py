"""Fault injection on each dialect, over real loopback HTTP."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import timedelta

import httpx
import pytest

from tests.support.sim_world import SCENARIOS, ServedWorld, served_world

Call = Callable[[ServedWorld, float], httpx.Response]


def vast_list(sim: ServedWorld, timeout: float) -> httpx.Response:
    return httpx.get(
        sim.url("vast") + "/api/v0/instances/",
        headers={"Authorization": "Bearer sim-vast-a"},
        timeout=timeout,
    )


def runpod_list(sim: ServedWorld, timeout: float) -> httpx.Response:
    return httpx.post(
        sim.url("runpod") + "/graphql",
        json={"query": "query { myself { pods { id } } }"},
        headers={"Authorization": "Bearer sim-runpod-a"},
        timeout=timeout,
    )


def lambda_list(sim: ServedWorld, timeout: float) -> httpx.Response:
    return httpx.get(
        sim.url("lambda") + "/api/v1/instances",
        headers={"Authorization": "Bearer sim-lambda-a"},
        timeout=timeout,
    )


LISTS = {"vast-a": vast_list, "runpod-a": runpod_list, "lambda-a": lambda_list}


@pytest.fixture
def sim() -> Iterator[ServedWorld]:
    with served_world(stall_seconds=1.0) as served:
        yield served


@pytest.mark.parametrize("account", sorted(LISTS))
def test_error500_answers_500_with_the_dialects_error_body(sim: ServedWorld, account: str) -> None:
    sim.world.set_api_mode(account, "error500")
    response = LISTS[account](sim, 5)

    assert response.status_code == 500
    assert response.json()  # a JSON error body, as each provider sends


@pytest.mark.parametrize("account", sorted(LISTS))
def test_ratelimit_answers_429_with_retry_after(sim: ServedWorld, account: str) -> None:
    sim.world.set_api_mode(account, "ratelimit")
    response = LISTS[account](sim, 5)

    assert response.status_code == 429
    assert response.headers["Retry-After"] == "1"


@pytest.mark.parametrize("account", sorted(LISTS))
def test_timeout_stalls_past_the_clients_timeout(sim: ServedWorld, account: str) -> None:
    sim.world.set_api_mode(account, "timeout")
    with pytest.raises(httpx.ReadTimeout):
        LISTS[account](sim, 0.2)


def test_a_client_that_waits_longer_than_the_stall_gets_no_answer_at_all(
    sim: ServedWorld,
) -> None:
    sim.world.set_api_mode("vast-a", "timeout")
    with pytest.raises(httpx.RemoteProtocolError):
        vast_list(sim, 10)


@pytest.mark.parametrize("account", sorted(LISTS))
def test_malformed_answers_truncated_json(sim: ServedWorld, account: str) -> None:
    sim.world.set_api_mode(account, "malformed")
    response = LISTS[account](sim, 5)

    assert response.status_code == 200
    with pytest.raises(json.JSONDecodeError):
        response.json()


def test_a_refused_destroy_changes_nothing_but_a_malformed_answer_hides_a_real_destroy(
    sim: ServedWorld,
) -> None:
    headers = {"Authorization": "Bearer sim-vast-a"}
    for mode in ("error500", "ratelimit"):
        sim.world.set_api_mode("vast-a", mode)
        httpx.request("DELETE", sim.url("vast") + "/api/v0/instances/9001/", headers=headers)
        assert sim.world.instance("vast-a", "9001") is not None

    sim.world.set_api_mode("vast-a", "malformed")
    httpx.request("DELETE", sim.url("vast") + "/api/v0/instances/9001/", headers=headers)
    sim.clock.advance(timedelta(minutes=1))
    assert sim.world.state("vast-a", "9001") == "gone"


def test_a_fault_hits_only_its_own_account(sim: ServedWorld) -> None:
    sim.world.set_api_mode("vast-a", "error500")
    other = httpx.get(
        sim.url("vast") + "/api/v0/instances/", headers={"Authorization": "Bearer second-vast-key"}
    )
    assert other.status_code == 200


def test_scripted_api_events_switch_the_fault_on_and_off_over_time() -> None:
    with served_world(SCENARIOS / "forgotten_4090.toml") as sim:
        headers = {"Authorization": "Bearer sim-vast-main"}
        url = sim.url("vast") + "/api/v0/instances/"
        statuses = []
        for offset in (timedelta(hours=2, minutes=59), timedelta(minutes=1), timedelta(minutes=20)):
            sim.clock.advance(offset)
            statuses.append(httpx.get(url, headers=headers).status_code)
        assert statuses == [200, 500, 200]
