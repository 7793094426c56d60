"""Window helpers: per-sample verdicts under the rule's threshold, coverage, expected GPUs."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.unit.rules.builders import at
from watchdog_gpu.model import GpuSample, Verdict
from watchdog_gpu.rules.windows import covered_seconds, expected_gpus, sample_verdict

GAP = timedelta(minutes=3)


def sample(verdict: Verdict, metrics: dict[str, float | None]) -> GpuSample:
    return GpuSample(
        account="a",
        instance_id="1",
        at=at(0),
        gpu_index=0,
        verdict=verdict,
        sm=metrics.get("sm"),
        enc=metrics.get("enc"),
        dec=metrics.get("dec"),
        jpg=metrics.get("jpg"),
        ofa=metrics.get("ofa"),
    )


@pytest.mark.parametrize(
    ("recorded", "metrics", "expected"),
    [
        (Verdict.IDLE, {"sm": 0.0}, Verdict.IDLE),
        (Verdict.IDLE, {"sm": 5.0}, Verdict.IDLE),  # at the threshold is idle
        (Verdict.IDLE, {"sm": 6.0}, Verdict.BUSY),
        (Verdict.BUSY, {"sm": 3.0}, Verdict.IDLE),  # recorded with a lower threshold
        (Verdict.IDLE, {"sm": 0.0, "enc": 40.0}, Verdict.BUSY),
        (Verdict.IDLE, {"sm": 0.0, "dec": 9.0}, Verdict.BUSY),
        (Verdict.IDLE, {"sm": 0.0, "jpg": 9.0}, Verdict.BUSY),
        (Verdict.IDLE, {"sm": 0.0, "ofa": 9.0}, Verdict.BUSY),
        (Verdict.BUSY, {"sm": None}, Verdict.BUSY),  # MIG with compute processes
        (Verdict.UNKNOWN, {"sm": None}, Verdict.UNKNOWN),  # MIG without processes
        (Verdict.IDLE, {"sm": None}, Verdict.UNKNOWN),  # no sm is never idle
        (Verdict.UNKNOWN, {"sm": 0.0}, Verdict.UNKNOWN),  # never idler than recorded unknown
        (Verdict.UNKNOWN, {"sm": 50.0}, Verdict.BUSY),
    ],
)
def test_sample_verdict_under_the_rule_threshold(
    recorded: Verdict, metrics: dict[str, float | None], expected: Verdict
) -> None:
    assert sample_verdict(sample(recorded, metrics), 5.0) is expected


def test_time_between_close_samples_is_covered_and_long_gaps_are_blind() -> None:
    times = [at(0), at(1), at(2), at(10), at(11)]
    # [0, 2] and [10, 11] are covered; the 8-minute gap is blind.
    assert covered_seconds(times, at(0), at(11), GAP) == 3 * 60
    # Clipped to the window; the pair straddling its start counts from the start.
    assert covered_seconds(times, at(1.5), at(10.5), GAP) == 60
    assert covered_seconds([at(5)], at(0), at(10), GAP) == 0


def test_expected_gpus_come_from_the_count_and_the_samples() -> None:
    assert expected_gpus(2, []) == (0, 1)
    assert expected_gpus(2, [0, 3]) == (0, 1, 2, 3)
    assert expected_gpus(None, [1]) == (0, 1)
    assert expected_gpus(None, []) == ()
