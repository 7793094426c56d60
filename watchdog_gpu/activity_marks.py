"""Which activity marks an evaluation records: busy, idle or blind, as the idle rule's clock
judged it (pure).

Each evaluation classifies every instance (:func:`instance_activity`) and the tick records a
mark only when the class changes (:func:`activity_changes`); :mod:`watchdog_gpu.activity` reads
them back for the spend report. ``docs/safety.md``, "GPU time by activity":

- ``idle``: the idle clock runs (:func:`~watchdog_gpu.rules.idle_clock.current_idle`, the one
  "idle since"); the mark starts at the clock's start, which may be before this evaluation: the
  previous class ends there.
- ``busy``: a GPU worked (a busy sample, an interactive login) within ``max_sample_gap`` — also
  while the clock runs, so the pauses of bursty work stay busy; from the first busy sample after
  the previous mark.
- ``blind``: neither — no usable sample lately (unreachable, no probe, not running), only
  samples that cannot prove idle, start-up before the rule arms; from the newest usable sample.

A gap between two evaluations longer than the clock's ``restart_after`` (a daemon that was down)
is blind from the earlier one: the watchdog saw nothing meanwhile.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta

from watchdog_gpu.evidence import AccountEvidence
from watchdog_gpu.fleet import FleetView, InstanceView
from watchdog_gpu.model import Activity, ActivityMark, InstanceState
from watchdog_gpu.rules.idle_clock import IdleClockSettings, IdleEpisode
from watchdog_gpu.sample_history import BUSY, SampleHistory, instant, micros, sample_history


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
