"""RunPod's ``lastStatusChange``: only the attested "Rented by User: <JS date>" is read, as the
instant the pod was rented; any other text is unknown, never an error."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from watchdog_gpu.model import InstanceState
from watchdog_gpu.providers.parsing import runpod

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "providers" / "runpod"
NOW = datetime(2025, 12, 2, 18, 0, tzinfo=UTC)


def _pods() -> dict[str, dict[str, object]]:
    payload = json.loads((FIXTURES / "myself_pods.json").read_text())
    return {pod["id"]: pod for pod in payload["data"]["myself"]["pods"]}


def test_the_fixtures_rented_dates_are_read_and_other_wordings_are_not() -> None:
    parsed = {
        pod_id: runpod.parse_pod(pod, account="a", now=NOW) for pod_id, pod in _pods().items()
    }

    assert {pod_id: pod.rented_at for pod_id, pod in parsed.items()} == {
        "k3f9x2m7q1w8za": datetime(2025, 12, 1, 9, 12, 33, tzinfo=UTC),
        "q7w2e9r4t6y1ui": datetime(2025, 11, 30, 21, 40, 2, tzinfo=UTC),
        # starting (RUNNING, runtime not up): no uptime, but the rented instant
        "z1x2c3v4b5n6m7": datetime(2025, 12, 2, 16, 31, 5, tzinfo=UTC),
        "a8s7d6f5g4h3jk": None,  # "Exited by User: …" is not attested
        "w3e4r5t6y7u8io": None,  # a placeholder wording
    }
    starting = parsed["z1x2c3v4b5n6m7"]
    assert (starting.state, starting.started_at) == (InstanceState.STARTING, None)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "Rented by User: Thu Aug 20 2026 03:29:12 GMT+0000 (Coordinated Universal Time)",
            datetime(2026, 8, 20, 3, 29, 12, tzinfo=UTC),
        ),
        # Another offset is converted to UTC; the zone's name in parentheses may be absent.
        (
            "Rented by User: Thu Aug 20 2026 05:29:12 GMT+0200 (Central European Summer Time)",
            datetime(2026, 8, 20, 3, 29, 12, tzinfo=UTC),
        ),
        (
            "Rented by User: Wed Aug 19 2026 22:59:12 GMT-0430",
            datetime(2026, 8, 20, 3, 29, 12, tzinfo=UTC),
        ),
    ],
)
def test_the_attested_form_is_read_as_an_instant_in_utc(text: str, expected: datetime) -> None:
    assert runpod.rented_by_user_at(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        None,
        1_787_196_552,
        "",
        "Exited by User: Thu Aug 20 2026 03:29:12 GMT+0000 (Coordinated Universal Time)",
        "rented by user: Thu Aug 20 2026 03:29:12 GMT+0000 (Coordinated Universal Time)",
        " Rented by User: Thu Aug 20 2026 03:29:12 GMT+0000 (Coordinated Universal Time)",
        "Rented by User: Thu Aug 20 2026 03:29:12 (Coordinated Universal Time)",  # no offset
        "Rented by User: Thu Aug 20 2026 03:29:12 GMT",
        "Rented by User: Thu Aug 20 2026 03:29:12",
        "Rented by User: 2026-08-20T03:29:12Z",
        "Rented by User: Fri Aug 20 2026 03:29:12 GMT+0000",  # the 20th is a Thursday
        "Rented by User: Mon Feb 30 2026 03:29:12 GMT+0000",  # no such day
        "Rented by User: Thu Aug 20 2026 24:00:00 GMT+0000",
        "Rented by User: Thu Aug 20 2026 03:29:12 GMT+2400",  # a day's offset
        "Rented by User: Thu Aug 20 2026 03:29:12 GMT+0060",
        "Rented by User: Thu Aug 20 2026 03:29:12 GMT+0000 (UTC) and more",
        "Rented by User: Thu Aug 20 2026 03:29:12 GMT+0000\n",
        "Rented by User: Thu Agu 20 2026 03:29:12 GMT+0000",
        "Rented by User: Thu Aug 20 2026 3:29:12 GMT+0000",
        "Rented by User: Thu Aug ２0 2026 03:29:12 GMT+0000",  # a full-width digit
    ],
)
def test_anything_else_is_unknown_never_an_error(text: object) -> None:
    assert runpod.rented_by_user_at(text) is None
