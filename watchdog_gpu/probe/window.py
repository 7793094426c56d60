"""The verdict for a time window of GPU samples, with how much of the window samples covered.

Each sample at ``t`` covers ``[t - max_gap/2, t + max_gap/2]`` clipped to the window; the
window's coverage is the fraction covered for every GPU at once. A GPU is busy if any sample is,
idle only if all are and its coverage reaches ``min_coverage``, else unknown; the window is busy
if any GPU is, idle only if every GPU is idle and covered, else unknown — never idle from missing
data. A GPU seen before the window or expected, with no sample inside it, makes it unknown.
Samples are re-judged with :func:`~watchdog_gpu.probe.verdicts.sample_verdict`; ``last_busy_at``
is the latest busy sample at or before ``end``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from watchdog_gpu.model import GpuSample, Verdict
from watchdog_gpu.probe.verdicts import check_threshold, combine_verdicts, sample_verdict

DEFAULT_MIN_COVERAGE = 0.8  # the idle_gpu rule's default

Span = tuple[datetime, datetime]


@dataclass(frozen=True, slots=True)
class GpuWindow:
    """One GPU in a window: its verdict, how its in-window samples were judged, its coverage."""

    gpu_index: int
    verdict: Verdict
    samples: int
    busy: int
    idle: int
    unknown: int
    coverage: float
    last_busy_at: datetime | None


@dataclass(frozen=True, slots=True)
class WindowVerdict:
    """The verdict for ``[start, end]``; ``reason`` says why in one human sentence."""

    start: datetime
    end: datetime
    verdict: Verdict
    coverage: float
    min_coverage: float
    gpus: tuple[GpuWindow, ...]
    last_busy_at: datetime | None
    reason: str

    def gpu(self, index: int) -> GpuWindow | None:
        """The entry of GPU ``index``, or ``None`` if the window knows no such GPU."""
        return next((gpu for gpu in self.gpus if gpu.gpu_index == index), None)


@dataclass(frozen=True, slots=True)
class _Rules:
    start: datetime
    end: datetime
    threshold: float
    max_gap: timedelta
    min_coverage: float


def window_verdict(
    samples: Sequence[GpuSample],
    start: datetime,
    end: datetime,
    *,
    threshold: float,
    max_gap: timedelta,
    min_coverage: float = DEFAULT_MIN_COVERAGE,
    expected_gpus: Iterable[int] = (),
) -> WindowVerdict:
    """Judge the samples of one instance over ``[start, end]`` (see the module docstring).

    Raise ``ValueError`` for an empty or reversed window, a naive datetime, a non-positive
    ``max_gap``, a ``min_coverage`` outside [0, 1], a threshold outside [0, 100], or samples of
    more than one instance.
    """
    rules = _Rules(start, end, threshold, max_gap, min_coverage)
    _check_arguments(samples, rules)
    indices = sorted({sample.gpu_index for sample in samples} | set(expected_gpus))
    gpus: list[GpuWindow] = []
    covered_by_all: list[Span] = [(start, end)]
    for index in indices:
        own = [sample for sample in samples if sample.gpu_index == index]
        gpu, spans = _judge_gpu(index, own, rules)
        covered_by_all = intersect_spans(covered_by_all, spans)
        gpus.append(gpu)
    coverage = _fraction(covered_by_all, start, end) if gpus else 0.0
    verdict, reason = _overall(gpus, coverage, min_coverage)
    busy_times = [gpu.last_busy_at for gpu in gpus if gpu.last_busy_at is not None]
    return WindowVerdict(
        start=start,
        end=end,
        verdict=verdict,
        coverage=coverage,
        min_coverage=min_coverage,
        gpus=tuple(gpus),
        last_busy_at=max(busy_times, default=None),
        reason=reason,
    )


def _check_arguments(samples: Sequence[GpuSample], rules: _Rules) -> None:
    if rules.start.tzinfo is None or rules.end.tzinfo is None:
        raise ValueError("start and end must be timezone-aware")
    if rules.end <= rules.start:
        raise ValueError("the window must end after it starts")
    if rules.max_gap <= timedelta(0):
        raise ValueError("max_gap must be positive")
    if not (math.isfinite(rules.min_coverage) and 0 <= rules.min_coverage <= 1):
        raise ValueError(f"min_coverage must be between 0 and 1, got {rules.min_coverage!r}")
    check_threshold(rules.threshold)
    if len({(sample.account, sample.instance_id) for sample in samples}) > 1:
        raise ValueError("samples of more than one instance")


def _judge_gpu(index: int, own: Sequence[GpuSample], rules: _Rules) -> tuple[GpuWindow, list[Span]]:
    """One GPU's entry and the spans its in-window samples cover."""
    start, end = rules.start, rules.end
    inside = [sample for sample in own if start <= sample.at <= end]
    spans = union_spans([_span(sample.at, start, end, rules.max_gap) for sample in inside])
    judged = [sample_verdict(sample, threshold=rules.threshold) for sample in inside]
    busy_times = [
        sample.at
        for sample in own
        if sample.at <= end and sample_verdict(sample, threshold=rules.threshold) is Verdict.BUSY
    ]
    coverage = _fraction(spans, start, end)
    verdict = combine_verdicts(judged)
    if verdict is Verdict.IDLE and coverage < rules.min_coverage:
        verdict = Verdict.UNKNOWN
    gpu = GpuWindow(
        gpu_index=index,
        verdict=verdict,
        samples=len(inside),
        busy=judged.count(Verdict.BUSY),
        idle=judged.count(Verdict.IDLE),
        unknown=judged.count(Verdict.UNKNOWN),
        coverage=coverage,
        last_busy_at=max(busy_times, default=None),
    )
    return gpu, spans


