"""One log line per host per state change, rate-limited, with a periodic summary.

A probe round runs every minute over every running instance. Logging each outcome made 1,000
unreachable hosts write 29,000 warnings in 10 minutes (and spend 15 % of the time waiting on
the logging lock). :class:`StateChangeLog` keeps each host's last state and logs only:

- a **change** of state (first failure, a different failure, recovery), at WARNING for a
  failure and INFO for a recovery; the same state again is logged at DEBUG only;
- at most ``max_lines_per_minute`` such lines (a token bucket): a wave of hosts changing at
  once is counted, not printed, and the count goes into the summary;
- every ``summary_every`` seconds, while any host is not ok or lines were held back, **one
  summary line**: hosts by state and how many changes were not logged.

Times are monotonic seconds passed in by the caller (the prober's clock); thread-safe (the
prober's pool reports from several threads).
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from dataclasses import dataclass

OK = "ok"
DEFAULT_MAX_LINES_PER_MINUTE = 60
DEFAULT_SUMMARY_EVERY_SECONDS = 600.0


@dataclass(slots=True)
class _HostState:
    state: str
    since: float


class StateChangeLog:
    """Per-host state-change logging on ``logger`` (see the module docstring)."""

    def __init__(
        self,
        logger: logging.Logger,
        *,
        what: str = "probe",
        max_lines_per_minute: int = DEFAULT_MAX_LINES_PER_MINUTE,
        summary_every: float = DEFAULT_SUMMARY_EVERY_SECONDS,
    ) -> None:
        self._logger = logger
        self._what = what
        self._capacity = float(max(1, max_lines_per_minute))
        self._refill_per_second = self._capacity / 60.0
        self._summary_every = summary_every
        self._lock = threading.Lock()
        self._hosts: dict[str, _HostState] = {}
        self._tokens = self._capacity
        self._refilled_at: float | None = None
        self._summary_at: float | None = None
        self._held_back = 0
        self._changes = 0

    def note(self, host: str, state: str, at: float, message: str, *args: object) -> bool:
        """Record ``host``'s ``state`` (``"ok"`` or a failure kind) at monotonic ``at``; log
        ``message % args`` when the state changed and the rate allows (DEBUG otherwise).
        Returns True when the line was logged above DEBUG."""
        with self._lock:
            previous = self._hosts.get(host)
            changed = self._record(host, previous, state, at)
            logged = changed and self._take_token(at)
            if changed:
                self._changes += 1
                if not logged:
                    self._held_back += 1
            summary = self._summary_if_due(at)
        if logged:
            self._log_change(state, previous, message, args)
        else:
            self._logger.debug(message, *args)
        if summary is not None:
            level, text, summary_args = summary
            self._logger.log(level, text, *summary_args)
        return logged

    def _record(self, host: str, previous: _HostState | None, state: str, at: float) -> bool:
        """Keep ``host``'s ``state`` since ``at`` if it changed; True when it did (a host's first
        state is a change unless it is ok)."""
        if previous is None:
            self._hosts[host] = _HostState(state, at)
            return state != OK
        if previous.state == state:
            return False
        self._hosts[host] = _HostState(state, at)
        return True

    def _log_change(
        self, state: str, previous: _HostState | None, message: str, args: tuple[object, ...]
    ) -> None:
        """A failure at WARNING, a recovery at INFO with the state it recovered from."""
        if state != OK:
            self._logger.log(logging.WARNING, message, *args)
            return
        recovered = f"{message} (recovered from {previous.state if previous else '?'})"
        self._logger.log(logging.INFO, recovered, *args)

    def forget(self, host: str) -> None:
        """The host is gone: it no longer counts in the summary."""
        with self._lock:
            self._hosts.pop(host, None)

    def states(self) -> dict[str, int]:
        """Hosts by their last state."""
        with self._lock:
            return dict(Counter(host.state for host in self._hosts.values()))

    def _take_token(self, at: float) -> bool:
        if self._refilled_at is not None:
            elapsed = max(0.0, at - self._refilled_at)
            self._tokens = min(self._capacity, self._tokens + elapsed * self._refill_per_second)
        self._refilled_at = at
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False

    def _summary_if_due(self, at: float) -> tuple[int, str, tuple[object, ...]] | None:
        """The summary line's (level, message, args) when one is due, resetting the counts."""
        if self._summary_at is None:
            self._summary_at = at
            return None
        if at - self._summary_at < self._summary_every:
            return None
        self._summary_at = at
        by_state = Counter(host.state for host in self._hosts.values())
        failing = sum(count for state, count in by_state.items() if state != OK)
        held_back, changes = self._held_back, self._changes
        self._held_back = self._changes = 0
        if not failing and not held_back:
            return None
        # "backoff:unreachable" becomes a field name a logfmt parser accepts: backoff_unreachable
        states = " ".join(
            f"{state.replace(':', '_')}={count}" for state, count in sorted(by_state.items())
        )
        level = logging.WARNING if failing else logging.INFO
        text = (
            "%s summary hosts=%d %s state_changes=%d not_logged=%d max_change_lines_per_minute=%d"
        )
        return (
            level,
            text,
            (self._what, len(self._hosts), states, changes, held_back, int(self._capacity)),
        )
