"""The executor: carries out the stop/destroy actions the planner wrote to the outbox.

Each pass verifies the calls that went out (re-listing the account, escalating a kill that is
not confirmed) and executes the pending actions that are due (salvage, then the provider call).
What to do at each step is decided in ``call_policy.py``: the executor asks, carries the answer
out and records it, each step one store transaction with its audit event and notification.
Record first, act second: an action is marked ``calling`` right before the provider call, and a
process that finds the mark verifies before it calls again (docs/safety.md, "Unverified kills
and failed calls", "The listing at the call").
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

from watchdog_gpu.call_policy import (
    MAX_ACCOUNT_WAIT,
    MAX_RETRY_BACKOFF,
    RETRY_BASE,
    AfterError,
    CallOrders,
    CallPolicy,
    CallTimes,
    Listing,
    SalvageSpec,
    after_call_error,
    at_the_call,
    done,
    escalation_number,
    retry_at,
    verify_at,
)
from watchdog_gpu.errors import PermanentError, ProviderError
from watchdog_gpu.model import (
    ActionKind,
    ActionResult,
    ActionStatus,
    InstanceSnapshot,
    PlannedAction,
    PlannedNotification,
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
from watchdog_gpu.salvage import CommandRunner, SalvageResult, run_local_command, salvage
from watchdog_gpu.store.rows import ActionRow

log = logging.getLogger(__name__)

CALLING = ActionResult.CALLING  # the ``result`` mark written right before a provider call
# The ``result`` of an action whose call waits for its account to be listed again.
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
    listings: dict[str, Listing] = field(default_factory=dict)
    outcomes: list[StepOutcome] = field(default_factory=list)


class Executor:
    """Claims and carries out actions; see the module docstring for the state machine."""

    def __init__(
        self,
        store: ActionStore,
        providers: Mapping[str, Provider],
        safety: CallTimes,
        salvage_configs: Mapping[str, SalvageSpec] | None = None,
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
        self.policy = CallPolicy(dict(salvage_configs or {}))
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
        orders = self.policy.orders(row.rule, row.kind)
        if self._held_at_the_call(row, state, orders):
            return
        if row.result == AWAITING_ACCOUNT and self._account_unreadable(row, state):
            return
        if not resumed and not self._salvage_allows(row, state, orders):
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
        except ProviderError as error:
            if self._call_failed(row, state, error):
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

    def _held_at_the_call(self, row: ActionRow, state: _Pass, orders: CallOrders) -> bool:
        """Does the call wait (True) because the listing at the call does not let it go out
        (``call_policy.at_the_call``)? A failing listing is retried like a failed call; a
        changed one waits for an evaluation of a newer listing, escalated on the kill's clock
        when that drags on (never silent)."""
        held = at_the_call(
            self.store.instance_snapshot(row.account, row.instance_id),
            state.evaluated_at,
            orders,
            lambda: self._listing(row.account, state),
        )
        if held is None:
            return False
        note = self._escalation(row, state, held.reason, called=False)
        if held.error is not None:
            self._retry_later(
                row,
                state,
                held.error,
                back_to=ActionStatus.PENDING,
                result=ActionResult.LISTING_FAILED,
                notification=note,
            )
            return True
        self._step(
            row,
            state,
            ActionStatus.PENDING,
            audit_kind="action_waits",
            message=f"{held.reason}: decided again after the next listing",
            notification=note,
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

    def _salvage_allows(self, row: ActionRow, state: _Pass, orders: CallOrders) -> bool:
        config = orders.salvage
        if config is None:
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
        if orders.destroy_if_salvage_fails:
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

    def _call_failed(self, row: ActionRow, state: _Pass, error: ProviderError) -> bool:
        """Carry out what ``call_policy.after_call_error`` decides for a call that raised; False:
        it goes on to verification as if accepted (gone already, or a 2xx that cannot be
        read)."""
        detail = f"{error.kind}: {error}"
        verdict = after_call_error(error, row.attempts)
        if verdict is AfterError.VERIFY:
            return False
        if verdict is AfterError.GIVE_UP:
            self._fail(row, state, f"{detail} (given up after {row.attempts} attempts)")
        elif verdict is AfterError.AWAIT_ACCOUNT:
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
        elif verdict is AfterError.RETRY_REFUSED:
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
        else:
            # The call may not have reached the provider: repeated while the condition holds
            # (destroying something already gone is success), escalated once it takes too long.
            self._retry_later(
                row,
                state,
                error,
                back_to=ActionStatus.PENDING,
                result=ActionResult.CALL_FAILED,
                notification=self._escalation(
                    row, state, f"the {row.kind.value} call keeps failing"
                ),
            )
        return True

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
        after = self.safety.escalate_unverified_after
        self._step(
            row,
            state,
            back_to,
            audit_kind="provider_error",
            message=f"{error.kind}: {error}",
            notification=notification,
            result=result,
            last_error=f"{error.kind}: {error}",
            next_attempt_at=retry_at(state.now, row.attempts, row.created_at, after, cap),
        )

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
        if done(row.kind, current):
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
        seen = current.state.value if current is not None else "absent"
        number = escalation_number(
            state.now - row.created_at, self.safety.escalate_unverified_after
        )
        note: PlannedNotification | None = None
        if number >= 1:
            if self._cancelled_by_guard(row, state):
                return
            # Money may still burn: always escalate. Repeat the call only while its condition
            # still holds (a GPU busy again is never killed by a retry).
            holds = self._condition_holds(row, state) is True
            detail = f"provider lists it as {seen}"
            if not holds:
                detail += "; the call is not repeated: its condition no longer holds"
            note = self._escalation(row, state, detail)
            if holds:
                self._recall(row)
        checks = max(row.attempts - 1, 0)
        self._step(
            row,
            state,
            ActionStatus.UNVERIFIED,
            audit_kind="action_unverified",
            message=f"provider still lists it as {seen}",
            notification=note,
            result=ActionResult.UNVERIFIED,
            next_attempt_at=verify_at(state.now, checks, row.created_at, self.safety),
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


def _call(provider: Provider, row: ActionRow) -> None:
    if row.kind is ActionKind.STOP:
        provider.stop(row.instance_id)
    else:
        provider.destroy(row.instance_id)


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
