"""Recording what a poll or a probe saw (functions over an open session; the Store wraps each in
one transaction)."""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from datetime import datetime

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from watchdog_gpu.model import (
    AccountObservation,
    GpuSample,
    InstanceSnapshot,
    InstanceState,
    ProbeOutcome,
    VolumeSnapshot,
)
from watchdog_gpu.store.convert import gpu_sample_row
from watchdog_gpu.store.schema import (
    Account,
    AccountSnapshotRow,
    Instance,
    InstanceSpan,
    PinnedHostKey,
    ProbeOutcomeRow,
    SshKey,
    Volume,
    VolumeSpan,
)

logger = logging.getLogger(__name__)

# raw_state recorded for an instance that a complete listing no longer contains.
ABSENT_RAW_STATE = "(absent from listing)"
MAX_ERROR_MESSAGE_LENGTH = 500


def upsert_account(session: Session, name: str, provider: str, now: datetime) -> Account:
    """The account row for ``name``, created on first sight."""
    account = session.get(Account, name)
    if account is None:
        account = Account(name=name, provider=provider, first_seen=now)
        session.add(account)
        session.flush()
    elif account.provider != provider:
        account.provider = provider
    return account


def record_observation(session: Session, observation: AccountObservation, now: datetime) -> None:
    """Record one complete poll of one account (see ``Store.record_observation``)."""
    snapshot = observation.account
    account = upsert_account(session, snapshot.account, snapshot.provider, now)
    # A part listed in ``problems`` failed this poll: it is empty, not a complete listing, so
    # it must not mark anything gone (and an all-None account snapshot would hide the last
    # known balance).
    problems = observation.problems
    if "account" not in problems:
        session.add(
            AccountSnapshotRow(
                account=snapshot.account,
                provider=snapshot.provider,
                observed_at=snapshot.observed_at,
                balance_usd=snapshot.balance_usd,
                spend_usd_per_hour=snapshot.spend_usd_per_hour,
                spend_limit_usd_per_hour=snapshot.spend_limit_usd_per_hour,
                autopay_enabled=snapshot.autopay_enabled,
            )
        )
    _record_instances(session, snapshot.account, observation.instances, now)
    if "volumes" not in problems:
        _record_volumes(session, snapshot.account, observation.volumes, now)
    if "ssh_keys" not in problems:
        _record_ssh_keys(session, observation, now)
    account.last_poll_ok_at = now
    account.last_poll_error_kind = None
    account.last_poll_error_at = None
    account.last_poll_error_message = None


def record_poll_failure(
    session: Session, account: str, provider: str, *, error_kind: str, message: str, now: datetime
) -> None:
    """Remember that polling ``account`` failed; what was recorded before stays as it was."""
    row = upsert_account(session, account, provider, now)
    row.last_poll_error_kind = error_kind
    row.last_poll_error_at = now
    row.last_poll_error_message = message[:MAX_ERROR_MESSAGE_LENGTH]


def record_probe(session: Session, outcome: ProbeOutcome) -> None:
    """The probe outcome and its samples."""
    session.add(
        ProbeOutcomeRow(
            account=outcome.account,
            instance_id=outcome.instance_id,
            at=outcome.at,
            status=outcome.status.value,
            duration_seconds=outcome.duration_seconds,
            detail=outcome.detail,
            sample_count=len(outcome.samples),
            interactive_login=outcome.interactive_login,
        )
    )
    record_samples(session, outcome.samples)


def record_samples(session: Session, samples: Iterable[GpuSample]) -> None:
    session.add_all(gpu_sample_row(sample) for sample in samples)


def _same_rate(first: float | None, second: float | None) -> bool:
    if first is None or second is None:
        return first is second
    return math.isclose(first, second, rel_tol=1e-9, abs_tol=1e-12)


def _unique_by_id(
    account: str, snapshots: Iterable[InstanceSnapshot]
) -> dict[str, InstanceSnapshot]:
    by_id: dict[str, InstanceSnapshot] = {}
    for snapshot in snapshots:
        if snapshot.account != account:
            raise ValueError(
                f"instance {snapshot.instance_id} belongs to account {snapshot.account!r}, "
                f"not {account!r}"
            )
        if snapshot.instance_id in by_id:
            # A provider listing an id twice is a provider bug; the later entry wins.
            logger.warning(
                "duplicate instance in listing account=%s instance=%s",
                account,
                snapshot.instance_id,
            )
        by_id[snapshot.instance_id] = snapshot
    return by_id


