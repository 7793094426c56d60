"""Wakes: one extra evaluation when an idle verdict or a listed-state limit falls due between ticks.

At a tick a host's newest streamed rows are still on the host, so a verdict whose instant falls
in those seconds would wait a whole tick. :class:`Wakes` (pure: times are passed in) keeps one
pending wake, none for rows already in, none at or after the next tick, and at least
:data:`MIN_SPACING` apart; a wake for a limit on listed state lists the accounts first
(:attr:`Wakes.listing`). A wake only evaluates: nothing is decided earlier than at a tick.
``docs/architecture.md``, "Wakes".
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
        rows_at = self._rows_change(next_change, probed_at)
        if rows_at is not None:
            candidates.append(rows_at)
        at = self._spaced(max(min(candidates), now), next_tick) if candidates else None
        self.pending = at
        self.listing = at is not None and next_listed is not None and next_listed <= at
        return at

    def _rows_change(
        self, next_change: datetime | None, probed_at: datetime | None
    ) -> datetime | None:
        """When the rows that may change a verdict at ``next_change`` are in; None when there
        is none, or it is at or before the last round − lag: its rows are in and did not change
        the verdict (the host went blind or late, and the ticks take over)."""
        if next_change is None:
            return None
        if probed_at is not None and next_change <= probed_at - self.lag:
            return None
        return next_change + self.lag

    def _spaced(self, at: datetime, next_tick: datetime | None) -> datetime | None:
        """``at``, no sooner than :attr:`spacing` after the last wake; None when the next tick
        comes first."""
        if self.last_ran is not None:
            at = max(at, self.last_ran + self.spacing)
        if next_tick is not None and at >= next_tick:
            return None
        return at

    def ran(self, at: datetime) -> None:
        """A wake ran at ``at`` (the next one comes :attr:`spacing` later at the earliest)."""
        self.last_ran = at
        if self.pending is not None and self.pending <= at:
            self.pending = None
            self.listing = False
