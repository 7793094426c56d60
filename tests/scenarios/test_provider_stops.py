"""Scenarios for states a provider puts an instance in by itself (docs/providers.md): a Vast bid
instance Vast stopped at a zero balance, a Vast container that exited while its contract keeps
the GPU, a Lambda instance that failed its health checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.scenarios.helpers import (
    ENFORCE,
    assert_within_tick,
    finish,
    offset,
    run_scenario,
    simulating,
    tick_seconds,
)
from watchdog_gpu.spend import instance_spend

STOPPED_DISK_AFTER_2H = f'{ENFORCE}\n[rules.stopped_disk]\nafter = "2h"\n'


def test_bid_instances_vast_stopped_itself_wait_for_stopped_disk(tmp_path: Path) -> None:
    run = run_scenario("vast_stopped_by_vast", tmp_path, STOPPED_DISK_AFTER_2H)

    stops = [call for call in run.api_calls if call[1:3] == ("vast-prepaid", "9711")]
    (action,) = run.actions_for("vast-prepaid/9711")
    # Not paused_interruptible 30 min after Vast's stop: stopped_disk, 2 h after it.
    assert (action["rule"], action["action"], action["result"]) == (
        "stopped_disk",
        "destroy",
        "verified",
    )
    assert "paused_interruptible" not in {note["rule"] for note in run.notifications}
    # The credit ($0.16 at $0.3208/h) runs out at ≈ 30 min; Vast stops it then.
    assert_within_tick(
        action["offset_s"], offset("30m") + offset("2h"), tick_seconds("vast_stopped_by_vast")
    )
    assert stops == [(action["offset_s"], "vast-prepaid", "9711", "destroy")]
    # Parked by its host at 20 min with an error status: the same.
    (parked,) = run.actions_for("vast-hosted/9712")
    assert (parked["rule"], parked["action"]) == ("stopped_disk", "destroy")
    assert_within_tick(
        parked["offset_s"], offset("20m") + offset("2h"), tick_seconds("vast_stopped_by_vast")
    )


STOPPED_DISK_AFTER_1H = f'{ENFORCE}\n[rules.stopped_disk]\nafter = "1h"\n'


def test_an_exited_vast_container_that_keeps_its_gpu_is_billing_compute(tmp_path: Path) -> None:
    with simulating("vast_exited_gpu_held", tmp_path, STOPPED_DISK_AFTER_1H) as sim:
        run = finish(sim)
        start, end = sim.scenario.start, sim.scenario.end
        view = sim.store.load_fleet_view(sim.clock.now(), end - start, start)
        recorded = instance_spend(view.instances["vast-main/9721"], start, end)
        billed = sim.world.spend_usd("vast-main", "9721")

    # Not a stopped disk: nothing is stopped or destroyed, the GPU is counted as billing.
    assert run.actions_for("vast-main/9721") == []
    assert run.instances["vast-main/9721"]["final_state"] == "running"
    assert billed == pytest.approx(3 * (0.40 + 50 * 0.15 / 720), abs=0.01)
    assert recorded.usd == pytest.approx(billed, abs=0.02)
    # Blind since the container died: the user is told, once.
    (blind,) = [n for n in run.notifications_for("vast-main/9721") if n["rule"] == "unobserved"]
    assert offset("50m") <= blind["offset_s"] <= offset("52m")


def test_an_unhealthy_lambda_instance_is_alerted_and_never_idle_destroyed(
    tmp_path: Path,
) -> None:
    run = run_scenario("lambda_unhealthy", tmp_path, ENFORCE)

    key = "lambda-main/0920582c7ff041399e34823a0be62549"
    assert run.actions_for(key) == []
    assert run.api_calls == ()
    assert run.instances[key]["final_state"] == "running"
    (alert,) = [n for n in run.notifications_for(key) if n["rule"] == "unobserved"]
    # Unhealthy from 15 min; the unobserved rule speaks 30 min later.
    assert offset("45m") <= alert["offset_s"] <= offset("47m")
    assert "unhealthy" in alert["title"]


def test_a_runpod_query_refused_with_http_200_does_not_blind_the_account(tmp_path: Path) -> None:
    run = run_scenario("runpod_strict_schema", tmp_path, ENFORCE)

    assert run.actions_for("runpod-lab/busypod00002") == []
    assert run.instances["runpod-lab/busypod00002"]["final_state"] == "running"
    (idle,) = run.actions_for("runpod-lab/idlepod00002")
    assert (idle["rule"], idle["action"], idle["result"]) == ("idle_gpu", "destroy", "verified")
    assert "account_health" not in {note["rule"] for note in run.notifications}


def test_a_serverless_worker_is_never_judged_stopped_or_terminated(tmp_path: Path) -> None:
    run = run_scenario("runpod_serverless_worker", tmp_path, ENFORCE)

    assert run.actions_for("runpod-lab/worker000003") == []
    assert run.notifications_for("runpod-lab/worker000003") == []
    assert run.instances["runpod-lab/worker000003"]["final_state"] == "running"
    (idle,) = run.actions_for("runpod-lab/idlepod00003")
    assert (idle["rule"], idle["action"], idle["result"]) == ("idle_gpu", "destroy", "verified")
