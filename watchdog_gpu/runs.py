"""Runs: the one definition of an instance's current run, which every rule and reader uses.

A run is the provider's run of one container, identified by the provider's own start time where
it gives one; blips inside it are blind time, a real stop/start or reboot is a new run, and
without a start time a ``starting`` listing after a running one counts as a reboot. Exact
semantics: ``docs/safety.md``, "Runs". Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from watchdog_gpu.fleet import InstanceView
from watchdog_gpu.model import InstanceState, StateSpan

# States in which a run goes on: the container is up or coming up, and bills compute.
RUN_STATES = frozenset({InstanceState.RUNNING, InstanceState.STARTING})
# Listings that say nothing about the container: blind time inside a run when one surrounds them.
BLIND_STATES = frozenset({InstanceState.UNKNOWN, InstanceState.GONE})
# How much earlier than a listing the provider's start time may read and still mean the container
# was up at that listing: the listing's own latency and the provider's rounding.
START_TOLERANCE = timedelta(seconds=30)


@dataclass(frozen=True, slots=True)
class Run:
    """The current run of an instance: its spans (oldest first, blind ones included) and when it
    started (``started``: starting included) and started running (``None``: not yet). While the
    latest listing is ``unknown`` the run goes on, blind (``blind``)."""

    started: datetime
    running_since: datetime | None
    spans: tuple[StateSpan, ...]
    blind: bool = False  # the latest listing said nothing (state unknown): the run goes on unseen

    def billed_seconds(self, now: datetime) -> float:
        """Seconds of the run up to ``now`` that bill compute: all of it but the start-up a
        provider does not bill (a compute rate of exactly $0, e.g. Vast ``loading``). A blind
        listing bills (the provider keeps charging while its heartbeat is late)."""
        return (now - self.started).total_seconds() - self.unbilled_seconds(now)

    def unbilled_seconds(self, now: datetime) -> float:
        """Seconds of the run up to ``now`` in listings that bill no compute."""
        total = 0.0
        for index, span in enumerate(self.spans):
            if span.compute_usd_per_hour != 0.0 or span.state not in RUN_STATES:
                continue
            end = self.spans[index + 1].first_seen if index + 1 < len(self.spans) else now
            low = max(span.first_seen, self.started)
            total += max(0.0, (min(end, now) - low).total_seconds())
        return total


def current_run(instance: InstanceView) -> Run | None:
    """The run the instance is in (see the module docstring); ``None`` when it is not starting
    or running, nor listed ``unknown`` right after a listing that was."""
    end = _run_end(instance)
    if end is None:
        return None
    provider_start = instance.latest.started_at
    own = instance.spans[_run_start(instance.spans, end, provider_start) :]
    started, running = _start_times(own, provider_start)
    blind = instance.state is InstanceState.UNKNOWN
    return Run(started=started, running_since=running, spans=own, blind=blind)


def _run_end(instance: InstanceView) -> int | None:
    """Where the run's listed spans end (past the trailing ``unknown`` ones: a listing that says
    nothing, the run goes on unseen); None when the instance is in no run."""
    spans = instance.spans
    end = len(spans)
    if instance.state is InstanceState.UNKNOWN:
        while end and spans[end - 1].state is InstanceState.UNKNOWN:
            end -= 1
    elif instance.state not in RUN_STATES:
        return None
    if not end or spans[end - 1].state not in RUN_STATES:
        return None
    return end


def _run_start(spans: Sequence[StateSpan], end: int, provider_start: datetime | None) -> int:
    """The index of the run's earliest starting or running span (the run ends at ``end``)."""
    first = end - 1
    for index in range(end - 2, -1, -1):
        span = spans[index]
        if span.state in BLIND_STATES:
            continue  # part of the run only if an earlier span of the run surrounds it
        if span.state not in RUN_STATES:
            break  # stopped or paused: the run began after it
        if span.state is InstanceState.RUNNING and _earlier_run(span, spans[first], provider_start):
            break
        first = index
    return first


def _start_times(
    own: Sequence[StateSpan], provider_start: datetime | None
) -> tuple[datetime, datetime | None]:
    """When the run started, and when it started running (None: not yet)."""
    started = own[0].first_seen
    running = None
    for span in own:
        if span.state is InstanceState.RUNNING:
            running = span.first_seen
            break
    if running is None or provider_start is None or provider_start <= running + START_TOLERANCE:
        return started, running
    # The provider's start is later than our first running listing: a reboot none showed.
    return (provider_start if own[0].state is InstanceState.RUNNING else started), provider_start


def _earlier_run(span: StateSpan, following: StateSpan, provider_start: datetime | None) -> bool:
    """Whether a running ``span`` belongs to an earlier run than ``following`` (the earliest span
    of the current run found so far)."""
    if provider_start is not None:
        return span.last_seen < provider_start - START_TOLERANCE
    return following.state is InstanceState.STARTING


def running_since(instance: InstanceView) -> datetime | None:
    """When the current run started running (:func:`current_run`); ``None`` when the instance
    is not listed running."""
    if instance.state is not InstanceState.RUNNING:
        return None
    run = current_run(instance)
    return run.running_since if run is not None else None
