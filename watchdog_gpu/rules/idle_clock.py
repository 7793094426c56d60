"""The idle clock: how long every GPU of an instance was *observed* idle since its last activity.

Blind time is never idle time. Observed idle time is continuous samples' spans (joined across
gaps up to :data:`CONTIGUOUS_GAP`) and the time between idle point samples at most
``max_sample_gap`` apart, intersected over every expected GPU; a blind stretch pauses the clock,
a long one restarts it. :func:`current_idle` is the one "idle since" that the rule, ``status``
and the gauge share. Exact semantics: ``docs/safety.md``, "Blind time and the idle clock".
Pure: no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import pairwise

from watchdog_gpu.fleet import InstanceView
from watchdog_gpu.model import GpuSample, SampleSource
from watchdog_gpu.probe.condense import CONTIGUOUS_GAP
from watchdog_gpu.rules.windows import expected_gpus
from watchdog_gpu.runs import current_run
from watchdog_gpu.sample_history import (
    NO_TIME,
    SOURCE_CODES,
    SOURCES,
    SampleHistory,
    instant,
    micros,
    sample_history,
)

Span = tuple[datetime, datetime]
__all__ = [
    "CONTIGUOUS_GAP",
    "IdleClock",
    "IdleClockSettings",
    "IdleEpisode",
    "clock_of",
    "current_idle",
    "current_idles",
    "gpu_observed_spans",
    "idle_clock",
    "idle_episode",
    "idle_episodes",
    "observed_spans",
]


@dataclass(frozen=True, slots=True)
class IdleClock:
    """The observed idle stretches of an instance from its onset (sorted, disjoint, every GPU
    idle), and what follows from them."""

    onset: datetime
    spans: tuple[Span, ...]
    restarted: bool  # a long blind stretch moved the onset

    @property
    def last_observed(self) -> datetime:
        """The end of the newest observed idle stretch."""
        return self.spans[-1][1]

    def observed(self, until: datetime) -> timedelta:
        """Observed idle time from the onset up to ``until``."""
        total = timedelta(0)
        for low, high in self.spans:
            if low >= until:
                break
            total += min(high, until) - low
        return total

    def blind(self, until: datetime) -> timedelta:
        """Time from the onset to ``until`` that was not observed idle."""
        return max(timedelta(0), until - self.onset - self.observed(until))

    def reached(self, amount: timedelta) -> datetime | None:
        """The instant the clock reached ``amount`` of observed idle time; ``None`` if not yet."""
        remaining = amount
        for low, high in self.spans:
            if high - low >= remaining:
                return low + remaining
            remaining -= high - low
        return None

    def due(self, amount: timedelta, now: datetime) -> datetime:
        """When the clock reaches ``amount``: the instant it did, or, when it has not yet, ``now``
        plus what is missing (as if observed from ``now`` on: never in the past, since the time
        since the newest observation may turn out blind)."""
        reached = self.reached(amount)
        if reached is not None and reached <= now:
            return reached
        return now + (amount - self.observed(now))


def gpu_observed_spans(
    samples: Iterable[GpuSample], start: datetime, end: datetime, max_sample_gap: timedelta
) -> list[Span]:
    """The observed stretches of one GPU within ``[start, end]`` from its *idle* samples (the
    caller filters them; see the module docstring), sorted and merged."""
    points: list[datetime] = []
    runs: list[Span] = []
    for sample in samples:
        if sample.covers_from is None:
            points.append(sample.at)
        else:
            runs.append((sample.covers_from, sample.at))
    return observed_spans(points, runs, start, end, max_sample_gap)


def observed_spans(
    points: list[datetime],
    runs: list[Span],
    start: datetime,
    end: datetime,
    max_sample_gap: timedelta,
) -> list[Span]:
    """:func:`gpu_observed_spans` of a GPU's idle point samples' instants and idle continuous
    samples' ``(covers_from, at)`` (both lists are sorted in place)."""
    spans: list[Span] = []
    points.sort()
    runs.sort()
    spans.extend((at, at) for at in points)
    for earlier, later in pairwise(points):
        if later - earlier <= max_sample_gap:
            spans.append((earlier, later))
    spans.extend(runs)
    for (_low, high), (following, _end) in pairwise(runs):
        if following - high <= CONTIGUOUS_GAP:
            spans.append((high, following))
    clipped = [(max(low, start), min(high, end)) for low, high in spans]
    return union_spans(span for span in clipped if span[0] <= span[1])


def idle_clock(
    idle_samples: Mapping[int, Sequence[GpuSample]],
    *,
    start: datetime,
    now: datetime,
    max_sample_gap: timedelta,
    restart_after: timedelta,
) -> IdleClock | None:
    """The idle clock of one instance from its idle samples per expected GPU (only those at or
    after ``start``, the last activity or arming). ``None`` when no instant was observed idle
    on every GPU."""
    return clock_of(
        (
            gpu_observed_spans(samples, start, now, max_sample_gap)
            for samples in idle_samples.values()
        ),
        restart_after=restart_after,
    )


