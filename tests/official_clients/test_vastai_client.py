"""The official ``vastai`` SDK and CLI against the simulated Vast dialect."""

from __future__ import annotations

import subprocess
from datetime import timedelta
from pathlib import Path

import pytest

from tests.official_clients.conftest import OfficialClient, base_environment
from tests.support.sim_world import ServedWorld, adapter
from watchdog_gpu.model import InstanceState

pytestmark = pytest.mark.official_clients


def test_the_sdk_lists_every_instance_through_the_paginated_v1_endpoint(
    vastai: OfficialClient, sim: ServedWorld
) -> None:
    rows = vastai.run("list")

    assert [row["id"] for row in rows] == [9001, 9002, 9003, 9004]
    assert rows[0]["actual_status"] == "running"
    assert rows[3]["actual_status"] == "stopped"
    # What the SDK asked for, exactly: v1 list, JSON query parameters, bearer key, its UA.
    [request] = sim.servers.requests("vast")
    assert (request.method, request.path) == ("GET", "/api/v1/instances")
    assert request.query_keys == ("limit", "order_by", "select_filters")
    assert request.auth_scheme == "bearer"
    assert request.user_agent.startswith("vastai-sdk/")


def test_the_sdk_shows_one_instance_and_the_user(vastai: OfficialClient) -> None:
    row = vastai.run("show", "9002")
    user = vastai.run("user")

    assert row["label"] == "notebook-idle"
    assert user["credit"] == pytest.approx(50.0)
    assert "api_key" not in user  # the SDK itself scrubs the echoed key


def test_a_stop_by_the_sdk_is_seen_stopped_by_our_adapter(
    vastai: OfficialClient, sim: ServedWorld
) -> None:
    assert vastai.run("stop", "9001") == {"success": True}

    assert sim.world.state("vast-a", "9001") == "stopped"
    assert vastai.run("show", "9001")["actual_status"] == "stopped"
    provider = adapter(sim, "vast-a")
    try:
        states = {item.instance_id: item.state for item in provider.list_instances(sim.clock.now())}
    finally:
        provider.close()
    assert states["9001"] is InstanceState.STOPPED


def test_a_destroy_by_the_sdk_is_seen_gone_by_our_adapter(
    vastai: OfficialClient, sim: ServedWorld
) -> None:
    assert vastai.run("destroy", "9002") == {"success": True}
    sim.clock.advance(timedelta(minutes=1))

    assert vastai.run("show", "9002") is None
    assert 9002 not in [row["id"] for row in vastai.run("list")]
    provider = adapter(sim, "vast-a")
    try:
        listed = {item.instance_id for item in provider.list_instances(sim.clock.now())}
        provider.destroy("9002")  # already gone: success for the watchdog
    finally:
        provider.close()
    assert "9002" not in listed
    methods = [(request.method, request.path) for request in sim.servers.requests("vast")]
    assert ("DELETE", "/api/v0/instances/9002") in methods


def test_the_cli_with_vast_url_lists_stops_and_destroys(
    client_venvs: Path, sim: ServedWorld, tmp_path: Path
) -> None:
    environment = base_environment(tmp_path)
    environment.update(VAST_URL=sim.url("vast"), VAST_API_KEY="sim-vast-a")
    cli = str(client_venvs / "vastai" / "bin" / "vastai")

    def vastai_cli(*arguments: str) -> str:
        result = subprocess.run(
            [cli, *arguments],
            capture_output=True,
            text=True,
            env=environment,
            timeout=120,
            check=False,
        )
        assert result.returncode == 0, result.stderr[-2000:]
        return result.stdout

    assert vastai_cli("show", "instances", "-q").split() == ["9001", "9002", "9003", "9004"]
    assert "stopping instance 9003" in vastai_cli("stop", "instance", "9003")
    assert "destroying instance 9004" in vastai_cli("destroy", "instance", "9004", "-y")
    sim.clock.advance(timedelta(minutes=1))

    assert sim.world.state("vast-a", "9003") == "stopped"
    assert sim.world.state("vast-a", "9004") == "gone"
    assert vastai_cli("show", "instances", "-q").split() == ["9001", "9002", "9003"]
