"""The decisions around a provider call (pure): which listing lets a call go out, what a failed
call leads to, when to look again, when to escalate. The executor asks and carries the answer
out; docs/safety.md ("The listing at the call", "Unverified kills and failed calls") says
why each is so.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

from watchdog_gpu.errors import AuthError, NotFoundError, PermanentError, ProviderError
from watchdog_gpu.model import ActionKind, InstanceSnapshot, confirms_kill

# Rules that judge an instance by what the provider lists: a listing that fails at the call
# holds their call (the state they decided on cannot be confirmed). An idle or budget action
# goes by its own evidence then, as the call's own failure would tell.
LISTED_STATE_RULES = frozenset({"max_runtime", "paused_interruptible", "stopped_disk"})
MAX_VERIFY_BACKOFF = timedelta(minutes=10)
MAX_RETRY_BACKOFF = timedelta(minutes=15)
RETRY_BASE = timedelta(seconds=30)
# Providers give a start as "up for N minutes" (Vast.ai, RunPod: ``now - uptime``), so two
# listings of one run differ by a minute or so; a restart moves it by the whole runtime.
RESTART_TOLERANCE = timedelta(minutes=5)
# A call the provider refuses for a reason that does not clear by waiting (a 4xx other than a
# refused key) is tried this many times, then given up (FAILED).
MAX_REFUSED_CALLS = 3
# A call refused for the account's key waits for the account to be listed again: the listing is
# tried with backoff up to this (the key may be fixed any minute; one listing per pass).
MAX_ACCOUNT_WAIT = timedelta(minutes=2)

Listing = tuple[InstanceSnapshot, ...] | ProviderError


class SalvageSpec(Protocol):
    """A rule's salvage step (``rules.base.SalvageConfig``), as the executor runs it."""

    @property
    def command(self) -> Sequence[str]: ...

    @property
    def timeout(self) -> timedelta: ...

    @property
    def on_failure(self) -> str: ...


class CallTimes(Protocol):
    """The safety settings that time verification and escalation (``SafetyConfig``)."""

    @property
    def verify_interval(self) -> timedelta: ...

    @property
    def escalate_unverified_after(self) -> timedelta: ...


@dataclass(frozen=True, slots=True)
class CallOrders:
    """What the executor is told for one action's call."""

    hold_on_unreadable_listing: bool = False  # a failing listing at the call holds it
    salvage: SalvageSpec | None = None  # run before the (first) destroy call
    destroy_if_salvage_fails: bool = False  # else a failed salvage holds the instance


@dataclass(frozen=True, slots=True)
class CallPolicy:
    """The orders for each action, from the rules' configuration (``salvage``: by rule name)."""

    salvage: Mapping[str, SalvageSpec] = field(default_factory=dict)

    def orders(self, rule: str, kind: ActionKind) -> CallOrders:
        spec = self.salvage.get(rule) if kind is ActionKind.DESTROY else None
        if spec is not None and not spec.command:
            spec = None
        return CallOrders(
            hold_on_unreadable_listing=rule in LISTED_STATE_RULES,
            salvage=spec,
            destroy_if_salvage_fails=spec is not None and spec.on_failure == "destroy",
        )


@dataclass(frozen=True, slots=True)
class Held:
    """The call does not go out now: it waits for an evaluation of a newer listing
    (``reason``), or, with ``error``, the listing failed and the call is retried like a failed
    one."""

    reason: str
    error: ProviderError | None = None


def at_the_call(
    decided: InstanceSnapshot | None,
    evaluated_at: datetime | None,
    orders: CallOrders,
    listing: Callable[[], Listing],
) -> Held | None:
    """Whether the listing lets the call go out (None) or holds it. ``decided``: the recorded
    listing of the instance; ``listing()`` lists the account now (called only when needed)."""
    if decided is None:
        return None
    if evaluated_at is not None and decided.observed_at > evaluated_at:
        return Held("a listing newer than the latest evaluation is recorded")
    listed = listing()
    if isinstance(listed, ProviderError):
        if not orders.hold_on_unreadable_listing:
            return None
        detail = f"its state cannot be confirmed: listing the account fails ({listed.kind})"
        return Held(detail, listed)
    current = next((i for i in listed if i.instance_id == decided.instance_id), None)
    change = listed_change(decided, current)
    return None if change is None else Held(change)