def _current_instance_spans(session: Session, account: str) -> dict[int, InstanceSpan]:
    latest_ids = (
        select(func.max(InstanceSpan.id))
        .join(Instance, Instance.id == InstanceSpan.instance_pk)
        .where(Instance.account == account)
        .group_by(InstanceSpan.instance_pk)
    )
    spans = session.scalars(select(InstanceSpan).where(InstanceSpan.id.in_(latest_ids)))
    return {span.instance_pk: span for span in spans}


def _record_instances(
    session: Session, account: str, snapshots: Iterable[InstanceSnapshot], now: datetime
) -> None:
    listed = _unique_by_id(account, snapshots)
    existing = {
        row.instance_id: row
        for row in session.scalars(select(Instance).where(Instance.account == account))
    }
    current_spans = _current_instance_spans(session, account)
    new_rows: list[tuple[Instance, InstanceSnapshot]] = []
    for instance_id, snapshot in listed.items():
        row = existing.get(instance_id)
        if row is None:
            row = Instance(
                account=account, instance_id=instance_id, first_seen=now, state_since=now
            )
            _copy_snapshot(row, snapshot, now)
            session.add(row)
            new_rows.append((row, snapshot))
            continue
        _observe_existing(session, row, current_spans.get(row.id), snapshot, now)
    for instance_id, row in existing.items():
        if instance_id not in listed and row.state != InstanceState.GONE.value:
            _mark_gone_by_absence(session, row, current_spans.get(row.id), now)
    if new_rows:
        session.flush()  # assigns the new instances' ids for their first spans
        for row, snapshot in new_rows:
            session.add(_new_span(row.id, snapshot.state, snapshot.raw_state, snapshot, now))


def _observe_existing(
    session: Session,
    row: Instance,
    span: InstanceSpan | None,
    snapshot: InstanceSnapshot,
    now: datetime,
) -> None:
    state_changed = row.state != snapshot.state.value
    if (
        span is not None
        and span.state == snapshot.state.value
        and _same_rate(span.compute_usd_per_hour, snapshot.compute_usd_per_hour)
        and _same_rate(span.storage_usd_per_hour, snapshot.storage_usd_per_hour)
    ):
        span.last_seen = max(span.last_seen, now)
    else:
        session.add(_new_span(row.id, snapshot.state, snapshot.raw_state, snapshot, now))
    if state_changed:
        row.state_since = now
        if snapshot.state is InstanceState.GONE:
            _forget_host_key(session, row.account, row.instance_id)
    _copy_snapshot(row, snapshot, now)


def _mark_gone_by_absence(
    session: Session, row: Instance, span: InstanceSpan | None, now: datetime
) -> None:
    """A complete listing no longer has the instance: it is gone (it bills nothing any more)."""
    logger.info("instance absent from listing account=%s instance=%s", row.account, row.instance_id)
    session.add(
        InstanceSpan(
            instance_pk=row.id,
            state=InstanceState.GONE.value,
            raw_state=ABSENT_RAW_STATE,
            compute_usd_per_hour=span.compute_usd_per_hour if span else row.compute_usd_per_hour,
            storage_usd_per_hour=span.storage_usd_per_hour if span else row.storage_usd_per_hour,
            first_seen=now,
            last_seen=now,
        )
    )
    row.state = InstanceState.GONE.value
    row.raw_state = ABSENT_RAW_STATE
    row.observed_at = now
    row.last_seen = now
    row.state_since = now
    _forget_host_key(session, row.account, row.instance_id)


def _new_span(
    instance_pk: int,
    state: InstanceState,
    raw_state: str,
    snapshot: InstanceSnapshot,
    now: datetime,
) -> InstanceSpan:
    return InstanceSpan(
        instance_pk=instance_pk,
        state=state.value,
        raw_state=raw_state,
        compute_usd_per_hour=snapshot.compute_usd_per_hour,
        storage_usd_per_hour=snapshot.storage_usd_per_hour,
        first_seen=now,
        last_seen=now,
    )


