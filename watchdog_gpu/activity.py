"""GPU time by activity: the recorded activity marks read back and laid over the ledger (pure).

The evaluations record each instance's activity — busy, idle, blind — as marks
(:mod:`watchdog_gpu.activity_marks`); the spend report intersects the ledger's billing pieces
(:mod:`watchdog_gpu.spend`) with them (:func:`activity_split`): GPU-hours and dollars billed while
observed idle, blind and busy, and dollars billed without a GPU. Billed time without a mark
counts as blind, never idle. ``docs/safety.md``, "GPU time by activity".
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from watchdog_gpu.fleet import InstanceView
from watchdog_gpu.model import Activity, ActivityMark, InstanceState
from watchdog_gpu.spend import SECONDS_PER_HOUR, BillingPiece

# The states in which an instance holds (and bills) its GPUs; paused and stopped ones bill their
# disk only, a gone one nothing.
GPU_STATES = frozenset({InstanceState.RUNNING, InstanceState.STARTING, InstanceState.UNKNOWN})


@dataclass(frozen=True, slots=True)
class ActivitySpan:
    """``[start, end)`` in one class of activity."""

    start: datetime
    end: datetime
    activity: Activity


def activity_spans(marks: Sequence[ActivityMark], until: datetime) -> list[ActivitySpan]:
    """The stretches ``marks`` (in the order recorded) describe, up to ``until``: each mark
    holds until the next one's ``since``; a later mark with an earlier ``since`` overrides the
    ones it reaches back over (an idle clock that started before the marks before it)."""
    kept: list[ActivityMark] = []
    for mark in marks:
        while kept and kept[-1].since >= mark.since:
            kept.pop()
        kept.append(mark)
    spans: list[ActivitySpan] = []
    for index, mark in enumerate(kept):
        end = kept[index + 1].since if index + 1 < len(kept) else until
        end = min(end, until)
        if end > mark.since:
            spans.append(ActivitySpan(mark.since, end, mark.activity))
    return spans


@dataclass(frozen=True, slots=True)
class ActivityFigure:
    """GPU-hours and dollars billed while idle, blind and busy; ``no_gpu_usd``: the dollars
    billed without a GPU (a paused or stopped instance's disk, a volume). The four dollar
    figures add up to the spend of the same pieces; time at an unknown rate has GPU-hours and
    no dollars."""

    idle_gpu_hours: float = 0.0
    blind_gpu_hours: float = 0.0
    busy_gpu_hours: float = 0.0
    idle_usd: float = 0.0
    blind_usd: float = 0.0
    busy_usd: float = 0.0
    no_gpu_usd: float = 0.0

    def __add__(self, other: ActivityFigure) -> ActivityFigure:
        return ActivityFigure(
            self.idle_gpu_hours + other.idle_gpu_hours,
            self.blind_gpu_hours + other.blind_gpu_hours,
            self.busy_gpu_hours + other.busy_gpu_hours,
            self.idle_usd + other.idle_usd,
            self.blind_usd + other.blind_usd,
            self.busy_usd + other.busy_usd,
            self.no_gpu_usd + other.no_gpu_usd,
        )

    def gpu_hours(self, activity: Activity) -> float:
        return {
            Activity.IDLE: self.idle_gpu_hours,
            Activity.BLIND: self.blind_gpu_hours,
            Activity.BUSY: self.busy_gpu_hours,
        }[activity]

    def usd(self, activity: Activity) -> float:
        return {
            Activity.IDLE: self.idle_usd,
            Activity.BLIND: self.blind_usd,
            Activity.BUSY: self.busy_usd,
        }[activity]


def activity_split(
    pieces: Iterable[BillingPiece],
    gpus: int,
    spans: Sequence[ActivitySpan],
    start: datetime,
    end: datetime,
) -> ActivityFigure:
    """What ``pieces`` billed within ``[start, end]`` by activity: the time of a piece in a
    state that holds the GPUs (:data:`GPU_STATES`) is split by ``spans`` (time no span covers
    is blind) and counts ``gpus`` GPU-hours an hour; other pieces are dollars without a GPU."""
    hours = dict.fromkeys(Activity, 0.0)
    usd = dict.fromkeys(Activity, 0.0)
    no_gpu = 0.0
    for piece in pieces:
        low, high = max(piece.start, start), min(piece.end, end)
        if high <= low:
            continue
        rate = piece.usd_per_hour
        if gpus <= 0 or piece.state not in GPU_STATES:
            if rate is not None:
                no_gpu += rate * (high - low).total_seconds() / SECONDS_PER_HOUR
            continue
        for activity, seconds in _seconds_by_activity(spans, low, high).items():
            hours[activity] += gpus * seconds / SECONDS_PER_HOUR
            if rate is not None:
                usd[activity] += rate * seconds / SECONDS_PER_HOUR
    return ActivityFigure(
        hours[Activity.IDLE],
        hours[Activity.BLIND],
        hours[Activity.BUSY],
        usd[Activity.IDLE],
        usd[Activity.BLIND],
        usd[Activity.BUSY],
        no_gpu,
    )


def _seconds_by_activity(
    spans: Sequence[ActivitySpan], low: datetime, high: datetime
) -> dict[Activity, float]:
    seconds = dict.fromkeys(Activity, 0.0)
    covered = 0.0
    for span in spans:
        if span.end <= low or span.start >= high:
            continue
        overlap = (min(span.end, high) - max(span.start, low)).total_seconds()
        seconds[span.activity] += overlap
        covered += overlap
    seconds[Activity.BLIND] += (high - low).total_seconds() - covered
    return seconds


def instance_gpus(instance: InstanceView) -> int:
    """The GPUs the instance bills (1 when the provider does not say)."""
    count = instance.latest.gpu_count
    return 1 if count is None else count


def instance_activity_spans(
    instance: InstanceView, marks: Sequence[ActivityMark]
) -> list[ActivitySpan]:
    """:func:`activity_spans` of ``instance``'s recorded ``marks``: they hold up to its last
    listing, so the time after it (billed as estimated: an outage, a stopped daemon) is
    blind."""
    listed = instance.spans[-1].last_seen if instance.spans else instance.latest.observed_at
    return activity_spans(marks, listed)