def clock_of(gpu_spans: Iterable[list[Span]], *, restart_after: timedelta) -> IdleClock | None:
    """The idle clock from each expected GPU's observed stretches (:func:`observed_spans`);
    ``None`` when no instant was observed idle on every GPU (or there is no GPU)."""
    common: list[Span] | None = None
    for own in gpu_spans:
        common = own if common is None else intersect_spans(common, own, points=True)
        if not common:
            return None
    if common is None:
        return None
    restarted = False
    for index in range(len(common) - 1, 0, -1):
        if common[index][0] - common[index - 1][1] > restart_after:
            common = common[index:]
            restarted = True
            break
    return IdleClock(onset=common[0][0], spans=tuple(common), restarted=restarted)


@dataclass(frozen=True, slots=True)
class IdleClockSettings:
    """What the idle clock is judged with: the ``idle_gpu`` rule's settings, as plain values
    (``status`` builds them without the rule's configuration model)."""

    idle: timedelta = timedelta(minutes=30)
    arm_after: timedelta = timedelta(minutes=20)
    threshold_percent: float = 5.0
    min_coverage: float = 0.8
    max_sample_gap: timedelta = timedelta(minutes=3)

    @property
    def restart_after(self) -> timedelta:
        """A blind stretch longer than this restarts the clock."""
        return self.idle * (1 - self.min_coverage)


@dataclass(frozen=True, slots=True)
class IdleEpisode:
    """The facts an idle episode is judged on; ``start`` is what "idle since" means."""

    start: datetime  # the onset (or the arming/activity date when the view starts later)
    armed_by: str  # "activity" or "arm_after"
    last_activity: datetime | None
    clock: IdleClock
    gpus: int
    sources: frozenset[SampleSource]


def current_idle(
    instance: InstanceView,
    now: datetime,
    settings: IdleClockSettings,
    proves_idle: Callable[[SampleSource], bool] | None = None,
) -> IdleEpisode | None:
    """The instance's running idle episode — the one definition of "idle since" (its
    ``start``) — or ``None`` when it is not known idle now: not in a run that started running
    (:func:`~watchdog_gpu.runs.current_run`: a blind ``unknown`` listing inside the run keeps
    the clock, which counts no blind time), not armed, no instant
    observed idle on every GPU, or the newest observed idle instant older than
    ``max_sample_gap`` (blind now: a job could have started). ``proves_idle``: the sources
    whose idle samples count as observed idle time (all by default; the idle rule passes the
    account's evidence, ``watchdog_gpu/evidence.py``)."""
    return current_idles(instance, now, settings, proves_idle, every_source=False)[0]


def current_idles(
    instance: InstanceView,
    now: datetime,
    settings: IdleClockSettings,
    proves_idle: Callable[[SampleSource], bool] | None,
    *,
    every_source: bool,
) -> tuple[IdleEpisode | None, IdleEpisode | None]:
    """:func:`current_idle` with ``proves_idle`` and, when ``every_source``, with every source
    (what the instance *looks* like; ``None`` otherwise), from one pass over the samples."""
    run = current_run(instance)
    since = run.running_since if run is not None else None
    if since is None:
        return None, None
    proven, looks = idle_episodes(
        instance, since, now, settings, proves_idle, every_source=every_source
    )

    def fresh(episode: IdleEpisode | None) -> IdleEpisode | None:
        if episode is None or now - episode.clock.last_observed > settings.max_sample_gap:
            return None
        return episode

    return fresh(proven), fresh(looks)


def idle_episode(
    instance: InstanceView,
    since: datetime,
    now: datetime,
    settings: IdleClockSettings,
    proves_idle: Callable[[SampleSource], bool] | None = None,
) -> IdleEpisode | None:
    """The idle episode of an instance running since ``since`` (its run), up to ``now``, fresh
    or not; ``None`` before arming or when no instant was observed idle on every GPU."""
    return idle_episodes(instance, since, now, settings, proves_idle, every_source=False)[0]


def idle_episodes(
    instance: InstanceView,
    since: datetime,
    now: datetime,
    settings: IdleClockSettings,
    proves_idle: Callable[[SampleSource], bool] | None,
    *,
    every_source: bool,
) -> tuple[IdleEpisode | None, IdleEpisode | None]:
    """:func:`idle_episode` on the samples ``proves_idle`` accepts and, when ``every_source``,
    on every sample (``None`` otherwise): one pass, and one clock when no sample was refused."""
    # From the newest sample back to the last busy one (sample_history): at thousands of
    # instances with an hour of samples each, a pass over every sample was the rule's whole cost.
    history = sample_history(instance.samples)
    rows = history.rows(since, now)
    busy_at, idle_rows = history.last_busy(rows, settings.threshold_percent)
    last_activity = _last_activity(instance, busy_at, since, now)
    armed = _armed(last_activity, since, now, settings)
    if armed is None:
        return None, None  # not armed: start-up, data loading, a slow first epoch
    start, armed_by = armed
    gpus = expected_gpus(instance.latest.gpu_count, (history.highest_gpu(rows),) if rows else ())
    if not gpus:
        return None, None
    # Only samples from the episode start on: an idle sample before the last activity must not
    # pair with one after it and paper over the busy moment in between.
    first = micros(start)
    refused = _refused_codes(proves_idle)
    proven = _Observed(gpus)
    every = _Observed(gpus) if every_source and refused else None
    _gather(history, idle_rows, first, refused, proven=proven, every=every)
    # When the view's samples start after the activity/arming date, the true onset is not in
    # view: keep the stable date (the onset seen would move with the view every tick).
    dated = _Dating(start, now, armed_by, last_activity, history.starts_after(first), settings)
    mine = dated.episode(proven, gpus)
    if every is None:
        return mine, (mine if every_source else None)
    # Nothing refused: every source saw what the accepted ones saw.
    return mine, (mine if every.size() == proven.size() else dated.episode(every, gpus))


