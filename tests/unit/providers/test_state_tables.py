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


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("running", S.RUNNING),
        ("frozen", S.RUNNING),  # still holds (and bills) its GPU
        ("stopped", S.PAUSED),
        ("scheduling", S.PAUSED),
        ("exited", S.PAUSED),
        ("created", S.PAUSED),
        ("loading", S.PAUSED),
        (None, S.PAUSED),
        ("unknown", S.UNKNOWN),
        ("offline", S.UNKNOWN),
    ],
)
def test_vast_interruptible_instances_that_are_not_running_are_paused(
    raw: object, expected: InstanceState
) -> None:
    row = {"id": 1, "actual_status": raw, "is_bid": True}

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
        ("EXITED", "INTERRUPTABLE", None, S.PAUSED),
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
        ("unhealthy", S.RUNNING),
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
