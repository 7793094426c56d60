"""Window verdicts with coverage: gaps, a vanished GPU, busy bursts, exact boundaries."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from watchdog_gpu.model import GpuSample, Verdict
from watchdog_gpu.probe.window import window_verdict

BUSY, IDLE, UNKNOWN = Verdict.BUSY, Verdict.IDLE, Verdict.UNKNOWN
START = datetime(2026, 3, 2, 20, 0, tzinfo=UTC)
END = START + timedelta(minutes=30)
MINUTE = timedelta(minutes=1)
MAX_GAP = timedelta(minutes=2)


def at(minutes: float) -> datetime:
    return START + timedelta(minutes=minutes)


def idle(minute: float, gpu: int = 0) -> GpuSample:
    return GpuSample("acct", "i-1", at(minute), gpu, IDLE, sm=0.0, enc=0.0, dec=0.0)


def busy(minute: float, gpu: int = 0, sm: float = 97.0) -> GpuSample:
    return GpuSample("acct", "i-1", at(minute), gpu, BUSY, sm=sm, enc=0.0, dec=0.0)


def mig(minute: float, gpu: int = 0, verdict: Verdict = UNKNOWN) -> GpuSample:
    return GpuSample("acct", "i-1", at(minute), gpu, verdict)


def every_minute(first: int, last: int, gpu: int = 0) -> list[GpuSample]:
    return [idle(minute, gpu) for minute in range(first, last + 1)]


def quiet(minute: float, sm: float) -> GpuSample:
    return GpuSample("acct", "i-1", at(minute), 0, IDLE, sm=sm, enc=0.0, dec=0.0)


def judge(
    samples: Iterable[GpuSample], *, threshold: float = 5.0, min_coverage: float = 0.8
) -> tuple[Verdict, float]:
    result = window_verdict(
        list(samples),
        START,
        END,
        threshold=threshold,
        max_gap=MAX_GAP,
        min_coverage=min_coverage,
    )
    return result.verdict, result.coverage


# Window 30 min, max_gap 2 min (each sample covers one minute either side), min_coverage 0.8.
COVERAGE_TABLE = [
    pytest.param(every_minute(0, 30), IDLE, 1.0, id="every minute, all idle"),
    pytest.param(
        [idle(m) for m in range(0, 31, 2)], IDLE, 1.0, id="gaps equal to max_gap still cover"
    ),
    pytest.param(
        [idle(m) for m in range(0, 31, 3)], UNKNOWN, 2 / 3, id="every 3 minutes: a third blind"
    ),
    pytest.param(
        every_minute(0, 10) + every_minute(17, 30), IDLE, 25 / 30, id="7-min gap: 5 min blind"
    ),
    pytest.param(
        every_minute(0, 10) + every_minute(20, 30), UNKNOWN, 22 / 30, id="10-min gap: 8 blind"
    ),
    pytest.param(
        every_minute(0, 10) + every_minute(18, 30), IDLE, 24 / 30, id="exactly min_coverage"
    ),
    pytest.param(
        every_minute(0, 9) + every_minute(18, 30), UNKNOWN, 23 / 30, id="a minute too little"
    ),
    pytest.param(every_minute(8, 30), UNKNOWN, 23 / 30, id="samples start late"),
    pytest.param(every_minute(0, 22), UNKNOWN, 23 / 30, id="samples stop early"),
    pytest.param([idle(15)], UNKNOWN, 2 / 30, id="a lone sample covers max_gap"),
    pytest.param([idle(0)], UNKNOWN, 1 / 30, id="a lone sample at the start covers half"),
    pytest.param([], UNKNOWN, 0.0, id="no samples"),
    pytest.param(
        [*every_minute(0, 14), busy(15), *every_minute(16, 30)], BUSY, 1.0, id="a busy burst"
    ),
    pytest.param([busy(15)], BUSY, 2 / 30, id="busy decides even with poor coverage"),
    pytest.param(
        [*every_minute(0, 29), quiet(30, sm=4.0)], IDLE, 1.0, id="activity at the threshold"
    ),
    pytest.param(
        [*every_minute(0, 14), mig(15), *every_minute(16, 30)], UNKNOWN, 1.0, id="one unknown"
    ),
    pytest.param(
        [mig(m, verdict=BUSY) for m in range(31)], BUSY, 1.0, id="MIG busy by its processes"
    ),
]


@pytest.mark.parametrize(("samples", "verdict", "coverage"), COVERAGE_TABLE)
def test_window_verdict_and_coverage(
    samples: list[GpuSample], verdict: Verdict, coverage: float
) -> None:
    found_verdict, found_coverage = judge(samples)
    assert found_verdict is verdict
    assert found_coverage == pytest.approx(coverage)


def test_coverage_exactly_at_min_coverage_is_idle_and_just_below_is_not() -> None:
    samples = every_minute(0, 10) + every_minute(18, 30)  # covers exactly 24 of 30 minutes
    assert judge(samples, min_coverage=0.8) == (IDLE, 0.8)
    assert judge(samples, min_coverage=0.81)[0] is UNKNOWN


def test_samples_exactly_at_start_and_end_count_and_outside_ones_do_not() -> None:
    inside = window_verdict([busy(30)], START, END, threshold=5, max_gap=MAX_GAP)
    assert inside.verdict is BUSY
    after = window_verdict([busy(30.5)], START, END, threshold=5, max_gap=MAX_GAP)
    assert after.verdict is UNKNOWN
    assert after.coverage == 0.0
    assert after.last_busy_at is None  # after the window's end: not "last activity" yet
    before = window_verdict(
        [busy(-0.5), *every_minute(0, 30)], START, END, threshold=5, max_gap=MAX_GAP
    )
    assert before.verdict is IDLE
    assert before.last_busy_at == at(-0.5)


def test_a_gpu_that_vanished_makes_the_window_unknown() -> None:
    samples = [*every_minute(0, 30, gpu=0), idle(-3, gpu=1), idle(-2, gpu=1)]
    result = window_verdict(samples, START, END, threshold=5, max_gap=MAX_GAP)
    assert result.verdict is UNKNOWN
    assert result.coverage == 0.0
    assert result.reason == "GPU 1 has no samples in the window"
    gpu0, gpu1 = result.gpus
    assert (gpu0.verdict, gpu0.coverage, gpu0.samples) == (IDLE, 1.0, 31)
    assert (gpu1.verdict, gpu1.coverage, gpu1.samples) == (UNKNOWN, 0.0, 0)


def test_an_expected_gpu_without_samples_makes_the_window_unknown() -> None:
    # dmon on a <= 535 driver shows only GPUs 0-3 of 8 by default.
    samples = [sample for gpu in range(4) for sample in every_minute(0, 30, gpu)]
    result = window_verdict(
        samples, START, END, threshold=5, max_gap=MAX_GAP, expected_gpus=range(8)
    )
    assert result.verdict is UNKNOWN
    assert result.reason == "GPU 4, 5, 6, 7 has no samples in the window"
    full = window_verdict(samples, START, END, threshold=5, max_gap=MAX_GAP, expected_gpus=[0])
    assert full.verdict is IDLE


def test_a_gpu_that_stops_halfway_lowers_the_windows_coverage() -> None:
    samples = every_minute(0, 30, gpu=0) + every_minute(0, 14, gpu=1)
    result = window_verdict(samples, START, END, threshold=5, max_gap=MAX_GAP)
    assert result.verdict is UNKNOWN
    assert result.coverage == pytest.approx(15 / 30)
    assert result.gpu(0) is not None
    assert result.gpu(0).verdict is IDLE  # type: ignore[union-attr]
    assert result.gpu(1).verdict is UNKNOWN  # type: ignore[union-attr]
    assert result.gpu(7) is None


def test_coverage_counts_only_time_every_gpu_was_seen() -> None:
    # GPU 0 seen in the first 20 minutes, GPU 1 in the last 20: both only in 10 of them.
    samples = every_minute(0, 19, gpu=0) + every_minute(11, 30, gpu=1)
    result = window_verdict(samples, START, END, threshold=5, max_gap=MAX_GAP, min_coverage=0)
    assert result.coverage == pytest.approx(10 / 30)
    assert [gpu.coverage for gpu in result.gpus] == [pytest.approx(20 / 30)] * 2


def test_one_busy_gpu_makes_the_window_busy_and_sets_last_activity() -> None:
    samples = (
        every_minute(0, 30, gpu=0) + [idle(m, 1) for m in range(31) if m != 12] + [busy(12, 1)]
    )
    result = window_verdict(samples, START, END, threshold=5, max_gap=MAX_GAP)
    assert result.verdict is BUSY
    assert result.reason == "GPU 1 busy"
    assert result.last_busy_at == at(12)
    assert result.gpu(0).last_busy_at is None  # type: ignore[union-attr]
    assert (result.gpu(1).busy, result.gpu(1).idle) == (1, 30)  # type: ignore[union-attr]


def test_a_lower_window_threshold_turns_recorded_idle_samples_busy() -> None:
    samples = [GpuSample("acct", "i-1", at(m), 0, IDLE, sm=3.0) for m in range(31)]
    assert judge(samples, threshold=5)[0] is IDLE
    assert judge(samples, threshold=2)[0] is BUSY


def test_the_reason_states_the_coverage_of_an_idle_window() -> None:
    result = window_verdict(every_minute(0, 30), START, END, threshold=5, max_gap=MAX_GAP)
    assert result.reason == "every GPU idle in every sample; samples cover 100%"
    assert (result.start, result.end, result.min_coverage) == (START, END, 0.8)


@dataclass(frozen=True)
class Arguments:
    start: datetime = START
    end: datetime = END
    max_gap: timedelta = MAX_GAP
    min_coverage: float = 0.8
    threshold: float = 5.0


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (Arguments(end=START), "end after it starts"),
        (Arguments(start=END, end=START), "end after it starts"),
        (Arguments(start=START.replace(tzinfo=None)), "timezone-aware"),
        (Arguments(max_gap=timedelta(0)), "max_gap"),
        (Arguments(min_coverage=1.5), "min_coverage"),
        (Arguments(min_coverage=float("nan")), "min_coverage"),
        (Arguments(threshold=-1.0), "threshold"),
    ],
)
def test_window_verdict_refuses_bad_arguments(arguments: Arguments, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        window_verdict(
            [],
            arguments.start,
            arguments.end,
            threshold=arguments.threshold,
            max_gap=arguments.max_gap,
            min_coverage=arguments.min_coverage,
        )


def test_samples_of_two_instances_are_refused() -> None:
    other = GpuSample("acct", "i-2", at(1), 0, IDLE, sm=0.0)
    with pytest.raises(ValueError, match="more than one instance"):
        window_verdict([idle(0), other], START, END, threshold=5, max_gap=MAX_GAP)
