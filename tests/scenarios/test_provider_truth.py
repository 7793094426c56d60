"""Scenarios for the providers' real states and bills (docs/providers.md): Vast bid instances
that load, are stopped by their user or are outbid; a RunPod spot pod stopped by the watchdog;
RunPod network-volume attachment and Savings Plan rates; what a provider cannot do."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.scenarios.helpers import ENFORCE, Run, finish, offset, run_scenario, simulating
from watchdog_gpu.errors import ConfigError
from watchdog_gpu.spend import SpendFigure, instance_spend


def _run_with_spend(
    scenario: str, tmp_path: Path, config: str, key: str
) -> tuple[Run, SpendFigure, float]:
    """The run, what the watchdog recorded ``key`` as spending over the scenario, and what the
    simulated provider billed it."""
    with simulating(scenario, tmp_path, config) as sim:
        run = finish(sim)
        start, end = sim.scenario.start, sim.scenario.end
        view = sim.store.load_fleet_view(sim.clock.now(), end - start, start)
        recorded = instance_spend(view.instances[key], start, end)
        account, instance_id = key.split("/")
        return run, recorded, sim.world.spend_usd(account, instance_id)


def test_a_loading_bid_instance_is_never_destroyed_and_bills_no_gpu_while_loading(
    tmp_path: Path,
) -> None:
    run, recorded, world = _run_with_spend("vast_bid_states", tmp_path, ENFORCE, "vast-bids/9701")

    assert run.actions_for("vast-bids/9701") == []
    assert run.instances["vast-bids/9701"]["final_state"] == "running"
    # 50 minutes of disk only, then 40 minutes of GPU + disk: what Vast bills, what we count.
    disk = 200 * 0.15 / 720
    assert world == pytest.approx(disk * 1.5 + 0.30 * 40 / 60, abs=0.01)
    assert recorded.usd == pytest.approx(world, abs=0.02)


def test_a_user_stopped_bid_is_a_stopped_disk_and_an_outbid_one_is_paused(
    tmp_path: Path,
) -> None:
    run = run_scenario("vast_bid_states", tmp_path, ENFORCE)

    assert run.actions_for("vast-bids/9702") == []  # stopped_disk: 24 h, not 30 min
    assert run.instances["vast-bids/9702"]["final_state"] == "stopped"
    (outbid,) = run.actions_for("vast-bids/9703")
    assert (outbid["rule"], outbid["action"], outbid["result"]) == (
        "paused_interruptible",
        "destroy",
        "verified",
    )
    assert outbid["offset_s"] == offset("40m")


STOP_WHEN_IDLE = f'{ENFORCE}\n[rules.idle_gpu]\naction = "stop"\n'


def test_a_stopped_spot_pod_is_verified_and_never_destroyed_as_paused(tmp_path: Path) -> None:
    run = run_scenario("runpod_spot_stop", tmp_path, STOP_WHEN_IDLE)

    (stop,) = run.actions_for("runpod-spot/spotpod0001")
    assert (stop["rule"], stop["action"], stop["result"]) == ("idle_gpu", "stop", "verified")
    assert run.instances["runpod-spot/spotpod0001"]["final_state"] == "stopped"
    assert [call for call in run.api_calls if call[3] == "stop"] == [
        (stop["offset_s"], "runpod-spot", "spotpod0001", "stop")
    ]  # called once, not repeated
    rules = {note["rule"] for note in run.notifications}
    assert "paused_interruptible" not in rules
    # The stopped pod no longer uses its network volume, which bills on its own from the stop:
    # told once it has for `after` (7 days by default), not within these 3 hours.
    assert "volume_storage" not in rules


VOLUME_AFTER_30M = f'{ENFORCE}\n[rules.volume_storage]\nafter = "30m"\n'


def test_a_network_volume_is_detached_only_once_its_pod_is_gone_and_spend_follows_the_plan(
    tmp_path: Path,
) -> None:
    run, recorded, world = _run_with_spend(
        "runpod_network_volume", tmp_path, VOLUME_AFTER_30M, "runpod-lab/planpod0001"
    )

    (alert,) = [note for note in run.notifications if note["rule"] == "volume_storage"]
    # The pod is gone at 1h (+ the provider's 45 s): detached from the next poll, alert 30m on.
    assert offset("1h30m") <= alert["offset_s"] <= offset("1h33m")
    # $2.00/h less 25 % for an hour, plus the disks: the discounted rate is what is counted.
    assert world == pytest.approx(1.50 + (100 * 0.10) / 730, abs=0.01)
    assert recorded.usd == pytest.approx(world, abs=0.03)


def test_a_stop_rule_with_a_lambda_account_is_refused_before_anything_runs(
    tmp_path: Path,
) -> None:
    with pytest.raises(ConfigError) as refused:
        run_scenario("three_providers", tmp_path, STOP_WHEN_IDLE)

    (problem,) = refused.value.problems
    assert problem.path == "rules.idle_gpu.action"
    assert "Lambda" in problem.message


def test_partial_answers_do_not_blind_an_account(tmp_path: Path) -> None:
    run = run_scenario("partial_answers", tmp_path, ENFORCE)

    assert run.actions_for("runpod-lab/busypod00001") == []
    assert run.instances["runpod-lab/busypod00001"]["final_state"] == "running"
    (idle,) = run.actions_for("vast-main/9801")
    assert (idle["rule"], idle["action"], idle["result"]) == ("idle_gpu", "destroy", "verified")
    assert "account_health" not in {note["rule"] for note in run.notifications}
