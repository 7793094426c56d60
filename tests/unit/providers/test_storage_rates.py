"""Storage $/h derivations: Vast's 720-hour month, RunPod's doubled stopped volume and network
volume tiers, Lambda's filesystem rate."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from watchdog_gpu.model import InstanceState, billed_usd_per_hour
from watchdog_gpu.providers.parsing import lambda_cloud, runpod, vast

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)


def test_vast_derives_storage_from_size_and_monthly_rate_over_720_hours() -> None:
    row = {"id": 1, "actual_status": "stopped", "disk_space": 10.08, "storage_cost": 0.15}

    snapshot = vast.parse_instance(row, account="a", now=NOW)

    assert snapshot.storage_usd_per_hour == pytest.approx(0.0021)  # the OpenAPI example


def test_vast_prefers_the_billed_storage_figure_and_takes_compute_as_the_rest_of_dph_total() -> (
    None
):
    row = {
        "id": 1,
        "actual_status": "running",
        "dph_total": 1.0,
        "dph_base": 0.9,
        "storage_total_cost": 0.1,
        "disk_space": 999.0,
        "storage_cost": 9.0,
        "search": {"gpuCostPerHour": 5.0},
    }

    snapshot = vast.parse_instance(row, account="a", now=NOW)

    assert snapshot.storage_usd_per_hour == pytest.approx(0.1)
    assert snapshot.compute_usd_per_hour == pytest.approx(0.9)


def test_vast_without_any_billed_figure_keeps_costs_unknown() -> None:
    snapshot = vast.parse_instance({"id": 1, "actual_status": "running"}, account="a", now=NOW)

    assert snapshot.compute_usd_per_hour is None
    assert snapshot.storage_usd_per_hour is None
    assert billed_usd_per_hour(snapshot.state, None, None) is None


def test_vast_falls_back_to_dph_base_when_the_total_is_missing() -> None:
    row = {"id": 1, "actual_status": "running", "dph_base": 0.4, "storage_total_cost": 0.01}

    assert vast.parse_instance(row, account="a", now=NOW).compute_usd_per_hour == 0.4


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        (InstanceState.RUNNING, (100 * 0.10 + 20 * 0.10) / 730),
        (InstanceState.STARTING, (100 * 0.10 + 20 * 0.10) / 730),
        (InstanceState.STOPPED, 100 * 0.20 / 730),
        (InstanceState.PAUSED, 100 * 0.20 / 730),
        (InstanceState.GONE, 0.0),
    ],
)
def test_runpod_pod_storage_doubles_the_volume_rate_when_stopped(
    state: InstanceState, expected: float
) -> None:
    assert runpod.pod_storage_usd_per_hour(state, 100, 20) == pytest.approx(expected)


def test_runpod_storage_is_unknown_when_a_size_is_unknown_or_the_state_is() -> None:
    assert runpod.pod_storage_usd_per_hour(InstanceState.STOPPED, None, 20) is None
    assert runpod.pod_storage_usd_per_hour(InstanceState.RUNNING, 100, None) is None
    assert runpod.pod_storage_usd_per_hour(InstanceState.UNKNOWN, 100, 20) is None
    # a stopped pod's container disk is wiped: its size does not matter
    assert runpod.pod_storage_usd_per_hour(InstanceState.STOPPED, 100, None) is not None


@pytest.mark.parametrize(
    ("size_gb", "expected"),
    [
        (0, 0.0),
        (500, 500 * 0.07 / 730),
        (1000, 1000 * 0.07 / 730),
        (2500, (1000 * 0.07 + 1500 * 0.05) / 730),
    ],
)
def test_runpod_network_volumes_are_tiered_at_one_terabyte(size_gb: float, expected: float) -> None:
    assert runpod.network_volume_usd_per_hour(size_gb) == pytest.approx(expected)


def test_a_stopped_runpod_pod_bills_only_its_doubled_volume() -> None:
    pod = {
        "id": "p",
        "desiredStatus": "EXITED",
        "costPerHr": 2.0,
        "volumeInGb": 73,
        "containerDiskInGb": 50,
        "runtime": None,
    }

    snapshot = runpod.parse_pod(pod, account="a", now=NOW)

    billed = billed_usd_per_hour(
        snapshot.state, snapshot.compute_usd_per_hour, snapshot.storage_usd_per_hour
    )
    assert billed == pytest.approx(73 * 0.20 / 730)


def test_runpod_per_gpu_utilisation_keeps_unreadable_gpus_unknown() -> None:
    pod = {
        "id": "p",
        "desiredStatus": "RUNNING",
        "runtime": {"gpus": [{"gpuUtilPercent": 55}, {"gpuUtilPercent": None}, {"x": 1}, 7]},
    }

    snapshot = runpod.parse_pod(pod, account="a", now=NOW)

    assert snapshot.provider_gpu_util_percent == (55.0, None, None, None)


def test_runpod_out_of_range_utilisation_is_unknown_not_clamped() -> None:
    pod = {"id": "p", "desiredStatus": "RUNNING", "runtime": {"gpus": [{"gpuUtilPercent": 140}]}}

    assert runpod.parse_pod(pod, account="a", now=NOW).provider_gpu_util_percent == (None,)


def test_lambda_filesystem_rate_is_per_gib_used_per_720_hour_month() -> None:
    payload = {"data": [{"id": "f", "name": "n", "bytes_used": 10 * 1024**3, "is_in_use": False}]}

    (volume,) = lambda_cloud.parse_file_systems(payload, account="a", now=NOW)

    assert volume.usd_per_hour == pytest.approx(10 * 0.20 / 720)
    assert volume.attached is False


def test_lambda_price_in_cents_becomes_dollars_per_hour() -> None:
    row = {"id": "i", "status": "active", "instance_type": {"price_cents_per_hour": 2392}}

    assert lambda_cloud.parse_instance(row, account="a", now=NOW).compute_usd_per_hour == 23.92
