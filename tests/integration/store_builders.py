"""Small builders of domain values for the store's tests."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

from watchdog_gpu.model import (
    AccountObservation,
    AccountSnapshot,
    ActionKind,
    GpuSample,
    InstanceSnapshot,
    InstanceState,
    PlannedAction,
    PlannedNotification,
    ProbeOutcome,
    ProbeStatus,
    Severity,
    SshKeyRecord,
    Verdict,
    VolumeSnapshot,
)

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
ACCOUNT = "vast-main"
PROVIDER = "vast"


def minutes(count: float) -> timedelta:
    return timedelta(minutes=count)


def instance(
    instance_id: str,
    state: InstanceState = InstanceState.RUNNING,
    *,
    at: datetime = T0,
    compute: float | None = 0.50,
    storage: float | None = 0.02,
    account: str = ACCOUNT,
    name: str | None = None,
    raw_state: str | None = None,
) -> InstanceSnapshot:
    return InstanceSnapshot(
        provider=PROVIDER,
        account=account,
        instance_id=instance_id,
        name=name or f"job-{instance_id}",
        state=state,
        raw_state=raw_state or state.value,
        observed_at=at,
        interruptible=True,
        compute_usd_per_hour=compute,
        storage_usd_per_hour=storage,
        disk_gb=100.0,
        gpu_name="RTX 4090",
        gpu_count=2,
        ssh_host="127.0.0.1",
        ssh_port=2222,
        ssh_user="root",
        created_at=T0 - timedelta(hours=1),
        started_at=T0 - timedelta(minutes=50),
        provider_gpu_util_percent=(12.0, None),
        public_ports=(22, 8888),
        labels={"team": "vision"},
    )


def observation(
    *instances: InstanceSnapshot,
    at: datetime = T0,
    account: str = ACCOUNT,
    balance: float | None = 25.0,
    volumes: tuple[VolumeSnapshot, ...] = (),
    ssh_keys: tuple[SshKeyRecord, ...] = (),
    problems: Mapping[str, str] | None = None,
) -> AccountObservation:
    return AccountObservation(
        account=AccountSnapshot(
            provider=PROVIDER,
            account=account,
            observed_at=at,
            balance_usd=balance,
            spend_usd_per_hour=1.04,
            spend_limit_usd_per_hour=None,
            autopay_enabled=False,
        ),
        instances=instances,
        volumes=volumes,
        ssh_keys=ssh_keys,
        problems=problems or {},
    )


def volume(
    volume_id: str, *, attached: bool | None, at: datetime = T0, usd_per_hour: float = 0.01
) -> VolumeSnapshot:
    return VolumeSnapshot(
        provider=PROVIDER,
        account=ACCOUNT,
        volume_id=volume_id,
        name=f"vol-{volume_id}",
        observed_at=at,
        size_gb=50.0,
        usd_per_hour=usd_per_hour,
        attached=attached,
    )


def ssh_key(key_id: str, public_key: str = "ssh-ed25519 AAAAC3Nza user@host") -> SshKeyRecord:
    return SshKeyRecord(
        provider=PROVIDER,
        account=ACCOUNT,
        key_id=key_id,
        name=f"key-{key_id}",
        public_key=public_key,
    )


def sample(instance_id: str, at: datetime, gpu_index: int = 0, sm: float | None = 0.0) -> GpuSample:
    verdict = Verdict.UNKNOWN if sm is None else Verdict.BUSY if sm > 0 else Verdict.IDLE
    return GpuSample(
        account=ACCOUNT,
        instance_id=instance_id,
        at=at,
        gpu_index=gpu_index,
        verdict=verdict,
        sm=sm,
        mem=1.0,
        enc=0.0,
        dec=0.0,
    )


def probe(instance_id: str, at: datetime, *samples: GpuSample) -> ProbeOutcome:
    return ProbeOutcome(
        account=ACCOUNT,
        instance_id=instance_id,
        at=at,
        status=ProbeStatus.OK,
        duration_seconds=1.5,
        detail="",
        samples=samples,
        interactive_login=False,
    )


def planned_action(
    key: str,
    *,
    at: datetime = T0,
    instance_id: str = "101",
    dry_run: bool = False,
    episode_key: str | None = None,
) -> PlannedAction:
    """An idle_gpu destroy keyed ``key``, of ``episode_key`` (by default the key itself)."""
    return PlannedAction(
        idempotency_key=key,
        account=ACCOUNT,
        instance_id=instance_id,
        rule="idle_gpu",
        kind=ActionKind.DESTROY,
        dry_run=dry_run,
        reason="every GPU idle for 30 minutes",
        planned_at=at,
        episode_key=key if episode_key is None else episode_key,
        evidence={"idle_minutes": 31, "coverage": 0.97, "gpu": "RTX 4090", "armed": True},
        usd_per_hour_at_stake=0.52,
    )


def planned_notification(
    key: str, *, at: datetime = T0, severity: Severity = Severity.WARNING
) -> PlannedNotification:
    return PlannedNotification(
        idempotency_key=key,
        severity=severity,
        title=f"title {key}",
        body=f"body {key}",
        created_at=at,
        rule="idle_gpu",
        account=ACCOUNT,
        instance_id="101",
    )