def _overall(
    gpus: Sequence[GpuWindow], coverage: float, min_coverage: float
) -> tuple[Verdict, str]:
    if not gpus:
        return Verdict.UNKNOWN, "no GPU samples"
    busy = [gpu.gpu_index for gpu in gpus if gpu.verdict is Verdict.BUSY]
    if busy:
        return Verdict.BUSY, f"GPU {_names(busy)} busy"
    vanished = [gpu.gpu_index for gpu in gpus if gpu.samples == 0]
    if vanished:
        return Verdict.UNKNOWN, f"GPU {_names(vanished)} has no samples in the window"
    not_idle = [gpu.gpu_index for gpu in gpus if gpu.unknown]
    if not_idle:
        return Verdict.UNKNOWN, f"GPU {_names(not_idle)} has samples of unknown activity"
    if coverage < min_coverage:
        return (
            Verdict.UNKNOWN,
            f"samples cover {coverage:.0%} of the window, less than {min_coverage:.0%}",
        )
    if any(gpu.verdict is not Verdict.IDLE for gpu in gpus):
        return Verdict.UNKNOWN, "not every GPU is idle"
    return Verdict.IDLE, f"every GPU idle in every sample; samples cover {coverage:.0%}"


def _names(indices: Sequence[int]) -> str:
    return ", ".join(str(index) for index in indices)


def _span(at: datetime, start: datetime, end: datetime, max_gap: timedelta) -> Span:
    return max(start, at - max_gap / 2), min(end, at + max_gap / 2)


def union_spans(spans: Iterable[Span]) -> list[Span]:
    """The union of ``spans`` as sorted, disjoint spans (touching ones merged)."""
    merged: list[Span] = []
    for low, high in sorted(spans):
        if merged and low <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], high))
        else:
            merged.append((low, high))
    return merged


def intersect_spans(
    first: Sequence[Span], second: Sequence[Span], *, points: bool = False
) -> list[Span]:
    """The intersection of two sorted lists of disjoint spans (a two-pointer sweep); with
    ``points``, zero-length overlaps (a lone sample's instant) are kept too."""
    both: list[Span] = []
    i = j = 0
    while i < len(first) and j < len(second):
        low, high = max(first[i][0], second[j][0]), min(first[i][1], second[j][1])
        if low < high or (points and low == high):
            both.append((low, high))
        if first[i][1] < second[j][1]:
            i += 1
        else:
            j += 1
    return both


def _fraction(spans: Sequence[Span], start: datetime, end: datetime) -> float:
    covered = sum((high - low for low, high in spans), timedelta(0))
    return min(1.0, covered / (end - start))
