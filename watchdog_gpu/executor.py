"""The executor: carries out the stop/destroy actions the planner wrote to the outbox.

Each pass verifies the calls that went out (by re-listing, never by a timer, escalating while an
instance still bills) and executes the due actions (dry run in monitor mode; salvage, then the
provider call on the state a fresh listing shows). Every step is one store transaction with its
audit event and notification, and an action marked ``calling`` before a crash is verified before
it is ever called again. Exact semantics: ``docs/safety.md``, "Unverified kills and failed
calls", "A call interrupted by a restart" and "The listing at the call".
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

from watchdog_gpu.errors import AuthError, NotFoundError, PermanentError, ProviderError
from watchdog_gpu.model import (
    ActionKind,
    ActionResult,
    ActionStatus,
    InstanceSnapshot,
    InstanceState,
    PlannedAction,
    PlannedNotification,
    stop_took_effect,
)
from watchdog_gpu.notices import RESOLUTION, ActionKey, next_notice_key
from watchdog_gpu.notify.render import (
    ActionOutcome,
    render_action_result,
    render_escalation,
    render_resolution,
)
from watchdog_gpu.providers.base import Provider
from watchdog_gpu.reports import ExecutorReport, StepOutcome
from watchdog_gpu.rules.base import SalvageConfig
from watchdog_gpu.safety import SafetyConfig
from watchdog_gpu.salvage import CommandRunner, SalvageResult, run_local_command, salvage
from watchdog_gpu.store.rows import ActionRow

log = logging.getLogger(__name__)

CALLING = ActionResult.CALLING  # the ``result`` mark written right before a provider call
# Rules that judge an instance by what the provider lists: a listing that fails at the call
# holds their call (the state they decided on cannot be confirmed). Every action waits when a
# fresh listing shows the instance changed (``_listing_moved_on``).
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
# The ``result`` of an action waiting for that listing.
AWAITING_ACCOUNT = ActionResult.AWAITING_ACCOUNT
DEFAULT_LEASE = timedelta(minutes=5)


class ActionStore(Protocol):
    """The part of :class:`watchdog_gpu.store.Store` the executor uses."""

    def claim_actions(
        self,
        now: datetime,
        claimer: str,
        limit: int = 10,
        statuses: Sequence[str] = ...,
        *,
        reclaim_stale_after: timedelta | None = None,
    ) -> list[ActionRow]: ...

    def transition_action(
        self,
        key: str,
        expected_status: str,
        new_status: str,
        now: datetime,
        *,
        result: ActionResult | None = None,
        last_error: str | None = None,
        next_attempt_at: datetime | None = None,
    ) -> bool: ...

    def record_action_step(
        self,
        key: str,
        expected_status: str,
        new_status: str,
        now: datetime,
        *,
        audit_kind: str,
        message: str,
        data: Mapping[str, str | int | float | bool | None] | None = None,
        notification: PlannedNotification | None = None,
        result: ActionResult | None = None,
        last_error: str | None = None,
        next_attempt_at: datetime | None = None,
    ) -> bool: ...

    def instance_snapshot(self, account: str, instance_id: str) -> InstanceSnapshot | None: ...

    def get_notification(self, key: str) -> object | None: ...

    def forget_host_key(self, account: str, instance_id: str) -> None: ...


@dataclass
class _Pass:
    now: datetime
    evaluated_at: datetime | None = None
    current: set[str] | None = None  # episode keys seen at the latest evaluation (lazy)
    listings: dict[str, tuple[InstanceSnapshot, ...] | ProviderError] = field(default_factory=dict)
    outcomes: list[StepOutcome] = field(default_factory=list)


class Executor:
    """Claims and carries out actions; see the module docstring for the state machine."""

    def __init__(
        self,
        store: ActionStore,
        providers: Mapping[str, Provider],
        safety: SafetyConfig,
        salvage_configs: Mapping[str, SalvageConfig] | None = None,
        *,
        claimer: str = "executor",
        salvage_runner: CommandRunner = run_local_command,
        on_forget_instance: Callable[[str, str], None] | None = None,
        lease: timedelta = DEFAULT_LEASE,
        guard: Callable[[ActionRow, datetime], str | None] | None = None,
        current_episodes: Callable[[datetime], Collection[str]] | None = None,
    ) -> None:
        """``guard`` is asked right before every provider call whether the action may still
        happen (a protection or a snooze added after it was planned); a reason cancels it.

        ``current_episodes(since)`` gives the episode keys of the findings recorded at or after
        ``since``. With it, an action is carried out (or its call repeated) only while the
        condition that caused it still held at the latest evaluation: a destroy whose call
        failed is never retried after the GPU got busy again."""
        self.store = store
        self.providers = providers
        self.safety = safety
        self.salvage_configs = dict(salvage_configs or {})
        self.claimer = claimer
        self.salvage_runner = salvage_runner
        self.on_forget_instance = on_forget_instance
        self.lease = lease
        self.guard = guard
        self.current_episodes = current_episodes
        self._recovered = False

    def run(
        self, now: datetime, limit: int = 50, *, evaluated_at: datetime | None = None
    ) -> ExecutorReport:
        """One pass: verify due actions, then execute due pending ones. ``evaluated_at`` is when
        the rules last ran in this process (None: not yet; pending actions then wait)."""
        state = _Pass(now, evaluated_at)
        # The first pass of a process takes over every claimed action at once: the process
        # that claimed them is gone (one executor per database; the scheduler never overlaps).
        reclaim = timedelta(0) if not self._recovered else self.lease
        self._recovered = True
        rows = self.store.claim_actions(
            now,
            self.claimer,
            limit,
            (ActionStatus.CALLED, ActionStatus.UNVERIFIED, ActionStatus.PENDING),
            reclaim_stale_after=reclaim,
        )
        for row in rows:
            try:
                self._handle(row, state)
            except ProviderError as error:  # an unexpected provider failure: retry later
                self._retry_later(row, state, error, back_to=_resume_status(row))
        return ExecutorReport(tuple(state.outcomes))

    # -- dispatch ---------------------------------------------------------------------------

    def _handle(self, row: ActionRow, state: _Pass) -> None:
        origin = row.claimed_from or ActionStatus.PENDING
        if origin in (ActionStatus.CALLED, ActionStatus.UNVERIFIED):
            # Still marked CALLING: an interrupted call whose verification could not finish.
            self._verify(row, state, resumed=row.result == CALLING)
        elif row.result == CALLING:
            # Reclaimed from a crashed process that may have sent the call: verify, never
            # call blindly again. The trail says so: whether the call went out is not known
            # here (only the provider's listing will tell), so no ``provider_called`` is
            # written for it.
            self.store.record_action_step(
                row.idempotency_key,
                ActionStatus.CLAIMED,
                ActionStatus.CLAIMED,
                state.now,
                audit_kind="provider_call_interrupted",
                message=(
                    f"a watchdog process stopped during the {row.kind.value} call, which may "
                    "have reached the provider; verifying instead of calling again"
                ),
                data={"action": row.kind.value, "dry_run": row.dry_run},
                result=CALLING,
            )
            self._verify(row, state, resumed=True)
        else:
            self._execute(row, state)

    def _step(
        self,
        row: ActionRow,
        state: _Pass,
        new_status: ActionStatus,
        *,
        audit_kind: str,
        message: str,
        notification: PlannedNotification | None = None,
        result: ActionResult | None = None,
        last_error: str | None = None,
        next_attempt_at: datetime | None = None,
        data: Mapping[str, str | int | float | bool | None] | None = None,
    ) -> None:
        moved = self.store.record_action_step(
            row.idempotency_key,
            ActionStatus.CLAIMED,
            new_status,
            state.now,
            audit_kind=audit_kind,
            message=message,
            data={"action": row.kind.value, "dry_run": row.dry_run, **(data or {})},
            notification=notification,
            result=result,
            last_error=last_error,
            next_attempt_at=next_attempt_at,
        )
        if moved:
            state.outcomes.append(
                StepOutcome(row.idempotency_key, row.rule, new_status, row.account, row.kind)
            )
            log.info(
                "action=%s account=%s instance=%s rule=%s status=%s dry_run=%s detail=%r",
                row.kind.value,
                row.account,
                row.instance_id,
                row.rule,
                new_status,
                str(row.dry_run).lower(),
                message,
            )

    def _finish(
        self,
        row: ActionRow,
        state: _Pass,
        new_status: ActionStatus,
        outcome: ActionOutcome,
        *,
        audit_kind: str,
        message: str,
        detail: str = "",
        last_error: str | None = None,
    ) -> None:
        """A step that ends with the action's one result message."""
        note = _result_note(row, state, outcome, detail)
        self._step(
            row,
            state,
            new_status,
            audit_kind=audit_kind,
            message=message,
            notification=note,
            result=ActionResult(outcome.value),
            last_error=last_error,
        )

    # -- execute ----------------------------------------------------------------------------

    def _execute(self, row: ActionRow, state: _Pass, *, resumed: bool = False) -> None:
        """Carry out a pending action; ``resumed``: the call of an interrupted process did not
        take (verification lists the instance billing), so it is made again — its salvage ran
        before that call."""
        if not self._still_warranted(row, state):
            return
        if row.dry_run:
            self._finish(
                row,
                state,
                ActionStatus.DRY_RUN,
                ActionOutcome.DRY_RUN,
                audit_kind="action_dry_run",
                message=f"monitor mode: would {row.kind.value}",
            )
            return
        if self._cancelled_by_guard(row, state):
            return
        if self._listing_moved_on(row, state):
            return
        if row.result == AWAITING_ACCOUNT and self._account_unreadable(row, state):
            return
        if not resumed and row.kind is ActionKind.DESTROY and not self._salvage_allows(row, state):
            return
        provider = self.providers.get(row.account)
        if provider is None:
            self._fail(row, state, f"no provider configured for account {row.account}")
            return
        # Record the intent before acting: a crash from here on resumes by verifying.
        self.store.transition_action(
            row.idempotency_key,
            ActionStatus.CLAIMED,
            ActionStatus.CLAIMED,
            state.now,
            result=CALLING,
        )
        try:
            _call(provider, row)
        except NotFoundError:
            pass  # already gone: verification will confirm it
        except (AuthError, PermanentError) as error:
            if not _accepted(error):
                self._refused(row, state, error)
                return
            # A 2xx answer that cannot be read: the provider carried the call out (or may
            # have), so the outcome is unknown, not failed — verification re-lists and tells.
        except ProviderError as error:
            # Transient: the call may not have reached the provider; it is repeated later
            # while the condition holds (destroying something already gone is success, so a
            # repeat is harmless), and escalated once it has taken too long.
            note = self._escalation(row, state, f"the {row.kind.value} call keeps failing")
            self._retry_later(
                row,
                state,
                error,
                back_to=ActionStatus.PENDING,
                result=ActionResult.CALL_FAILED,
                notification=note,
            )
            return
        again = "called again after an interrupted call, " if resumed else ""
        self._step(
            row,
            state,
            ActionStatus.CALLED,
            audit_kind="provider_called",
            message=f"{row.kind.value} {again}accepted by the provider; verifying",
            result=ActionResult.CALLED,
            next_attempt_at=state.now + self.safety.verify_interval,
        )

    def _condition_holds(self, row: ActionRow, state: _Pass) -> bool | None:
        """Was the finding behind ``row`` present at the latest evaluation? None: this process
        has not evaluated yet (nothing can be said)."""
        if self.current_episodes is None:
            return True
        if state.evaluated_at is None:
            return None
        if state.current is None:
            state.current = set(self.current_episodes(state.evaluated_at))
        return row.episode_key in state.current

    def _still_warranted(self, row: ActionRow, state: _Pass) -> bool:
        """Does the condition behind ``row`` still hold? If not, the action is cancelled (or,
        before this process evaluated anything, put back to wait for an evaluation)."""
        holds = self._condition_holds(row, state)
        if holds is None:
            self.store.transition_action(
                row.idempotency_key, ActionStatus.CLAIMED, _resume_status(row), state.now
            )
            return False
        if not holds:
            self._cancel(row, state, "the condition no longer held at the latest check")
        return holds

    def _listing_moved_on(self, row: ActionRow, state: _Pass) -> bool:
        """Does the action wait (True) because the instance is no longer what its evaluation
        saw? The act job runs up to a poll interval
        after the listing its evaluation read (module doc, "The listing at the call"): the
        account is listed again now, and an instance in another state, or started again, waits
        for an evaluation of a new listing — which drops the finding if its condition cleared.
        A recorded listing newer than the latest evaluation waits likewise; a listing that
        fails holds the call (its state is unknown) and is retried like a failed call."""
        decided = self.store.instance_snapshot(row.account, row.instance_id)
        if decided is None:
            return False
        if state.evaluated_at is not None and decided.observed_at > state.evaluated_at:
            reason = "a listing newer than the latest evaluation is recorded"
        else:
            listing = self._listing(row.account, state)
            if isinstance(listing, ProviderError) and row.rule not in LISTED_STATE_RULES:
                # No fresh listing to compare: an idle or budget action goes by its own
                # evidence (re-checked above), as before; a refused or failed call is
                # handled as such (``_refused``, ``_retry_later``).
                return False
            if isinstance(listing, ProviderError):
                detail = (
                    f"its state cannot be confirmed: listing the account fails ({listing.kind})"
                )
                note = self._escalation(row, state, detail, called=False)
                self._retry_later(
                    row,
                    state,
                    listing,
                    back_to=ActionStatus.PENDING,
                    result=ActionResult.LISTING_FAILED,
                    notification=note,
                )
                return True
            current = next((i for i in listing if i.instance_id == row.instance_id), None)
            found = listed_change(decided, current)
            if found is None:
                return False
            reason = found
        # A wait that drags on (a listing that keeps changing) is escalated on the clock of
        # any kill that is not done: never silent.
        self._step(
            row,
            state,
            ActionStatus.PENDING,
            audit_kind="action_waits",
            message=f"{reason}: decided again after the next listing",
            notification=self._escalation(row, state, reason, called=False),
            result=ActionResult.LISTING_CHANGED,
            next_attempt_at=state.now + RETRY_BASE,
        )
        return True

    def _cancelled_by_guard(self, row: ActionRow, state: _Pass) -> bool:
        """Protection is absolute and a snooze postpones: both win over a planned action."""
        reason = self.guard(row, state.now) if self.guard is not None else None
        if reason is None:
            return False
        self._cancel(row, state, reason)
        return True

    def _cancel(self, row: ActionRow, state: _Pass, reason: str) -> None:
        """End the action before (another) provider call, with the episode's resolution."""
        episode = episode_key_of(row)
        note = render_resolution(
            row_subject(row),
            reason=reason,
            now=state.now,
            action_cancelled=True,
            episode_key=episode,
            # The warning is withdrawn: a second withdrawal of the episode needs its own key.
            key=next_notice_key(episode, RESOLUTION, _OutboxKeys(self.store), state.now),
        )
        self._step(
            row,
            state,
            ActionStatus.CANCELLED,
            audit_kind="action_cancelled",
            message=f"{row.kind.value} cancelled before the provider call: {reason}",
            notification=note,
            result=ActionResult.CANCELLED,
        )

    def _salvage_allows(self, row: ActionRow, state: _Pass) -> bool:
        config = self.salvage_configs.get(row.rule)
        if config is None or not config.command:
            return True
        snapshot = self.store.instance_snapshot(row.account, row.instance_id)
        if snapshot is None:
            outcome = SalvageResult(ok=False, detail="instance not recorded: nothing to salvage")
        else:
            outcome = salvage(config, snapshot, self.salvage_runner)
        if outcome.ok:
            self.store.transition_action(
                row.idempotency_key,
                ActionStatus.CLAIMED,
                ActionStatus.CLAIMED,
                state.now,
                result=ActionResult.SALVAGED,
            )
            return True
        if config.on_failure == "destroy":
            log.warning(
                "salvage failed, destroying anyway account=%s instance=%s detail=%r",
                row.account,
                row.instance_id,
                outcome.detail,
            )
            return True
        self._finish(
            row,
            state,
            ActionStatus.HELD,
            ActionOutcome.HELD,
            audit_kind="salvage_failed_hold",
            message=f"salvage failed, instance kept: {outcome.detail}",
            detail=outcome.detail,
            last_error=outcome.detail,
        )
        return False

    def _refused(self, row: ActionRow, state: _Pass, error: ProviderError) -> None:
        """The provider refused the call: told at once. A refused key can be fixed: the call
        waits for the account to be listed again, then is repeated, for as long as the condition
        holds (never given up while it bills). Any other refusal (a 4xx) is retried with backoff
        while the condition holds and given up (FAILED, final) after ``MAX_REFUSED_CALLS``."""
        detail = f"{error.kind}: {error}"
        if isinstance(error, AuthError):
            first = row.result != AWAITING_ACCOUNT
            self._retry_later(
                row,
                state,
                error,
                back_to=ActionStatus.PENDING,
                result=AWAITING_ACCOUNT,
                notification=(
                    _result_note(row, state, ActionOutcome.AWAITING_ACCOUNT, detail)
                    if first
                    else self._escalation(row, state, f"the provider refuses the call ({detail})")
                ),
                cap=MAX_ACCOUNT_WAIT,
            )
            return
        if row.attempts >= MAX_REFUSED_CALLS:
            self._fail(row, state, f"{detail} (given up after {row.attempts} attempts)")
            return
        note = None
        if row.attempts <= 1:
            note = _result_note(row, state, ActionOutcome.RETRYING, detail)
        self._retry_later(
            row,
            state,
            error,
            back_to=ActionStatus.PENDING,
            result=ActionResult.CALL_REFUSED,
            notification=note or self._escalation(row, state, "the provider refuses the call"),
        )

    def _account_unreadable(self, row: ActionRow, state: _Pass) -> bool:
        """For a call refused for the account's key: does it wait (True) because the account
        still cannot be listed? A listing that reads means the key (or the outage) is fixed: the
        call is made again. Waiting is retried with backoff and escalated on the kill's clock."""
        listing = self._listing(row.account, state)
        if not isinstance(listing, ProviderError):
            return False
        detail = (
            f"the provider refused the {row.kind.value} call and the account still cannot be "
            f"read ({listing.kind}); it is called again as soon as the account reads"
        )
        self._retry_later(
            row,
            state,
            listing,
            back_to=ActionStatus.PENDING,
            result=AWAITING_ACCOUNT,
            notification=self._escalation(row, state, detail),
            cap=MAX_ACCOUNT_WAIT,
        )
        return True

    def _escalation(
        self, row: ActionRow, state: _Pass, detail: str, *, called: bool = True
    ) -> PlannedNotification | None:
        """The escalation due now (see :func:`escalation_number`), counted from when the action
        was planned (its first call attempt), whatever the provider answers or lists: a kill
        that cannot be confirmed is never silent. None before the first. ``called=False``: the
        executor holds the call (the listing at the call), and the message says so."""
        after = self.safety.escalate_unverified_after
        number = escalation_number(state.now - row.created_at, after)
        if number < 1:
            return None
        return render_escalation(
            row_subject(row),
            number=number,
            acted_at=row.created_at,
            now=state.now,
            detail=detail,
            episode_key=episode_key_of(row),
            called=called,
        )

    def _fail(self, row: ActionRow, state: _Pass, detail: str) -> None:
        self._finish(
            row,
            state,
            ActionStatus.FAILED,
            ActionOutcome.FAILED,
            audit_kind="provider_call_failed",
            message=detail,
            detail=detail,
            last_error=detail,
        )

    def _retry_later(
        self,
        row: ActionRow,
        state: _Pass,
        error: ProviderError,
        *,
        back_to: ActionStatus,
        result: ActionResult | None = None,
        notification: PlannedNotification | None = None,
        cap: timedelta = MAX_RETRY_BACKOFF,
    ) -> None:
        delay = min(RETRY_BASE * (2 ** min(max(row.attempts - 1, 0), 16)), cap)
        self._step(
            row,
            state,
            back_to,
            audit_kind="provider_error",
            message=f"{error.kind}: {error}",
            notification=notification,
            result=result,
            last_error=f"{error.kind}: {error}",
            next_attempt_at=min(state.now + delay, self._next_escalation(row, state)),
        )

    def _next_escalation(self, row: ActionRow, state: _Pass) -> datetime:
        """When the next escalation of ``row`` is due: a backoff never makes one late."""
        after = self.safety.escalate_unverified_after
        if after <= timedelta(0):
            return datetime.max.replace(tzinfo=state.now.tzinfo)
        number = escalation_number(state.now - row.created_at, after)
        return row.created_at + after * (1 << number)

    # -- verify -----------------------------------------------------------------------------

    def _verify(self, row: ActionRow, state: _Pass, *, resumed: bool = False) -> None:
        """Re-list and confirm the kill; ``resumed``: the call of an interrupted process, which
        is made again at once when the instance is still listed billing (module doc, "Crash
        safety"), unless its condition cleared or a protection or snooze came since (then it is
        escalated on the usual clock, never called blindly)."""
        listing = self._listing(row.account, state)
        if isinstance(listing, ProviderError):
            # Unconfirmed is not done: the escalation clock runs on while listing fails.
            detail = f"cannot verify: listing the account fails ({listing.kind})"
            note = self._escalation(row, state, detail)
            self._retry_later(row, state, listing, back_to=_resume_status(row), notification=note)
            return
        current = next((i for i in listing if i.instance_id == row.instance_id), None)
        if _done(row.kind, current):
            self._verified(row, state)
            return
        if resumed and self._condition_holds(row, state) is not False:
            if self._cancelled_by_guard(row, state):
                return
            # Not evaluated yet in this process: ``_execute`` puts it back (still marked
            # CALLING) until an evaluation says whether the condition holds.
            self._execute(row, state, resumed=True)
            return
        self._unverified(row, state, current)

    def _listing(self, account: str, state: _Pass) -> tuple[InstanceSnapshot, ...] | ProviderError:
        if account not in state.listings:
            provider = self.providers.get(account)
            if provider is None:
                state.listings[account] = PermanentError(f"no provider for account {account}")
            else:
                try:
                    state.listings[account] = provider.list_instances(state.now)
                except ProviderError as error:
                    # Kept for the pass without its traceback, which holds this frame and so
                    # the pass: a cycle that left the pass and all its listings to the cyclic
                    # collector. Only its kind and text are used.
                    state.listings[account] = error.with_traceback(None)
        return state.listings[account]

    def _verified(self, row: ActionRow, state: _Pass) -> None:
        self._finish(
            row,
            state,
            ActionStatus.VERIFIED,
            ActionOutcome.VERIFIED,
            audit_kind="action_verified",
            message=f"provider listing confirms the {row.kind.value}",
        )
        if row.kind is ActionKind.DESTROY:
            self.store.forget_host_key(row.account, row.instance_id)
            if self.on_forget_instance is not None:
                self.on_forget_instance(row.account, row.instance_id)

    def _unverified(self, row: ActionRow, state: _Pass, current: InstanceSnapshot | None) -> None:
        escalate_after = self.safety.escalate_unverified_after
        elapsed = state.now - row.created_at
        seen = current.state.value if current is not None else "absent"
        number = escalation_number(elapsed, escalate_after)
        note: PlannedNotification | None = None
        if number >= 1 and self._cancelled_by_guard(row, state):
            return
        if number >= 1:
            # Money may still burn: always escalate. Repeat the call only while its condition
            # still holds (a GPU busy again is never killed by a retry).
            holds = self._condition_holds(row, state) is True
            detail = f"provider lists it as {seen}"
            if not holds:
                detail += "; the call is not repeated: its condition no longer holds"
            note = render_escalation(
                row_subject(row),
                number=number,
                acted_at=row.created_at,
                now=state.now,
                detail=detail,
                episode_key=episode_key_of(row),
            )
            if holds:
                self._recall(row)
        checks = max(row.attempts - 1, 0)
        delay = min(self.safety.verify_interval * (2 ** min(checks, 8)), MAX_VERIFY_BACKOFF)
        delay = min(delay, self._next_escalation(row, state) - state.now)
        self._step(
            row,
            state,
            ActionStatus.UNVERIFIED,
            audit_kind="action_unverified",
            message=f"provider still lists it as {seen}",
            notification=note,
            result=ActionResult.UNVERIFIED,
            next_attempt_at=state.now + delay,
            data={"seen_state": seen, "escalation": number},
        )

    def _recall(self, row: ActionRow) -> None:
        """Repeat the provider call for a kill that did not take (after the escalation delay)."""
        provider = self.providers.get(row.account)
        if provider is None:
            return
        try:
            _call(provider, row)
        except ProviderError as error:
            log.warning(
                "retry of %s failed account=%s instance=%s error_kind=%s",
                row.kind.value,
                row.account,
                row.instance_id,
                error.kind,
            )


