"""How the executor records what happened: each step of an action one store transaction that
moves its status and appends its audit event and notification (record first, act second)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

from watchdog_gpu.call_policy import MAX_RETRY_BACKOFF, CallTimes, escalation_number, retry_at
from watchdog_gpu.errors import ProviderError
from watchdog_gpu.model import (
    AccountObservation,
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
from watchdog_gpu.reports import StepOutcome
from watchdog_gpu.store.rows import ActionRow

log = logging.getLogger("watchdog_gpu.executor")  # one logger for the executor's lines


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
        accepted_at: datetime | None = None,
    ) -> bool: ...

    def instance_snapshot(self, account: str, instance_id: str) -> InstanceSnapshot | None: ...

    def record_observation(self, observation: AccountObservation, now: datetime) -> None: ...

    def get_notification(self, key: str) -> object | None: ...

    def forget_host_key(self, account: str, instance_id: str) -> None: ...


@dataclass
class ActionRecorder:
    """One pass's record at ``now``: the steps written and the outcomes they reached."""

    store: ActionStore
    times: CallTimes
    now: datetime
    outcomes: list[StepOutcome] = field(default_factory=list)

    def step(
        self,
        row: ActionRow,
        new_status: ActionStatus,
        *,
        audit_kind: str,
        message: str,
        notification: PlannedNotification | None = None,
        result: ActionResult | None = None,
        last_error: str | None = None,
        next_attempt_at: datetime | None = None,
        data: Mapping[str, str | int | float | bool | None] | None = None,
        accepted_at: datetime | None = None,
    ) -> None:
        moved = self.store.record_action_step(
            row.idempotency_key,
            ActionStatus.CLAIMED,
            new_status,
            self.now,
            audit_kind=audit_kind,
            message=message,
            data={"action": row.kind.value, "dry_run": row.dry_run, **(data or {})},
            notification=notification,
            result=result,
            last_error=last_error,
            next_attempt_at=next_attempt_at,
            accepted_at=accepted_at,
        )
        if moved:
            self.outcomes.append(
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

    def finish(
        self,
        row: ActionRow,
        new_status: ActionStatus,
        outcome: ActionOutcome,
        *,
        audit_kind: str,
        message: str,
        detail: str = "",
        last_error: str | None = None,
    ) -> None:
        """A step that ends with the action's one result message."""
        note = self.result_note(row, outcome, detail)
        self.step(
            row,
            new_status,
            audit_kind=audit_kind,
            message=message,
            notification=note,
            result=ActionResult(outcome.value),
            last_error=last_error,
        )

    def escalation(
        self, row: ActionRow, detail: str, *, called: bool = True
    ) -> PlannedNotification | None:
        """The escalation due now (see :func:`escalation_number`), counted from when the action
        was planned (its first call attempt), whatever the provider answers or lists: a kill
        that cannot be confirmed is never silent. None before the first. ``called=False``: the
        executor holds the call (the listing at the call), and the message says so."""
        after = self.times.escalate_unverified_after
        number = escalation_number(self.now - row.created_at, after)
        if number < 1:
            return None
        return render_escalation(
            row_subject(row),
            number=number,
            acted_at=row.created_at,
            now=self.now,
            detail=detail,
            episode_key=episode_key_of(row),
            called=called,
        )

    def fail(self, row: ActionRow, detail: str) -> None:
        self.finish(
            row,
            ActionStatus.FAILED,
            ActionOutcome.FAILED,
            audit_kind="provider_call_failed",
            message=detail,
            detail=detail,
            last_error=detail,
        )

    def retry_later(
        self,
        row: ActionRow,
        error: ProviderError,
        *,
        back_to: ActionStatus,
        result: ActionResult | None = None,
        notification: PlannedNotification | None = None,
        cap: timedelta = MAX_RETRY_BACKOFF,
    ) -> None:
        after = self.times.escalate_unverified_after
        self.step(
            row,
            back_to,
            audit_kind="provider_error",
            message=f"{error.kind}: {error}",
            notification=notification,
            result=result,
            last_error=f"{error.kind}: {error}",
            next_attempt_at=retry_at(self.now, row.attempts, row.created_at, after, cap),
        )

    def cancel(self, row: ActionRow, reason: str) -> None:
        """End the action before (another) provider call, with the episode's resolution."""
        episode = episode_key_of(row)
        note = render_resolution(
            row_subject(row),
            reason=reason,
            now=self.now,
            action_cancelled=True,
            episode_key=episode,
            # The warning is withdrawn: a second withdrawal of the episode needs its own key.
            key=next_notice_key(episode, RESOLUTION, _OutboxKeys(self.store), self.now),
        )
        self.step(
            row,
            ActionStatus.CANCELLED,
            audit_kind="action_cancelled",
            message=f"{row.kind.value} cancelled before the provider call: {reason}",
            notification=note,
            result=ActionResult.CANCELLED,
        )

    def result_note(
        self, row: ActionRow, outcome: ActionOutcome, detail: str
    ) -> PlannedNotification:
        return render_action_result(
            row_subject(row),
            outcome=outcome,
            now=self.now,
            detail=detail,
            episode_key=episode_key_of(row),
        )


@dataclass(frozen=True, slots=True)
class _OutboxKeys:
    """``key in _OutboxKeys(store)``: is a message with that key in the outbox?"""

    store: ActionStore

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.store.get_notification(key) is not None


def episode_key_of(row: ActionRow) -> str:
    """The key the action's messages hang on (``ActionKey.message_episode``): the finding's
    episode key, with ``:dry_run`` kept for a dry run."""
    return ActionKey(row.episode_key, row.kind, row.dry_run).message_episode


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
