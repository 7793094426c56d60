"""Conversions between table rows and the domain's frozen values.

Each converter reads its row by attribute name, so it takes an ORM object or a Core ``Row`` of the
same table's columns alike (the hot read paths select columns: building ORM objects costs more).
No database library is imported at run time.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from watchdog_gpu.fleet import (
    AcceptedCall,
    AccountView,
    InstanceView,
    Protection,
    ProtectionKind,
    RatedSpan,
    Snooze,
    VolumeLedger,
    VolumeView,
)
from watchdog_gpu.model import (
    AccountSnapshot,
    ActionKind,
    ActionResult,
    ActionStatus,
    GpuSample,
    InstanceSnapshot,
    InstanceState,
    ProbeOutcome,
    Severity,
    SshKeyRecord,
    StateSpan,
    VolumeSnapshot,
)
from watchdog_gpu.store.rows import (
    ActionRow,
    AuditEvent,
    FindingRecord,
    InstanceRecord,
    Leader,
    NotificationRow,
)
from watchdog_gpu.store.values import JsonScalar

if TYPE_CHECKING:
    from sqlalchemy import Row

    from watchdog_gpu.store.schema import (
        Account,
        AccountSnapshotRow,
        ActionOutboxRow,
        AuditEventRow,
        FindingRow,
        Instance,
        InstanceSpan,
        LeadershipRow,
        NotificationOutboxRow,
        ProtectionRow,
        SnoozeRow,
        SshKey,
        Volume,
        VolumeSpan,
    )

_STATES = {state.value: state for state in InstanceState}


def instance_state(value: str) -> InstanceState:
    """The state stored as ``value``; a value this version does not know reads as unknown."""
    return _STATES.get(value, InstanceState.UNKNOWN)


def instance_snapshot(row: Instance | Row[Any]) -> InstanceSnapshot:
    util = row.provider_gpu_util_percent
    return InstanceSnapshot(
        provider=row.provider,
        account=row.account,
        instance_id=row.instance_id,
        name=row.name,
        state=instance_state(row.state),
        raw_state=row.raw_state,
        observed_at=row.observed_at,
        interruptible=row.interruptible,
        compute_usd_per_hour=row.compute_usd_per_hour,
        storage_usd_per_hour=row.storage_usd_per_hour,
        disk_gb=row.disk_gb,
        gpu_name=row.gpu_name,
        gpu_count=row.gpu_count,
        ssh_host=row.ssh_host,
        ssh_port=row.ssh_port,
        ssh_user=row.ssh_user,
        created_at=row.created_at,
        started_at=row.started_at,
        provider_gpu_util_percent=(
            None if util is None else tuple(None if v is None else float(v) for v in util)
        ),
        public_ports=tuple(int(port) for port in row.public_ports),
        labels={str(key): str(value) for key, value in row.labels.items()},
    )


def instance_record(row: Instance | Row[Any]) -> InstanceRecord:
    return InstanceRecord(
        snapshot=instance_snapshot(row),
        first_seen=row.first_seen,
        last_seen=row.last_seen,
        state_since=row.state_since,
    )


def instance_view(
    row: Instance | Row[Any],
    spans: Sequence[StateSpan],
    samples: Sequence[GpuSample],
    probes: Sequence[ProbeOutcome],
    accepted_call: AcceptedCall | None = None,
) -> InstanceView:
    return InstanceView(
        latest=instance_snapshot(row),
        first_seen=row.first_seen,
        spans=tuple(spans),
        samples=samples,
        probes=tuple(probes),
        billed_from=row.billed_from,
        accepted_call=accepted_call,
    )


def volume_ledgers(
    rows: Iterable[Volume | Row[Any]], span_rows: Iterable[VolumeSpan | Row[Any]]
) -> tuple[VolumeLedger, ...]:
    """Each volume row with its rate runs (rows of ``volume_spans``, in order)."""
    spans: dict[int, list[RatedSpan]] = defaultdict(list)
    for span in span_rows:
        spans[span.volume_pk].append(RatedSpan(span.first_seen, span.last_seen, span.usd_per_hour))
    return tuple(
        VolumeLedger(row.account, row.volume_id, tuple(spans.get(row.id, ())), row.gone_at)
        for row in rows
    )


def instance_views(
    rows: Iterable[Instance | Row[Any]],
    span_rows: Iterable[InstanceSpan | Row[Any]],
    samples: Mapping[tuple[str, str], Sequence[GpuSample]],
    probes: Mapping[tuple[str, str], Sequence[ProbeOutcome]],
    accepted: Mapping[tuple[str, str], AcceptedCall] | None = None,
) -> dict[str, InstanceView]:
    """The fleet view's instances ("account/instance_id" → view): each instance row with its
    spans (rows of ``instance_spans``, in order), samples, probe outcomes and latest confirmed
    accepted call (by instance)."""
    accepted = accepted or {}
    spans: dict[int, list[StateSpan]] = defaultdict(list)
    for span in span_rows:
        spans[span.instance_pk].append(state_span(span))
    views: dict[str, InstanceView] = {}
    for row in rows:
        key = (row.account, row.instance_id)
        views[f"{row.account}/{row.instance_id}"] = instance_view(
            row,
            spans.get(row.id, ()),
            samples.get(key) or (),
            probes.get(key, ()),
            accepted.get(key),
        )
    return views


def state_span(row: InstanceSpan | Row[Any]) -> StateSpan:
    return StateSpan(
        state=instance_state(row.state),
        raw_state=row.raw_state,
        first_seen=row.first_seen,
        last_seen=row.last_seen,
        compute_usd_per_hour=row.compute_usd_per_hour,
        storage_usd_per_hour=row.storage_usd_per_hour,
    )


def account_snapshot(row: AccountSnapshotRow | Row[Any]) -> AccountSnapshot:
    return AccountSnapshot(
        provider=row.provider,
        account=row.account,
        observed_at=row.observed_at,
        balance_usd=row.balance_usd,
        spend_usd_per_hour=row.spend_usd_per_hour,
        spend_limit_usd_per_hour=row.spend_limit_usd_per_hour,
        autopay_enabled=row.autopay_enabled,
    )


def account_view(
    account: Account | Row[Any] | None,
    name: str,
    provider: str,
    snapshot: AccountSnapshotRow | Row[Any] | None,
) -> AccountView:
    return AccountView(
        account=name,
        provider=provider,
        latest=account_snapshot(snapshot) if snapshot is not None else None,
        last_poll_ok_at=account.last_poll_ok_at if account else None,
        last_poll_error_kind=account.last_poll_error_kind if account else None,
        last_poll_error_at=account.last_poll_error_at if account else None,
        first_seen=account.first_seen if account else None,
    )


def volume_view(row: Volume | Row[Any]) -> VolumeView:
    return VolumeView(
        latest=volume_snapshot(row),
        first_seen=row.first_seen,
        detached_since=row.detached_since,
    )


def volume_snapshot(row: Volume | Row[Any]) -> VolumeSnapshot:
    return VolumeSnapshot(
        provider=row.provider,
        account=row.account,
        volume_id=row.volume_id,
        name=row.name,
        observed_at=row.observed_at,
        size_gb=row.size_gb,
        usd_per_hour=row.usd_per_hour,
        attached=row.attached,
        created_at=row.created_at,
    )


def ssh_key(row: SshKey | Row[Any]) -> SshKeyRecord:
    return SshKeyRecord(
        provider=row.provider,
        account=row.account,
        key_id=row.key_id,
        name=row.name,
        public_key=row.public_key,
    )


def evidence(value: Mapping[str, Any]) -> dict[str, JsonScalar]:
    """An evidence mapping read back from JSON (scalars only, as written)."""
    return {str(key): item for key, item in value.items() if _is_scalar(item)}


def _is_scalar(value: object) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def action_row(row: ActionOutboxRow | Row[Any]) -> ActionRow:
    return ActionRow(
        idempotency_key=row.idempotency_key,
        account=row.account,
        instance_id=row.instance_id,
        rule=row.rule,
        kind=ActionKind(row.kind),
        dry_run=row.dry_run,
        reason=row.reason,
        status=ActionStatus(row.status),
        attempts=row.attempts,
        created_at=row.created_at,
        updated_at=row.updated_at,
        episode_key=row.episode_key,
        evidence=evidence(row.evidence),
        usd_per_hour_at_stake=row.usd_per_hour_at_stake,
        claimed_by=row.claimed_by,
        claimed_at=row.claimed_at,
        claimed_from=ActionStatus(row.claimed_from) if row.claimed_from else None,
        next_attempt_at=row.next_attempt_at,
        result=ActionResult(row.result) if row.result is not None else None,
        last_error=row.last_error,
        accepted_at=row.accepted_at,
    )


def notification_row(row: NotificationOutboxRow | Row[Any]) -> NotificationRow:
    return NotificationRow(
        idempotency_key=row.idempotency_key,
        severity=Severity(row.severity),
        title=row.title,
        body=row.body,
        created_at=row.created_at,
        attempts=row.attempts,
        next_attempt_at=row.next_attempt_at,
        rule=row.rule,
        account=row.account,
        instance_id=row.instance_id,
        delivered_at=row.delivered_at,
        last_error=row.last_error,
    )


def audit_event(row: AuditEventRow | Row[Any]) -> AuditEvent:
    return AuditEvent(
        id=row.id,
        at=row.at,
        kind=row.kind,
        message=row.message,
        account=row.account,
        instance_id=row.instance_id,
        rule=row.rule,
        data=dict(row.data),
    )


def finding_record(row: FindingRow | Row[Any]) -> FindingRecord:
    return FindingRecord(
        episode_key=row.episode_key,
        rule=row.rule,
        account=row.account,
        instance_id=row.instance_id,
        severity=Severity(row.severity),
        action=ActionKind(row.action),
        summary=row.summary,
        episode_started_at=row.episode_started_at,
        due_at=row.due_at,
        first_seen=row.first_seen,
        last_seen=row.last_seen,
        evidence=evidence(row.evidence),
        usd_per_hour_at_stake=row.usd_per_hour_at_stake,
    )


def protection(row: ProtectionRow | Row[Any]) -> Protection:
    return Protection(
        kind=ProtectionKind(row.kind),
        value=row.value,
        account=row.account,
        reason=row.reason,
        created_at=row.created_at,
    )


def snooze(row: SnoozeRow | Row[Any]) -> Snooze:
    return Snooze(
        account=row.account,
        instance_id=row.instance_id,
        until=row.until,
        created_at=row.created_at,
        reason=row.reason,
    )


def leader(row: LeadershipRow | Row[Any]) -> Leader:
    return Leader(node=row.node, epoch=row.epoch, since=row.since, renewed_at=row.renewed_at)
