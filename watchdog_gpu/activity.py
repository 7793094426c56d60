"""GPU activity over time — busy, idle or blind — as the idle rule's clock judged it (pure).

Each evaluation classifies every instance (:func:`instance_activity`) and the tick records a
mark only when the class changes (:func:`activity_changes`); the spend report intersects the
ledger's billing pieces with those marks (:func:`activity_split`): GPU-hours and dollars billed
while observed idle, blind and busy. ``docs/commands.md``, "report":

- ``idle``: the idle clock runs (:func:`~watchdog_gpu.rules.idle_clock.current_idle`, the one
  "idle since"); the mark starts at the clock's start, which may be before this evaluation: the
  previous class ends there.
- ``busy``: a GPU worked (a busy sample, an interactive login) within ``max_sample_gap`` — also
  while the clock runs, so the pauses of bursty work stay busy; from the first busy sample after
  the previous mark.
- ``blind``: neither — no usable sample lately (unreachable, no probe, not running), only
  samples that cannot prove idle, start-up before the rule arms; from the newest usable sample.

A gap between two evaluations longer than the clock's ``restart_after`` (a daemon that was down)
is blind from the earlier one: the watchdog saw nothing meanwhile. Billed time without a mark
counts as blind, never idle.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from watchdog_gpu.evidence import AccountEvidence
from watchdog_gpu.fleet import FleetView, InstanceView
from watchdog_gpu.model import Activity, ActivityMark, InstanceState
from watchdog_gpu.rules.idle_clock import IdleClockSettings, IdleEpisode
from watchdog_gpu.sample_history import BUSY, SampleHistory, instant, micros, sample_history
from watchdog_gpu.spend import SECONDS_PER_HOUR, BillingPiece

# The states in which an instance holds (and bills) its GPUs; paused and stopped ones bill their
# disk only, a gone one nothing.
GPU_STATES = frozenset({InstanceState.RUNNING, InstanceState.STARTING, InstanceState.UNKNOWN})


def instance_activity(
    instance: InstanceView,
    episode: IdleEpisode | None,
    previous: ActivityMark | None,
    *,
    now: datetime,
    settings: IdleClockSettings,
    evidence: AccountEvidence,
) -> ActivityMark:
    """The instance's activity at ``now`` (see the module docstring): ``episode`` is its running
    idle episode as the idle rule computed it (None: the clock does not run), ``previous`` its
    latest mark. Returns ``previous`` itself when the class did not change."""
    history = sample_history(instance.samples)
    gap, threshold = settings.max_sample_gap, settings.threshold_percent
    worked = _last_work(history, episode, now, gap, threshold)
    if worked is not None and now - worked <= gap:
        if previous is not None and previous.activity is Activity.BUSY:
            return previous
        after = previous.since if previous is not None else None
        return ActivityMark(Activity.BUSY, _first_busy(history, after, now, threshold) or worked)
    if episode is not None:
        idle = ActivityMark(Activity.IDLE, episode.start)
        return previous if previous == idle else idle
    return _blind(history, previous, now, evidence)


def _blind(
    history: SampleHistory, previous: ActivityMark | None, now: datetime, evidence: AccountEvidence
) -> ActivityMark:
    """Blind from the newest usable sample (``previous`` itself when it is blind already)."""
    if previous is not None and previous.activity is Activity.BLIND:
        return previous
    seen = history.last_usable_at(now, readings_prove_idle=evidence.reading_proves_idle)
    since = now if seen is None else seen
    if previous is not None:
        since = max(since, previous.since)
    return ActivityMark(Activity.BLIND, since)


def _last_work(
    history: SampleHistory,
    episode: IdleEpisode | None,
    now: datetime,
    gap: timedelta,
    threshold: float,
) -> datetime | None:
    """The newest sign of work: the episode's last activity, or the newest busy sample of the
    last ``gap`` (the rule found none to start a clock from)."""
    if episode is not None:
        return episode.last_activity
    busy_at, _idle = history.last_busy(history.rows(now - gap, now), threshold)
    return instant(busy_at) if busy_at is not None else None


def _first_busy(
    history: SampleHistory, after: datetime | None, now: datetime, threshold: float
) -> datetime | None:
    """The first busy sample after ``after`` (every sample up to ``now`` when None)."""
    floor = micros(after) if after is not None else None
    for row in history.rows(after, now):
        _gpu, at, _covers, _source = history.coded_observation(row)
        if floor is not None and at <= floor:
            continue
        if history.verdict(row, threshold) == BUSY:
            return instant(at)
    return None


def activity_changes(
    view: FleetView,
    episodes: Mapping[str, IdleEpisode],
    recorded: Mapping[str, ActivityMark],
    *,
    now: datetime,
    settings: IdleClockSettings,
    previous_evaluation: datetime | None,
) -> list[tuple[str, ActivityMark]]:
    """The marks to record at ``now`` (instance key, mark), in order: the instances of ``view``
    (not gone) whose class changed since their ``recorded`` mark. ``episodes``: the running idle
    episodes the idle rule found, by instance key; ``previous_evaluation``: the evaluation
    before this one (a longer gap than ``settings.restart_after`` is blind from it)."""
    stale = previous_evaluation is not None and now - previous_evaluation > settings.restart_after
    written: list[tuple[str, ActivityMark]] = []
    for key, instance in view.instances.items():
        if instance.state is InstanceState.GONE:
            continue
        previous = recorded.get(key)
        if stale and previous is not None and previous.activity is not Activity.BLIND:
            assert previous_evaluation is not None
            previous = ActivityMark(Activity.BLIND, max(previous_evaluation, previous.since))
            written.append((key, previous))
        mark = instance_activity(
            instance,
            episodes.get(key),
            previous,
            now=now,
            settings=settings,
            evidence=view.evidence_of(instance.latest),
        )
        if mark is not previous:
            written.append((key, mark))
    return written


# -- reading the marks back ------------------------------------------------------------------


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
