"""Wakes: one extra evaluation when an idle verdict falls due between two ticks.

Why (``docs/architecture.md``, "Wakes"): the streaming probe's rows reach us in batches
(``docs/probe.md``, "Rows in batches"), so at a tick a host's newest rows are up to
``batch_seconds + 1`` s old, and the idle clock counts only observed time — blind time is never
idle. A warning or destroy whose instant falls in those seconds would be decided a whole tick
later. So each evaluation also says the earliest instant an idle verdict may change by time
alone (:attr:`~watchdog_gpu.reports.TickReport.next_change`: when an idle clock reaches its
warning or action point), and when that comes before the next tick, the daemon — and
``simulate`` — takes the streamed rows and evaluates again at that instant + :data:`ROWS_LAG`,
when the rows covering it are in; likewise at a warned action's due time
(:attr:`~watchdog_gpu.reports.TickReport.next_due`, later than the clock's when the warning went
out late: nothing to wait for there). Never earlier than the limit: the wake only evaluates,
and the rules and the planner decide on observed rows as at any tick. A decision on *listed*
state (:attr:`~watchdog_gpu.reports.TickReport.next_listed`: a TTL's warning point or due time) is
woken at itself and lists the accounts first (:attr:`Wakes.listing`): a wake acts on listed
state only from a listing at or after the instant (``docs/safety.md``, "Warnings").

:class:`Wakes` decides when (pure: times are passed in):

- **One pending wake**, the earliest: every evaluation (tick or wake) replaces it with what its
  own ``next_change`` asks for, so a tick that already decided the instant makes the pending wake
  moot, and wakes never pile up.
- **Not for rows already in**: an instant at or before the last probe round − :data:`ROWS_LAG`
  whose verdict did not change means the host went blind or late; the ticks take over (no wake
  after wake on a silent host).
- **Not at or after the next tick**: the tick evaluates then anyway.
- **At least** :data:`MIN_SPACING` **apart**: a wake evaluates the whole fleet; with 1,000
  instances whose limits are staggered a second apart, wakes coalesce into one every 5 s (each
  decides every limit due before it) — at most 12 extra evaluations a minute, a decision at most
  5 s later. Closer wakes would rarely see anything new: a host sends its rows 5 s at a time.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from watchdog_gpu.probe.stream_command import StreamCommandSpec

# When the rows covering an instant are in: a host sends them ``batch_seconds`` at a time, the
# last one a second later at most, plus a second for the network and the reader.
ROWS_LAG = timedelta(seconds=StreamCommandSpec().batch_seconds + 2)
MIN_SPACING = timedelta(seconds=StreamCommandSpec().batch_seconds)


@dataclass
class Wakes:
    """The pending wake of one engine (see the module docstring). Not thread-safe: the daemon
    calls it from its evaluations, which run one at a time."""

    lag: timedelta = ROWS_LAG
    spacing: timedelta = MIN_SPACING
    pending: datetime | None = None
    last_ran: datetime | None = None
    # The pending wake decides on listed state (``next_listed``): it lists the accounts first.
    listing: bool = False

    def after_evaluation(
        self,
        *,
        now: datetime,
        next_change: datetime | None,
        probed_at: datetime | None,
        next_tick: datetime | None,
        next_due: datetime | None = None,
        next_listed: datetime | None = None,
    ) -> datetime | None:
        """The wake to schedule after an evaluation at ``now`` (replacing the pending one), or
        ``None`` (none pending). ``next_change``: the earliest instant a verdict may change as
        rows come in (woken :attr:`lag` after it); ``next_due``: the earliest instant a decision
        falls due by the clock alone (a warned action's due time: woken at it); ``probed_at``:
        when the rows the evaluation read were taken (the last probe round); ``next_tick``: the
        next scheduled evaluation (None: unknown); ``next_listed``: the earliest instant a
        decision on listed state falls due (woken at it; :attr:`listing` then says the wake
        lists the accounts first)."""
        candidates = [at for at in (next_due, next_listed) if at is not None]
        if next_change is not None and (probed_at is None or next_change > probed_at - self.lag):
            # (At or before the last round − lag its rows are in and did not change the verdict:
            # the host went blind or late, and the ticks take over.)
            candidates.append(next_change + self.lag)
        at = max(min(candidates), now) if candidates else None
        if at is not None and self.last_ran is not None:
            at = max(at, self.last_ran + self.spacing)
        if at is not None and next_tick is not None and at >= next_tick:
            at = None
        self.pending = at
        self.listing = at is not None and next_listed is not None and next_listed <= at
        return at

    def ran(self, at: datetime) -> None:
        """A wake ran at ``at`` (the next one comes :attr:`spacing` later at the earliest)."""
        self.last_ran = at
        if self.pending is not None and self.pending <= at:
            self.pending = None
            self.listing = False
