"""What one tick, one executor pass and one delivery pass did: plain values for logs, metrics,
``once``, ``doctor`` and the simulator, so that a reader of them needs none of the parts that did
the work."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import NamedTuple

from watchdog_gpu.model import ActionKind, Finding, ProbeOutcome
from watchdog_gpu.plan import Plan


class StepOutcome(NamedTuple):
    """An action that moved to ``status`` in one pass (its account and kind are its row's)."""

    key: str
    rule: str
    status: str
    account: str
    kind: ActionKind


@dataclass(frozen=True, slots=True)
class ExecutorReport:
    """What one pass did, by final or intermediate status (for logs and metrics)."""

    outcomes: tuple[StepOutcome, ...] = ()

    def count(self, status: str) -> int:
        return sum(1 for outcome in self.outcomes if outcome.status == status)


@dataclass(slots=True)
class DeliveryReport:
    """What one ``deliver_due`` pass did (for logs and metrics)."""

    delivered: int = 0
    unrouted: int = 0
    failed: int = 0


@dataclass
class TickReport:
    """What one tick did (for logs, metrics, ``once`` and the simulator)."""

    now: datetime  # when the rules were evaluated
    polled: dict[str, str] = field(default_factory=dict)  # account → "ok" or error kind
    probed_at: datetime | None = None  # when the probe round the evaluation read started
    probes: list[ProbeOutcome] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    plan: Plan | None = None
    failed_rules: Mapping[str, str] = field(default_factory=dict)
    executed: ExecutorReport | None = None
    delivered: DeliveryReport | None = None
    # When to evaluate again rather than a tick later (wake.py): the earliest instant an idle
    # verdict may change as rows come in (an idle clock's next point), and the earliest instant
    # an idle decision falls due by the clock alone (the plan's warn/due times).
    next_change: datetime | None = None
    next_due: datetime | None = None
    # The earliest instant a decision on listed state may change by time alone (a rule's
    # warning point, a warned action's due time): woken at itself, after a fresh listing.
    next_listed: datetime | None = None

    @property
    def healthy(self) -> bool:
        """Every account polled and no rule failed (for the dead-man's switch and WATCHDOG=1)."""
        return all(result == "ok" for result in self.polled.values()) and not self.failed_rules
