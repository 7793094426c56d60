"""How ``watchdog-gpu demo`` tells the night: one line per event, with its virtual time.

Four sources, merged in time order by a :class:`Narrator` thread while the night plays:

- ``script``   what the scenario does to the fleet (a job ends, an instance is outbid, …);
- ``watchdog`` what the daemon decided and did, read back from its audit log (planned, called,
  verified, protected, …), with the reason on a second line;
- ``phone``    the messages the demo's phone received through Apprise;
- ``log``      the engine's own warnings and errors (:class:`StoryLog`).

Every virtual hour a ``·`` line says what the fleet bills per hour and what it has cost so far,
with and without the watchdog. Plain text; the caller chooses the stream.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TextIO

from watchdog_gpu.clock import Clock
from watchdog_gpu.log import RedactionFilter
from watchdog_gpu.sim.phone import Phone
from watchdog_gpu.sim.scenario import InstanceEvent, Scenario, ScenarioInstance
from watchdog_gpu.sim.world import SimulatedWorld
from watchdog_gpu.store import AuditEvent, Store

log = logging.getLogger(__name__)

PAUSE_SECONDS = 0.1
INDENT = " " * 17  # under the text after "HH:MM  watchdog  "
# A job stamps its events with the time it started; one that ran long may write after another
# wrote a later time. The narrator reads back this margin and tells new events by their ids.
AUDIT_MARGIN = timedelta(hours=1)
# Audit kinds told as they happen, with the word used. Warnings, alerts and resolutions are
# told as the phone receives them instead (the same decision, told once).
AUDIT_WORDS = {
    "protection_added": "protection added",
    "action_planned": "planned",
    "provider_called": "called",
    "provider_call_interrupted": "call interrupted",
    "action_verified": "verified",
    "action_unverified": "unverified",
    "provider_call_failed": "failed",
    "provider_error": "provider error",
    "action_blocked": "held by the fuse",
    "action_cancelled": "cancelled",
    "salvage_failed_hold": "held",
    "fuse_tripped": "FUSE TRIPPED",
    "protected": "protected",
}
# The reason is worth a second line for these: the rest repeat the line before them.
WITH_REASON = frozenset({"action_planned", "protected", "fuse_tripped", "provider_call_failed"})
# The daemon's notes about job runs skipped or missed: expected when two virtual minutes pass
# in a sixth of a second, so they are counted, not told.
SCHEDULER_NOTES = ("job run skipped", "job run missed")


@dataclass(frozen=True, slots=True)
class Line:
    """One line of the story: its virtual time, its rank among lines of the same time (script
    before watchdog before phone), the text (may hold further indented lines)."""

    at: datetime
    rank: int
    text: str


def clock_text(at: datetime) -> str:
    return f"{at:%H:%M}"


def describe_event(instance: ScenarioInstance, event: InstanceEvent) -> str:
    """What a scripted event does, in words (``running, GPU 96%``, ``paused by the provider``)."""
    state = _state_words(instance, event)
    parts = ([state] if state else []) + _gpu_words(event)
    return ", ".join(parts) or "changes"


def _state_words(instance: ScenarioInstance, event: InstanceEvent) -> str | None:
    if event.state == "starting":
        return f"launched: {instance.gpu_count}× {instance.gpu_name}, starting"
    if event.state == "paused" and instance.interruptible:
        return "paused by the provider (outbid); its disk keeps billing"
    if event.state == "stopped":
        return f"stopped; its {instance.disk_gb:g} GB disk keeps billing"
    return event.state


def _gpu_words(event: InstanceEvent) -> list[str]:
    parts: list[str] = []
    if isinstance(event.gpu_util, int):
        parts.append(f"GPU {event.gpu_util}%")
    elif event.gpu_util is not None:
        parts.append("GPUs " + ", ".join(f"{value}%" for value in event.gpu_util))
    if event.gpu_pattern is not None:
        parts.append(f"bursty GPU ({event.gpu_pattern.util}%)")
    return parts


class StoryLog(logging.Handler):
    """Engine log records (WARNING and above) as story lines stamped with the clock's time.

    Secrets are masked (:class:`~watchdog_gpu.log.RedactionFilter`). The daemon's notes about
    skipped or missed job runs are counted in :attr:`scheduler_notes` instead.
    """

    def __init__(self, clock: Clock) -> None:
        super().__init__(logging.WARNING)
        self.addFilter(RedactionFilter())
        self.clock = clock
        self.scheduler_notes = 0
        self._lines: list[Line] = []
        self._lines_lock = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            if record.name == "watchdog_gpu.daemon" and str(record.msg).startswith(SCHEDULER_NOTES):
                with self._lines_lock:
                    self.scheduler_notes += 1
                return
            text = f"log       {record.levelname.lower():<9} {record.name}: {record.getMessage()}"
            if record.exc_info:
                trace = logging.Formatter().formatException(record.exc_info)
                text += "".join(f"\n{INDENT}{line}" for line in trace.splitlines())
            with self._lines_lock:
                self._lines.append(Line(self.clock.now(), 4, text))
        except Exception:
            self.handleError(record)

    def take(self) -> list[Line]:
        """The lines logged since the last call."""
        with self._lines_lock:
            lines, self._lines = self._lines, []
            return lines


class Narrator:
    """Tells the night from a thread until ``stop`` is set or the night is over; then calls
    ``on_end`` once (with nothing left to tell) and returns."""

    def __init__(
        self,
        scenario: Scenario,
        world: SimulatedWorld,
        clock: Clock,
        phone: Phone,
        story_log: StoryLog,
        *,
        out: TextIO,
    ) -> None:
        self.scenario = scenario
        self.world = world
        self.clock = clock
        self.phone = phone
        self.story_log = story_log
        self.out = out
        self.names = {
            (account.name, instance.id): instance.name or instance.id
            for account in scenario.accounts
            for instance in account.instances
        }
        self.completed = False
        self._script = sorted(self._script_lines(), key=lambda line: (line.at, line.rank))
        self._next_hour = scenario.start
        self._last_audit_id = 0
        self._last_audit_at: datetime | None = None
        self._phone_seen = 0
        self._thread: threading.Thread | None = None

    def start(self, store: Store, stop: threading.Event, on_end: Callable[[bool], None]) -> None:
        """Tell from a thread, reading ``store``; ``on_end(completed)`` when done."""
        self._thread = threading.Thread(
            target=self._run, args=(store, stop, on_end), name="demo-narrator", daemon=True
        )
        self._thread.start()

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join()

    def _run(self, store: Store, stop: threading.Event, on_end: Callable[[bool], None]) -> None:
        try:
            while True:
                stopping = stop.is_set()
                now = self.clock.now()
                self.tell(store, now)
                if now >= self.scenario.end:
                    self.completed = True
                if self.completed or stopping:
                    break
                stop.wait(PAUSE_SECONDS)
        except Exception:  # the demo must not run on without its narrator
            log.exception("the narrator failed")
        on_end(self.completed)

    def tell(self, store: Store | None, now: datetime) -> None:
        """Print everything that happened up to ``now`` and was not told yet."""
        lines = self._due_script(now) + self._hour_marks(now) + self._phone_lines()
        if store is not None:
            lines += self._audit_lines(store)
        lines += self.story_log.take()
        for line in sorted(lines, key=lambda item: (item.at, item.rank)):
            self.out.write(f"{clock_text(line.at)}  {line.text}\n")
        if lines:
            self.out.flush()

    def ref(self, account: str | None, instance_id: str | None) -> str:
        """``vast-main/9001 "forgotten-4090"`` (long ids shortened)."""
        if account is None:
            return ""
        if instance_id is None:
            return account
        name = self.names.get((account, instance_id))
        short = short_id(instance_id)
        return f'{account}/{short} "{name}"' if name else f"{account}/{short}"

    def _script_lines(self) -> list[Line]:
        return [
            Line(
                self.scenario.start + event.at,
                0,
                f"script    {self.ref(account.name, instance.id)}: "
                + describe_event(instance, event),
            )
            for account in self.scenario.accounts
            for instance in account.instances
            for event in instance.events
        ]

    def _due_script(self, now: datetime) -> list[Line]:
        due = [line for line in self._script if line.at <= now]
        self._script = self._script[len(due) :]
        return due

    def _hour_marks(self, now: datetime) -> list[Line]:
        marks = []
        while self._next_hour <= now and self._next_hour < self.scenario.end:
            rate = sum(
                self.world.account_view(account.name).spend_usd_per_hour
                for account in self.scenario.accounts
            )
            spent = without = 0.0
            for account in self.scenario.accounts:
                for instance in account.instances:
                    spent += self.world.spend_usd(account.name, instance.id)
                    without += self.world.spend_without_watchdog_usd(account.name, instance.id)
            text = (
                f"·         the fleet bills ${rate:.2f}/h; spent so far ${spent:.2f} "
                f"(without the watchdog ${without:.2f})"
            )
            marks.append(Line(self._next_hour, 1, text))
            self._next_hour += timedelta(hours=1)
        return marks

    def _audit_lines(self, store: Store) -> list[Line]:
        told = [event for event in self._fresh_audit_events(store) if event.kind in AUDIT_WORDS]
        planned = any(event.kind == "action_planned" for event in told)
        kinds = _action_kinds(store) if planned else {}
        return [self._audit_line(event, kinds) for event in told]

    def _fresh_audit_events(self, store: Store) -> list[AuditEvent]:
        """The audit events not told yet (read with a margin: ids, not times, say what is new)."""
        since = None if self._last_audit_at is None else self._last_audit_at - AUDIT_MARGIN
        fresh = [e for e in store.list_audit_events(since=since) if e.id > self._last_audit_id]
        if fresh:
            self._last_audit_id = max(event.id for event in fresh)
            self._last_audit_at = max(event.at for event in fresh)
        return fresh

    def _audit_line(self, event: AuditEvent, kinds: dict[tuple[str, str, str], str]) -> Line:
        action = _audit_action(event, kinds)
        word = AUDIT_WORDS[event.kind]
        what = f"{action} {word}" if action else word
        target = self.ref(event.account, event.instance_id)
        if event.kind == "protection_added" or (not target and event.message):
            return Line(event.at, 2, f"watchdog  {what:<17} {event.message}")
        rule = f" ({event.rule})" if event.rule else ""
        text = f"watchdog  {what:<17} {target}{rule}"
        if event.kind in WITH_REASON and event.message:
            reason = event.message.removeprefix(f"{action} planned: ")
            text += f"\n{INDENT}{reason}"
        return Line(event.at, 2, text)

    def _phone_lines(self) -> list[Line]:
        messages = self.phone.messages()
        fresh = messages[self._phone_seen :]
        self._phone_seen = len(messages)
        return [
            Line(message.received_at, 3, f"phone     {message.severity:<9} {message.title}")
            for message in fresh
        ]


def short_id(instance_id: str) -> str:
    """Instance ids longer than 16 characters (Lambda's) cut to 8 and an ellipsis."""
    return instance_id if len(instance_id) <= 16 else instance_id[:8] + "…"


def _audit_action(event: AuditEvent, kinds: dict[tuple[str, str, str], str]) -> str:
    """The action an audit event is about: a planned one's kind comes from its newest action
    (``kinds``), the others name it in their data."""
    if event.kind == "action_planned":
        return kinds.get((event.account or "", event.instance_id or "", event.rule or ""), "")
    return str(event.data.get("action") or "")


def _action_kinds(store: Store) -> dict[tuple[str, str, str], str]:
    """(account, instance, rule) → the kind of its newest action (stop or destroy)."""
    return {
        (row.account, row.instance_id, row.rule): row.kind.value for row in store.list_actions()
    }
