"""Window helpers the rules share: per-sample verdicts, running time, sample coverage.

Pure functions of recorded values; no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from itertools import pairwise

from watchdog_gpu.fleet import InstanceView
from watchdog_gpu.model import GpuSample, Verdict
from watchdog_gpu.spend import SpendFigure


def sample_verdict(sample: GpuSample, threshold_percent: float) -> Verdict:
    """Was the GPU busy in ``sample``, judged with the rule's ``threshold_percent``?

    Busy when any of ``sm``, ``enc``, ``dec``, ``jpg``, ``ofa`` that is present exceeds the
    threshold (a video job can keep ``sm`` low while the encoder works). Otherwise idle — with
    two exceptions that are never idle: a sample without ``sm`` (``-`` in dmon: MIG, or a
    provider reporting nothing) keeps a recorded busy (the probe saw compute processes) and is
    unknown otherwise; a sample recorded unknown stays unknown. A sample recorded busy with real
    metrics all at or under this threshold is idle: the rule's threshold decides (the probe may
    have recorded with a lower one).
    """
    for value in (sample.sm, sample.enc, sample.dec, sample.jpg, sample.ofa):
        if value is not None and value > threshold_percent:
            return Verdict.BUSY
    if sample.sm is None:
        return Verdict.BUSY if sample.verdict is Verdict.BUSY else Verdict.UNKNOWN
    if sample.verdict is Verdict.UNKNOWN:
        return Verdict.UNKNOWN
    return Verdict.IDLE


def usable_sample(sample: GpuSample) -> bool:
    """True when the sample says something about the GPU (busy, or idle with a real ``sm``)."""
    if sample.verdict is Verdict.BUSY:
        return True
    return sample.verdict is Verdict.IDLE and sample.sm is not None


def covered_seconds(
    times: Sequence[datetime], start: datetime, end: datetime, max_gap: timedelta
) -> float:
    """Seconds of ``[start, end]`` observed by ``times`` (sorted instants of usable samples).

    Time counts as observed when it lies between two consecutive samples at most ``max_gap``
    apart; anything else (before the first sample, after the last one, inside a longer gap) is
    blind time.
    """
    total = 0.0
    for earlier, later in pairwise(times):
        if later - earlier > max_gap or later <= start or earlier >= end:
            continue
        low, high = max(earlier, start), min(later, end)
        total += (high - low).total_seconds()
    return total


def coverage(
    times: Sequence[datetime], start: datetime, end: datetime, max_gap: timedelta
) -> float:
    """The fraction of ``[start, end]`` that :func:`covered_seconds` counts; 0 for an empty
    window."""
    length = (end - start).total_seconds()
    if length <= 0:
        return 0.0
    return covered_seconds(times, start, end, max_gap) / length


def expected_gpus(gpu_count: int | None, seen: Iterable[int]) -> tuple[int, ...]:
    """The GPU indexes an instance must have samples for, given the provider's ``gpu_count``
    and the indexes ``seen`` in samples.

    ``0 .. gpu_count-1`` when the provider says how many GPUs there are, extended by any higher
    index seen; just ``0 .. highest seen`` when the count is unknown (``nvidia-smi dmon`` lists
    every GPU of the host by default, so a GPU missing below a higher one still counts).
    """
    highest = max(seen, default=-1)
    if gpu_count is not None and gpu_count > 0:
        return tuple(range(max(gpu_count, highest + 1)))
    return tuple(range(highest + 1))


def spend_evidence(figure: SpendFigure) -> dict[str, float | None]:
    """Evidence entries for money spent in an episode: ``usd_so_far`` (the known dollars) and,
    only when part of the time had an unknown rate, ``usd_unknown_seconds`` — unknown cost is
    never shown as $0."""
    entries: dict[str, float | None] = {"usd_so_far": round(figure.usd, 4)}
    if not figure.complete:
        entries["usd_unknown_seconds"] = round(figure.unknown_seconds)
    return entries


def billed_rate(instance: InstanceView) -> float | None:
    """What the instance bills per hour in its current state (``None``: unknown)."""
    span = instance.current_span
    return span.billed_usd_per_hour if span is not None else None


def state_since(instance: InstanceView) -> datetime:
    """When the instance entered its current state; its latest observation when no span says
    (a late date: every timer counted from it runs late, never early)."""
    return instance.state_since() or instance.latest.observed_at