def listed_change(decided: InstanceSnapshot, current: InstanceSnapshot | None) -> str | None:
    """How the provider's listing of an instance now differs from the one an action was
    decided on, or None: another state, or a start more than :data:`RESTART_TOLERANCE` later (a
    restart: a new runtime, a new episode). An instance no longer listed is no difference: the
    call finds it gone and verification confirms it."""
    if current is None:
        return None
    if current.state is not decided.state:
        return f"the provider lists it {current.raw_state}, not {decided.raw_state} as decided"
    if (
        current.started_at is not None
        and decided.started_at is not None
        and current.started_at - decided.started_at > RESTART_TOLERANCE
    ):
        return (
            f"it was started again at {current.started_at.isoformat()} "
            f"(decided on a start at {decided.started_at.isoformat()})"
        )
    return None


class AfterError(enum.Enum):
    """What a provider call that raised leads to."""

    VERIFY = "verify"  # gone already, or a 2xx that cannot be read: re-listing tells
    AWAIT_ACCOUNT = "await_account"  # a refused key: called again once the account lists
    RETRY_REFUSED = "retry_refused"  # another refusal: retried, up to MAX_REFUSED_CALLS
    GIVE_UP = "give_up"  # refused MAX_REFUSED_CALLS times: failed, final
    RETRY = "retry"  # transient: the call may not have arrived; repeated while it holds


def after_call_error(error: ProviderError, attempts: int) -> AfterError:
    """``attempts``: the calls made so far, this one included."""
    if isinstance(error, NotFoundError):
        return AfterError.VERIFY
    if isinstance(error, AuthError | PermanentError):
        if error.status_code is not None and 200 <= error.status_code < 300:
            return AfterError.VERIFY
        if isinstance(error, AuthError):
            return AfterError.AWAIT_ACCOUNT
        return AfterError.GIVE_UP if attempts >= MAX_REFUSED_CALLS else AfterError.RETRY_REFUSED
    return AfterError.RETRY


def done(kind: ActionKind, current: InstanceSnapshot | None) -> bool:
    """Whether the listing ``current`` of the instance confirms the kill."""
    if current is None:
        return True
    return confirms_kill(kind, current.state, interruptible=current.interruptible)


def escalation_number(elapsed: timedelta, after: timedelta) -> int:
    """Which escalation is due ``elapsed`` after the call: #1 after ``after``, then each time
    the elapsed time doubles (#2 at 2×, #3 at 4×, …) — told at once, repeated, but a
    90-minute outage is a handful of pages, not one every few minutes. 0: none yet."""
    if after <= timedelta(0) or elapsed < after:
        return 0
    return int(elapsed / after).bit_length()


def next_escalation(planned_at: datetime, now: datetime, after: timedelta) -> datetime:
    """When the next escalation of an action planned at ``planned_at`` is due."""
    if after <= timedelta(0):
        return datetime.max.replace(tzinfo=now.tzinfo)
    return planned_at + after * (1 << escalation_number(now - planned_at, after))


def retry_at(
    now: datetime, attempts: int, planned_at: datetime, after: timedelta, cap: timedelta
) -> datetime:
    """When a call that could not be made (or a listing that failed) is tried again: doubling
    backoff up to ``cap``, never past the next escalation."""
    delay = min(RETRY_BASE * (1 << min(max(attempts - 1, 0), 16)), cap)
    return min(now + delay, next_escalation(planned_at, now, after))


def verify_at(now: datetime, checks: int, planned_at: datetime, times: CallTimes) -> datetime:
    """When an unverified kill is listed again after ``checks`` checks: doubling backoff up to
    :data:`MAX_VERIFY_BACKOFF`, never past the next escalation."""
    delay = min(times.verify_interval * (1 << min(checks, 8)), MAX_VERIFY_BACKOFF)
    escalation = next_escalation(planned_at, now, times.escalate_unverified_after)
    return now + min(delay, escalation - now)