def _copy_snapshot(row: Instance, snapshot: InstanceSnapshot, now: datetime) -> None:
    row.provider = snapshot.provider
    row.name = snapshot.name
    row.state = snapshot.state.value
    row.raw_state = snapshot.raw_state
    row.observed_at = snapshot.observed_at
    row.interruptible = snapshot.interruptible
    row.compute_usd_per_hour = snapshot.compute_usd_per_hour
    row.storage_usd_per_hour = snapshot.storage_usd_per_hour
    row.disk_gb = snapshot.disk_gb
    row.gpu_name = snapshot.gpu_name
    row.gpu_count = snapshot.gpu_count
    row.ssh_host = snapshot.ssh_host
    row.ssh_port = snapshot.ssh_port
    row.ssh_user = snapshot.ssh_user
    row.created_at = snapshot.created_at
    row.started_at = snapshot.started_at
    util = snapshot.provider_gpu_util_percent
    row.provider_gpu_util_percent = None if util is None else list(util)
    row.public_ports = list(snapshot.public_ports)
    row.labels = dict(snapshot.labels)
    row.last_seen = now


def _forget_host_key(session: Session, account: str, instance_id: str) -> None:
    # A gone instance's id is never reused; its pinned key is only clutter now.
    session.execute(
        delete(PinnedHostKey).where(
            PinnedHostKey.account == account, PinnedHostKey.instance_id == instance_id
        )
    )


def _record_volumes(
    session: Session, account: str, snapshots: Iterable[VolumeSnapshot], now: datetime
) -> None:
    listed = {snapshot.volume_id: snapshot for snapshot in snapshots}
    existing = {
        row.volume_id: row
        for row in session.scalars(select(Volume).where(Volume.account == account))
    }
    latest_ids = (
        select(func.max(VolumeSpan.id))
        .join(Volume, Volume.id == VolumeSpan.volume_pk)
        .where(Volume.account == account)
        .group_by(VolumeSpan.volume_pk)
    )
    current_spans = {
        span.volume_pk: span
        for span in session.scalars(select(VolumeSpan).where(VolumeSpan.id.in_(latest_ids)))
    }
    new_rows: list[Volume] = []
    for volume_id, snapshot in listed.items():
        row = existing.get(volume_id)
        if row is None:
            row = Volume(account=account, volume_id=volume_id, first_seen=now)
            _copy_volume(row, snapshot, now)
            session.add(row)
            new_rows.append(row)
            continue
        span = current_spans.get(row.id)
        if (
            span is not None
            and span.attached is snapshot.attached
            and _same_rate(span.usd_per_hour, snapshot.usd_per_hour)
            and row.gone_at is None
        ):
            span.last_seen = max(span.last_seen, now)
        else:
            session.add(_new_volume_span(row.id, snapshot, now))
        _copy_volume(row, snapshot, now)
    for volume_id, row in existing.items():
        if volume_id not in listed and row.gone_at is None:
            row.gone_at = now
            row.detached_since = None
    if new_rows:
        session.flush()
        for row in new_rows:
            session.add(_new_volume_span(row.id, listed[row.volume_id], now))


def _new_volume_span(volume_pk: int, snapshot: VolumeSnapshot, now: datetime) -> VolumeSpan:
    return VolumeSpan(
        volume_pk=volume_pk,
        attached=snapshot.attached,
        usd_per_hour=snapshot.usd_per_hour,
        first_seen=now,
        last_seen=now,
    )


def _copy_volume(row: Volume, snapshot: VolumeSnapshot, now: datetime) -> None:
    was_detached = row.gone_at is None and row.attached is False and row.detached_since is not None
    if snapshot.attached is False:
        row.detached_since = row.detached_since if was_detached else now
    else:
        # Attached, or the API does not say: either way not known to be detached.
        row.detached_since = None
    row.provider = snapshot.provider
    row.name = snapshot.name
    row.observed_at = snapshot.observed_at
    row.size_gb = snapshot.size_gb
    row.usd_per_hour = snapshot.usd_per_hour
    row.attached = snapshot.attached
    row.created_at = snapshot.created_at
    row.last_seen = now
    row.gone_at = None


def _record_ssh_keys(session: Session, observation: AccountObservation, now: datetime) -> None:
    account = observation.account.account
    listed = {key.key_id: key for key in observation.ssh_keys}
    existing = {
        row.key_id: row for row in session.scalars(select(SshKey).where(SshKey.account == account))
    }
    for key_id, key in listed.items():
        row = existing.get(key_id)
        if row is None:
            row = SshKey(account=account, key_id=key_id, first_seen=now)
            session.add(row)
        row.provider = key.provider
        row.name = key.name
        row.public_key = key.public_key
        row.last_seen = now
    gone = [row.id for key_id, row in existing.items() if key_id not in listed]
    if gone:
        session.execute(delete(SshKey).where(SshKey.id.in_(gone)))
