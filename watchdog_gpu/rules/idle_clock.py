"""The idle clock: how long every GPU of an instance was *observed* idle since its last activity.

Blind time is never idle time. The exact semantics (also in ``docs/safety.md``, "Blind time and
the idle clock"):

- **Observed idle time of one GPU** is the union of
  - ``[covers_from, at]`` of every idle *continuous* sample (the streaming probe condenses each
    run of per-second rows with one verdict into one sample), joined with the next continuous
    sample when the gap between them is at most :data:`CONTIGUOUS_GAP` (one dmon row was late
    or missed; a longer gap is blind);
  - for *point* samples (burst probe, provider API: ``covers_from`` is ``None``), the time
    between two consecutive idle point samples at most ``max_sample_gap`` apart (sampling
    inference, as before streaming), and a lone point sample's own instant.
- **Observed idle time of the instance** is the intersection over its GPUs (every expected GPU:
  a GPU without samples observes nothing).
- **Onset**: the first observed idle instant after the last activity (the last busy sample or
  interactive login): to the second with streamed rows, the first idle row after the last busy
  one. Without any activity since the run started, the first one after arming.
- **A long blind stretch restarts the clock**: when two observed stretches are separated by more
  than ``idle × (1 − min_coverage)`` of blind time (6 min with the defaults), the GPUs
  may have worked unseen; the onset moves to the first observed instant after that stretch.
  Shorter blind stretches only pause the clock.
- **The clock** at ``now`` is the observed idle time from the onset to ``now``. The rule's
  action is due when the clock reaches ``idle``; until then ``due_at`` is projected as
  ``now + (idle − clock)``, which stays put (within a sample interval) while observation
  continues and moves later by the blind time otherwise.

Pure: no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import pairwise

from watchdog_gpu.model import GpuSample
from watchdog_gpu.probe.condense import CONTIGUOUS_GAP
from watchdog_gpu.probe.window import intersect_spans, union_spans

Span = tuple[datetime, datetime]
__all__ = [
    "CONTIGUOUS_GAP",
    "IdleClock",
    "clock_of",
    "gpu_observed_spans",
    "idle_clock",
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