def _armed(
    last_activity: datetime | None, since: datetime, now: datetime, settings: IdleClockSettings
) -> tuple[datetime, str] | None:
    """Where the idle clock starts and what armed it (the last activity, else ``arm_after``
    into the run); None while not armed yet."""
    if last_activity is not None:
        return last_activity, "activity"
    start = since + settings.arm_after
    return (start, "arm_after") if now >= start else None


def _refused_codes(proves_idle: Callable[[SampleSource], bool] | None) -> frozenset[int]:
    """The sources (as integer codes) whose readings cannot prove idle: they observe nothing
    (a busy one still proves busy)."""
    if proves_idle is None:
        return frozenset()
    return frozenset(SOURCE_CODES[s] for s in SampleSource if not proves_idle(s))


def _gather(
    history: SampleHistory,
    idle_rows: Iterable[int],
    first: int,
    refused: frozenset[int],
    *,
    proven: _Observed,
    every: _Observed | None,
) -> None:
    """Gather the idle observations from ``first`` on: those ``refused`` does not name into
    ``proven``, all of them into ``every`` (when given)."""
    # Sources as their integer codes, and ``proven.add`` inlined: this loop runs once per idle
    # sample of every instance each tick.
    points, runs, codes = proven.points, proven.runs, proven.codes
    for row in idle_rows:
        gpu, at, covers_from, code = history.coded_observation(row)
        if at < first or gpu not in points:
            continue
        if every is not None:
            every.add(gpu, at, covers_from, code)
        if code in refused:
            continue
        codes.add(code)
        if covers_from == NO_TIME:
            points[gpu].append(instant(at))
        else:
            runs[gpu].append((instant(covers_from), instant(at)))


@dataclass(slots=True)  # not frozen: built once per instance each tick, a frozen one costs more
class _Dating:
    """What dates an episode from its observations: the clock's start and what armed it."""

    start: datetime
    now: datetime
    armed_by: str
    last_activity: datetime | None
    view_cut: bool  # the view's samples start after ``start``: the true onset is not in view
    settings: IdleClockSettings

    def episode(self, observed: _Observed, gpus: Sequence[int]) -> IdleEpisode | None:
        gap = self.settings.max_sample_gap
        clock = clock_of(
            (
                observed_spans(observed.points[gpu], observed.runs[gpu], self.start, self.now, gap)
                for gpu in gpus
            ),
            restart_after=self.settings.restart_after,
        )
        if clock is None:
            return None
        onset = self.start if self.view_cut and not clock.restarted else clock.onset
        sources = frozenset(SOURCES[code] for code in observed.codes)
        return IdleEpisode(onset, self.armed_by, self.last_activity, clock, len(gpus), sources)


def _last_activity(
    instance: InstanceView, busy_at: int | None, since: datetime, now: datetime
) -> datetime | None:
    """The newest busy sample (``busy_at``, :func:`micros`) or interactive login in the run."""
    last_activity = instant(busy_at) if busy_at is not None else None
    for probe in instance.probes:
        if probe.interactive_login and since <= probe.at <= now:
            last_activity = probe.at if last_activity is None else max(last_activity, probe.at)
    return last_activity


class _Observed:
    """One episode's idle observations per GPU, gathered in the pass over the samples."""

    __slots__ = ("codes", "points", "runs")

    def __init__(self, gpus: Iterable[int]) -> None:
        self.points: dict[int, list[datetime]] = {gpu: [] for gpu in gpus}
        self.runs: dict[int, list[Span]] = {gpu: [] for gpu in self.points}
        self.codes: set[int] = set()  # the samples' sources (sample_history.SOURCE_CODES)

    def add(self, gpu: int, at: int, covers_from: int, code: int) -> None:
        self.codes.add(code)
        if covers_from == NO_TIME:
            self.points[gpu].append(instant(at))
        else:
            self.runs[gpu].append((instant(covers_from), instant(at)))

    def size(self) -> int:
        """How many samples were gathered."""
        return sum(map(len, self.points.values())) + sum(map(len, self.runs.values()))


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