@dataclass(frozen=True, slots=True)
class _OutboxKeys:
    """``key in _OutboxKeys(store)``: is a message with that key in the outbox?"""

    store: ActionStore

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.store.get_notification(key) is not None


def _result_note(
    row: ActionRow, state: _Pass, outcome: ActionOutcome, detail: str
) -> PlannedNotification:
    return render_action_result(
        row_subject(row),
        outcome=outcome,
        now=state.now,
        detail=detail,
        episode_key=episode_key_of(row),
    )


def escalation_number(elapsed: timedelta, after: timedelta) -> int:
    """Which escalation is due ``elapsed`` after the call: #1 after ``after``, then each time
    the elapsed time doubles (#2 at 2×, #3 at 4×, …) — told at once, repeated, but a
    90-minute outage is a handful of pages, not one every few minutes. 0: none yet."""
    if after <= timedelta(0) or elapsed < after:
        return 0
    return int(elapsed / after).bit_length()


def listed_change(decided: InstanceSnapshot, current: InstanceSnapshot | None) -> str | None:
    """How the provider's listing of an instance now differs from the one an action was
    decided on, or None: another state, or a start more than
    :data:`RESTART_TOLERANCE` later (a restart: a new runtime, a new episode). An instance no
    longer listed is no difference: the call finds it gone and verification confirms it."""
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


