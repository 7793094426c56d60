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
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from watchdog_gpu.action_steps import ActionRecorder, ActionStore
from watchdog_gpu.call_policy import (
    MAX_ACCOUNT_WAIT,
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
    verify_at,
)
from watchdog_gpu.errors import PermanentError, ProviderError
from watchdog_gpu.instance_listing import instance_listing
from watchdog_gpu.model import (
    ActionKind,
    ActionResult,
    ActionStatus,
    InstanceSnapshot,
    PlannedNotification,
)
from watchdog_gpu.notify.render import ActionOutcome
from watchdog_gpu.providers.base import Provider
from watchdog_gpu.reports import ExecutorReport
from watchdog_gpu.salvage import CommandRunner, SalvageResult, run_local_command, salvage
from watchdog_gpu.store.rows import ActionRow

log = logging.getLogger(__name__)

CALLING = ActionResult.CALLING  # the ``result`` mark written right before a provider call
# The ``result`` of an action whose call waits for its account to be listed again.
AWAITING_ACCOUNT = ActionResult.AWAITING_ACCOUNT
DEFAULT_LEASE = timedelta(minutes=5)


@dataclass
class _Pass(ActionRecorder):
    evaluated_at: datetime | None = None
    current: set[str] | None = None  # episode keys seen at the latest evaluation (lazy)
    listings: dict[str, Listing] = field(default_factory=dict)
    listed_at: dict[str, datetime] = field(default_factory=dict)  # when each was taken
    recorded: set[str] = field(default_factory=set)  # accounts whose listing is recorded


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
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        """``guard`` is asked right before every provider call whether the action may still
        happen (a protection or a snooze added after it was planned); a reason cancels it.

        ``current_episodes(since)`` gives the episode keys of the findings recorded at or after
        ``since``. With it, an action is carried out (or its call repeated) only while the
        condition that caused it still held at the latest evaluation: a destroy whose call
        failed is never retried after the GPU got busy again.

        ``clock``: read as each account is listed, the instant its listing is recorded at (a
        salvage earlier in the pass may have taken minutes); without it, the pass's ``now``."""
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
        self.clock = clock
        self._recovered = False

    def run(
        self, now: datetime, limit: int = 50, *, evaluated_at: datetime | None = None
    ) -> ExecutorReport:
        """One pass: verify due actions, then execute due pending ones. ``evaluated_at``: this
        process's latest committed evaluation (None: none yet; pending actions then wait)."""
        state = _Pass(self.store, self.safety, now, evaluated_at=evaluated_at)
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
        # Calls before verifications: a verification records its listing, newer than the
        # evaluation, which would hold this pass's calls on the account (``at_the_call``).
        for row in sorted(rows, key=_verifies):
            try:
                self._handle(row, state)
            except ProviderError as error:  # an unexpected provider failure: retry later
                state.retry_later(row, error, back_to=_resume_status(row))
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

    # -- execute ----------------------------------------------------------------------------

    def _execute(self, row: ActionRow, state: _Pass, *, resumed: bool = False) -> None:
        """Carry out a pending action; ``resumed``: the call of an interrupted process did not
        take (verification lists the instance billing), so it is made again — its salvage ran
        before that call."""
        if not self._still_warranted(row, state):
            return
        if row.dry_run:
            state.finish(
                row,
                ActionStatus.DRY_RUN,
                ActionOutcome.DRY_RUN,
                audit_kind="action_dry_run",
                message=f"monitor mode: would {row.kind.value}",
            )
            return
        if not self._cleared_for_the_call(row, state, resumed=resumed):
            return
        provider = self.providers.get(row.account)
        if provider is None:
            state.fail(row, f"no provider configured for account {row.account}")
            return
        self._make_the_call(row, state, provider, resumed=resumed)

    def _cleared_for_the_call(self, row: ActionRow, state: _Pass, *, resumed: bool) -> bool:
        """Whether nothing stops the provider call now: no guard cancels it, the listing at the
        call lets it go, its account can be read, and salvage allows it (a resumed call's
        salvage ran before)."""
        if self._cancelled_by_guard(row, state):
            return False
        orders = self.policy.orders(row.rule, row.kind)
        if self._held_at_the_call(row, state, orders):
            return False
        if row.result == AWAITING_ACCOUNT and self._account_unreadable(row, state):
            return False
        return resumed or self._salvage_allows(row, state, orders)

    def _make_the_call(
        self, row: ActionRow, state: _Pass, provider: Provider, *, resumed: bool
    ) -> None:
        # Record the intent before acting: a crash from here on resumes by verifying.
        self.store.transition_action(
            row.idempotency_key,
            ActionStatus.CLAIMED,
            ActionStatus.CLAIMED,
            state.now,
            result=CALLING,
        )
        # The provider stops billing when it accepts the call (docs/providers.md): the instant
        # right before it is when the ledger ends the bill, once a listing confirms the kill.
        accepted_at = self._instant(state)
        try:
            _call(provider, row)
        except ProviderError as error:
            if self._call_failed(row, state, error):
                return
        again = "called again after an interrupted call, " if resumed else ""
        state.step(
            row,
            ActionStatus.CALLED,
            audit_kind="provider_called",
            message=f"{row.kind.value} {again}accepted by the provider; verifying",
            result=ActionResult.CALLED,
            next_attempt_at=state.now + self.safety.verify_interval,
            accepted_at=accepted_at,
        )

    def _instant(self, state: _Pass) -> datetime:
        """Now, read from the clock when there is one (a salvage earlier in the pass may have
        taken minutes), never before the pass's ``now``."""
        return state.now if self.clock is None else max(state.now, self.clock())

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
            state.cancel(row, "the condition no longer held at the latest check")
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
        note = state.escalation(row, held.reason, called=False)
        if held.error is not None:
            state.retry_later(
                row,
                held.error,
                back_to=ActionStatus.PENDING,
                result=ActionResult.LISTING_FAILED,
                notification=note,
            )
            return True
        state.step(
            row,
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
        state.cancel(row, reason)
        return True

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
        state.finish(
            row,
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
            state.fail(row, f"{detail} (given up after {row.attempts} attempts)")
        elif verdict is AfterError.AWAIT_ACCOUNT:
            first = row.result != AWAITING_ACCOUNT
            state.retry_later(
                row,
                error,
                back_to=ActionStatus.PENDING,
                result=AWAITING_ACCOUNT,
                notification=(
                    state.result_note(row, ActionOutcome.AWAITING_ACCOUNT, detail)
                    if first
                    else state.escalation(row, f"the provider refuses the call ({detail})")
                ),
                cap=MAX_ACCOUNT_WAIT,
            )
        elif verdict is AfterError.RETRY_REFUSED:
            note = None
            if row.attempts <= 1:
                note = state.result_note(row, ActionOutcome.RETRYING, detail)
            state.retry_later(
                row,
                error,
                back_to=ActionStatus.PENDING,
                result=ActionResult.CALL_REFUSED,
                notification=note or state.escalation(row, "the provider refuses the call"),
            )
        else:
            # The call may not have reached the provider: repeated while the condition holds
            # (destroying something already gone is success), escalated once it takes too long.
            state.retry_later(
                row,
                error,
                back_to=ActionStatus.PENDING,
                result=ActionResult.CALL_FAILED,
                notification=state.escalation(row, f"the {row.kind.value} call keeps failing"),
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
        state.retry_later(
            row,
            listing,
            back_to=ActionStatus.PENDING,
            result=AWAITING_ACCOUNT,
            notification=state.escalation(row, detail),
            cap=MAX_ACCOUNT_WAIT,
        )
        return True

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
            note = state.escalation(row, detail)
            state.retry_later(row, listing, back_to=_resume_status(row), notification=note)
            return
        current = next((i for i in listing if i.instance_id == row.instance_id), None)
        if done(row.kind, current):
            self._record_listing(row.account, listing, state)
            self._verified(row, state)
            return
        if resumed and self._condition_holds(row, state) is not False:
            if self._cancelled_by_guard(row, state):
                return
            # Not evaluated yet in this process: ``_execute`` puts it back (still marked
            # CALLING) until an evaluation says whether the condition holds.
            self._execute(row, state, resumed=True)
            return
        self._record_listing(row.account, listing, state)
        self._unverified(row, state, current)

    def _record_listing(
        self, account: str, listing: tuple[InstanceSnapshot, ...], state: _Pass
    ) -> None:
        """Record first: the verification's listing is a complete one of the account's
        instances, so a destroyed instance stops billing in the ledger, and leaves ``status``,
        at the verification rather than at the next poll."""
        if account in state.recorded:
            return
        state.recorded.add(account)
        at = state.listed_at.get(account, state.now)
        observation = instance_listing(self.providers[account].name, account, listing, at)
        self.store.record_observation(observation, at)

    def _listing(self, account: str, state: _Pass) -> tuple[InstanceSnapshot, ...] | ProviderError:
        if account not in state.listings:
            provider = self.providers.get(account)
            if provider is None:
                state.listings[account] = PermanentError(f"no provider for account {account}")
            else:
                at = self._instant(state)
                state.listed_at[account] = at
                try:
                    state.listings[account] = provider.list_instances(at)
                except ProviderError as error:
                    # Kept for the pass without its traceback, which holds this frame and so
                    # the pass: a cycle that left the pass and all its listings to the cyclic
                    # collector. Only its kind and text are used.
                    state.listings[account] = error.with_traceback(None)
        return state.listings[account]

    def _verified(self, row: ActionRow, state: _Pass) -> None:
        state.finish(
            row,
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
        recalled: datetime | None = None
        if number >= 1:
            if self._cancelled_by_guard(row, state):
                return
            # Money may still burn: always escalate. Repeat the call only while its condition
            # still holds (a GPU busy again is never killed by a retry).
            holds = self._condition_holds(row, state) is True
            detail = f"provider lists it as {seen}"
            if not holds:
                detail += "; the call is not repeated: its condition no longer holds"
            note = state.escalation(row, detail)
            if holds:
                recalled = self._recall(row, state)
        checks = max(row.attempts - 1, 0)
        state.step(
            row,
            ActionStatus.UNVERIFIED,
            audit_kind="action_unverified",
            message=f"provider still lists it as {seen}",
            notification=note,
            result=ActionResult.UNVERIFIED,
            next_attempt_at=verify_at(state.now, checks, row.created_at, self.safety),
            data={"seen_state": seen, "escalation": number},
            accepted_at=recalled,
        )

    def _recall(self, row: ActionRow, state: _Pass) -> datetime | None:
        """Repeat the provider call for a kill that did not take (after the escalation delay);
        the instant the provider accepted it, None when it did not."""
        provider = self.providers.get(row.account)
        if provider is None:
            return None
        accepted_at = self._instant(state)
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
            return None
        return accepted_at


def _call(provider: Provider, row: ActionRow) -> None:
    if row.kind is ActionKind.STOP:
        provider.stop(row.instance_id)
    else:
        provider.destroy(row.instance_id)


def _verifies(row: ActionRow) -> bool:
    """Whether this pass verifies ``row`` (see :meth:`Executor._handle`) rather than calls."""
    origin = row.claimed_from or ActionStatus.PENDING
    return origin in (ActionStatus.CALLED, ActionStatus.UNVERIFIED) or row.result == CALLING


def _resume_status(row: ActionRow) -> ActionStatus:
    """Where an action goes back to when this pass could not finish it."""
    if row.claimed_from in (ActionStatus.CALLED, ActionStatus.UNVERIFIED):
        return row.claimed_from
    return ActionStatus.UNVERIFIED if row.result == CALLING else ActionStatus.PENDING
