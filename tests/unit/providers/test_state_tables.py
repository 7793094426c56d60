"""Each provider's state table, its unknown fallback and the refinements applied after it."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from watchdog_gpu.model import InstanceState
from watchdog_gpu.providers.parsing import lambda_cloud, runpod, vast
from watchdog_gpu.providers.parsing.common import StateTable

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)

S = InstanceState


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("running", S.RUNNING),
        ("frozen", S.RUNNING),
        ("loading", S.STARTING),
        ("created", S.STARTING),
        ("scheduling", S.STARTING),
        ("rebooting", S.STARTING),
        (None, S.STARTING),
        ("stopped", S.STOPPED),
        ("exited", S.STOPPED),
        ("unknown", S.UNKNOWN),
        ("offline", S.UNKNOWN),
        ("destroying", S.UNKNOWN),
        ("something-new", S.UNKNOWN),
        (3, S.UNKNOWN),
        ("  RUNNING ", S.RUNNING),
    ],
)
def test_vast_on_demand_states(raw: object, expected: InstanceState) -> None:
    row = {"id": 1, "actual_status": raw, "is_bid": False}

    assert vast.parse_instance(row, account="a", now=NOW).state is expected


def test_a_bid_stopped_with_an_error_status_is_a_stopped_disk_even_below_min_bid() -> None:
    row = {
        "id": 1,
        "actual_status": "stopped",
        "intended_status": "running",
        "cur_state": "stopped",
        "status_msg": "Error response from daemon: host fault",
        "is_bid": True,
        "dph_base": 0.22,
        "min_bid": 0.31,
    }

    assert vast.parse_instance(row, account="a", now=NOW).state is S.STOPPED


@pytest.mark.parametrize(("contract", "expected"), [("running", S.RUNNING), ("stopped", S.STOPPED)])
@pytest.mark.parametrize("is_bid", [False, True])
def test_an_exited_vast_container_whose_contract_runs_bills_its_gpu(
    contract: str, expected: InstanceState, is_bid: bool
) -> None:
    row = {
        "id": 1,
        "actual_status": "exited",
        "intended_status": "running",
        "cur_state": contract,
        "is_bid": is_bid,
        "dph_base": 0.40,
        "dph_total": 0.41,
        "storage_total_cost": 0.01,
        "min_bid": 0.31,
    }

    snapshot = vast.parse_instance(row, account="a", now=NOW)

    assert snapshot.state is expected
    assert snapshot.compute_usd_per_hour == pytest.approx(0.40)
    assert snapshot.raw_state.startswith("exited")


@pytest.mark.parametrize(
    ("actual", "intended", "bid", "min_bid", "expected"),
    [
        ("running", "running", 0.22, 0.31, S.RUNNING),
        ("frozen", "frozen", 0.22, 0.31, S.RUNNING),  # still holds (and bills) its GPU
        # Loading, created, provisioning or rebooting: starting, whatever the bid (the GPU is
        # not billed yet and nothing was lost).
        ("loading", "running", 0.22, 0.31, S.STARTING),
        ("created", "running", 0.22, 0.31, S.STARTING),
        (None, "running", 0.22, 0.31, S.STARTING),
        ("rebooting", "running", 0.22, 0.31, S.STARTING),
        # Scheduling: outbid only when the bid is below min_bid; else waiting for its GPU.
        ("scheduling", "running", 0.22, 0.31, S.PAUSED),
        ("scheduling", "running", 0.40, 0.31, S.STARTING),
        ("scheduling", "running", None, None, S.STARTING),
        # Stopped while the user wants it running: Vast took the GPU (outbid).
        ("stopped", "running", 0.22, 0.31, S.PAUSED),
        # Stopped by Vast itself (zero balance, a host fault): its user still wants it running,
        # and without a known losing bid it is a stopped disk, not outbid.
        ("stopped", "running", None, None, S.STOPPED),
        ("stopped", "running", 0.22, None, S.STOPPED),
        ("stopped", "running", 0.40, 0.31, S.STOPPED),  # a winning bid: not an outbid
        # Stopped with intended "stopped": a user stop and an outbid look alike; the less
        # destructive reading is a stopped disk.
        ("stopped", "stopped", 0.22, 0.31, S.STOPPED),
        ("stopped", "stopped", 0.40, 0.31, S.STOPPED),
        ("stopped", None, 0.22, 0.31, S.STOPPED),
        ("exited", "running", 0.22, 0.31, S.STOPPED),  # the container died: not an outbid
        ("unknown", "running", 0.22, 0.31, S.UNKNOWN),
        ("offline", "running", 0.22, 0.31, S.UNKNOWN),
    ],
)
def test_vast_interruptible_instances_are_paused_only_when_held_off_their_gpu(
    actual: object,
    intended: str | None,
    bid: float | None,
    min_bid: float | None,
    expected: InstanceState,
) -> None:
    row = {
        "id": 1,
        "actual_status": actual,
        "intended_status": intended,
        "is_bid": True,
        "dph_base": bid,
        "min_bid": min_bid,
    }

    snapshot = vast.parse_instance(row, account="a", now=NOW)

    assert snapshot.state is expected
    assert snapshot.interruptible is True


@pytest.mark.parametrize(
    ("desired", "pod_type", "runtime", "expected"),
    [
        ("RUNNING", "RESERVED", {}, S.RUNNING),
        ("RUNNING", "RESERVED", None, S.STARTING),
        ("RUNNING", "INTERRUPTABLE", {}, S.RUNNING),
        ("EXITED", "RESERVED", None, S.STOPPED),
        # Interrupted and user-stopped spot pods look alike: the less destructive reading.
        ("EXITED", "INTERRUPTABLE", None, S.STOPPED),
        ("TERMINATED", "RESERVED", None, S.GONE),
        ("CREATED", "RESERVED", None, S.STARTING),
        ("RESTARTING", "RESERVED", None, S.STARTING),
        ("PAUSED", "RESERVED", None, S.UNKNOWN),
        ("DEAD", "INTERRUPTABLE", None, S.UNKNOWN),
        ("SOMETHING_NEW", "RESERVED", {}, S.UNKNOWN),
        (None, "RESERVED", {}, S.UNKNOWN),
    ],
)
def test_runpod_states(
    desired: object, pod_type: str, runtime: object, expected: InstanceState
) -> None:
    pod = {"id": "p1", "desiredStatus": desired, "podType": pod_type, "runtime": runtime}

    assert runpod.parse_pod(pod, account="a", now=NOW).state is expected


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        ("booting", S.STARTING),
        ("active", S.RUNNING),
        ("unhealthy", S.UNKNOWN),  # failed its health checks: never judged idle
        ("terminating", S.GONE),
        ("terminated", S.GONE),
        ("preempted", S.UNKNOWN),
        ("new-thing", S.UNKNOWN),
        (None, S.UNKNOWN),
    ],
)
def test_lambda_states(status: object, expected: InstanceState) -> None:
    row = {"id": "i1", "status": status}

    assert lambda_cloud.parse_instance(row, account="a", now=NOW).state is expected


def test_a_state_table_falls_back_to_unknown_for_anything_unlisted() -> None:
    table = StateTable("x", {"Up": S.RUNNING})

    assert table.lookup("up") is S.RUNNING
    assert table.lookup(" UP ") is S.RUNNING
    assert table.lookup("down") is S.UNKNOWN
    assert table.lookup(None) is S.UNKNOWN
    assert table.lookup(["up"]) is S.UNKNOWN


def test_no_table_maps_anything_to_an_idle_looking_state_by_default() -> None:
    # Unknown is never "running but idle": rules only ever see UNKNOWN for what we cannot map.
    for table in (vast.VAST_STATES, runpod.RUNPOD_STATES, lambda_cloud.LAMBDA_STATES):
        assert table.lookup("definitely-not-a-state") is S.UNKNOWN