def _call(provider: Provider, row: ActionRow) -> None:
    if row.kind is ActionKind.STOP:
        provider.stop(row.instance_id)
    else:
        provider.destroy(row.instance_id)


def _accepted(error: ProviderError) -> bool:
    """Whether the provider answered the call with a success status despite the error."""
    return error.status_code is not None and 200 <= error.status_code < 300


def _done(kind: ActionKind, current: InstanceSnapshot | None) -> bool:
    if current is None or current.state is InstanceState.GONE:
        return True
    return kind is ActionKind.STOP and stop_took_effect(
        current.state, interruptible=current.interruptible
    )


def episode_key_of(row: ActionRow) -> str:
    """The key the action's messages hang on (``ActionKey.message_episode``): the finding's
    episode key, with ``:dry_run`` kept for a dry run."""
    return ActionKey(row.episode_key, row.kind, row.dry_run).message_episode


def _resume_status(row: ActionRow) -> ActionStatus:
    """Where an action goes back to when this pass could not finish it."""
    if row.claimed_from in (ActionStatus.CALLED, ActionStatus.UNVERIFIED):
        return row.claimed_from
    return ActionStatus.UNVERIFIED if row.result == CALLING else ActionStatus.PENDING


def row_subject(row: ActionRow) -> PlannedAction:
    """The planned action an outbox row came from (the notification renderer's subject)."""
    return PlannedAction(
        idempotency_key=row.idempotency_key,
        account=row.account,
        instance_id=row.instance_id,
        rule=row.rule,
        kind=row.kind,
        dry_run=row.dry_run,
        reason=row.reason,
        planned_at=row.created_at,
        episode_key=row.episode_key,
        evidence=dict(row.evidence),
        usd_per_hour_at_stake=row.usd_per_hour_at_stake,
    )
