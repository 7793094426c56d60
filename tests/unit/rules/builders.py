"""Helpers that build FleetView values for rule and spend tests.

Everything is relative to ``T0`` (a fixed, aware UTC instant) so a test reads as a timeline:
``running(start=at(0), until=at(60))`` is an instance that has run for the first hour.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from watchdog_gpu.fleet import AccountView, FleetView, InstanceView, VolumeView
from watchdog_gpu.model import (
    AccountSnapshot,
    GpuSample,
    InstanceSnapshot,
    InstanceState,
    ProbeOutcome,
    ProbeStatus,
    SampleSource,
    SshKeyRecord,
    StateSpan,
    Verdict,
    VolumeSnapshot,
)

T0 = datetime(2026, 3, 2, 20, 0, tzinfo=UTC)
ACCOUNT = "vast-main"
PROVIDER = "vast"
INSTANCE = "9001"
MINUTE = timedelta(minutes=1)

Metric = float | None
Pattern = Metric | Callable[[datetime, int], Metric]


def at(minutes: float = 0, *, hours: float = 0, days: float = 0) -> datetime:
    """``T0`` plus an offset."""
    return T0 + timedelta(minutes=minutes, hours=hours, days=days)


def span(
    state: InstanceState,
    start: datetime,
    end: datetime,
    *,
    compute: float | None = 0.5,
    storage: float | None = 0.02,
    raw_state: str | None = None,
) -> StateSpan:
    return StateSpan(
        state=state,
        raw_state=raw_state or state.value,
        first_seen=start,
        last_seen=end,
        compute_usd_per_hour=compute,
        storage_usd_per_hour=storage,
    )


def instance(
    *spans: StateSpan,
    instance_id: str = INSTANCE,
    account: str = ACCOUNT,
    provider: str = PROVIDER,
    name: str | None = None,
    interruptible: bool = False,
    gpu_count: int | None = 1,
    disk_gb: float | None = 50.0,
    started_at: datetime | None = None,
    samples: Iterable[GpuSample] = (),
    probes: Iterable[ProbeOutcome] = (),
    public_ports: tuple[int, ...] = (),
    first_seen: datetime | None = None,
    billed_from: datetime | None = None,
) -> InstanceView:
    """An instance whose latest snapshot is its last span (state, rates, ``last_seen``);
    ``billed_from`` is the ledger's anchor (what the store records at the first sighting)."""
    assert spans, "an instance needs at least one span"
    last = spans[-1]
    latest = InstanceSnapshot(
        provider=provider,
        account=account,
        instance_id=instance_id,
        name=name or f"job-{instance_id}",
        state=last.state,
        raw_state=last.raw_state,
        observed_at=last.last_seen,
        interruptible=interruptible,
        compute_usd_per_hour=last.compute_usd_per_hour,
        storage_usd_per_hour=last.storage_usd_per_hour,
        disk_gb=disk_gb,
        gpu_name="RTX 4090",
        gpu_count=gpu_count,
        ssh_host="127.0.0.1",
        ssh_port=22,
        started_at=started_at,
        public_ports=public_ports,
    )
    return InstanceView(
        latest=latest,
        first_seen=first_seen or spans[0].first_seen,
        spans=tuple(spans),
        samples=tuple(sorted(samples, key=lambda s: (s.at, s.gpu_index))),
        probes=tuple(sorted(probes, key=lambda p: p.at)),
        billed_from=billed_from,
    )


def running(
    start: datetime,
    until: datetime,
    *,
    compute: float | None = 0.5,
    storage: float | None = 0.02,
    **kwargs: Any,
) -> InstanceView:
    """An instance running from ``start``, last seen at ``until`` (``kwargs`` go to
    :func:`instance`)."""
    only = span(InstanceState.RUNNING, start, until, compute=compute, storage=storage)
    return instance(only, **kwargs)


def _value(pattern: Pattern, moment: datetime, gpu: int) -> Metric:
    return pattern(moment, gpu) if callable(pattern) else pattern


def samples(
    start: datetime,
    end: datetime,
    *,
    every: timedelta = MINUTE,
    gpus: Sequence[int] = (0,),
    sm: Pattern = 0.0,
    enc: Pattern = 0.0,
    dec: Pattern = 0.0,
    verdict: Verdict | None = None,
    source: SampleSource = SampleSource.DMON,
    account: str = ACCOUNT,
    instance_id: str = INSTANCE,
) -> list[GpuSample]:
    """A sample per GPU every ``every`` from ``start`` to ``end`` inclusive.

    ``sm``/``enc``/``dec`` are a value or a function of (instant, gpu). The recorded verdict is
    what the probe would record with threshold 0 (busy if any metric > 0, unknown when ``sm`` is
    missing, idle otherwise) unless ``verdict`` overrides it (e.g. MIG with processes: busy).
    """
    result: list[GpuSample] = []
    moment = start
    while moment <= end:
        for gpu in gpus:
            values = (_value(sm, moment, gpu), _value(enc, moment, gpu), _value(dec, moment, gpu))
            recorded = verdict
            if recorded is None:
                if any(v is not None and v > 0 for v in values):
                    recorded = Verdict.BUSY
                elif values[0] is None:
                    recorded = Verdict.UNKNOWN
                else:
                    recorded = Verdict.IDLE
            result.append(
                GpuSample(
                    account=account,
                    instance_id=instance_id,
                    at=moment,
                    gpu_index=gpu,
                    verdict=recorded,
                    source=source,
                    sm=values[0],
                    mem=0.0 if values[0] is not None else None,
                    enc=values[1],
                    dec=values[2],
                )
            )
        moment += every
    return result


def probe(
    moment: datetime,
    status: ProbeStatus = ProbeStatus.OK,
    *,
    interactive_login: bool | None = None,
    detail: str = "",
    account: str = ACCOUNT,
    instance_id: str = INSTANCE,
) -> ProbeOutcome:
    return ProbeOutcome(
        account=account,
        instance_id=instance_id,
        at=moment,
        status=status,
        duration_seconds=1.5,
        detail=detail,
        interactive_login=interactive_login,
    )


def probes_every(
    start: datetime, end: datetime, status: ProbeStatus, every: timedelta = MINUTE
) -> list[ProbeOutcome]:
    result = []
    moment = start
    while moment <= end:
        result.append(probe(moment, status))
        moment += every
    return result


def account_view(
    account: str = ACCOUNT,
    provider: str = PROVIDER,
    *,
    balance: float | None = None,
    spend_rate: float | None = None,
    autopay: bool | None = None,
    observed_at: datetime = T0,
) -> AccountView:
    snapshot = AccountSnapshot(
        provider=provider,
        account=account,
        observed_at=observed_at,
        balance_usd=balance,
        spend_usd_per_hour=spend_rate,
        autopay_enabled=autopay,
    )
    return AccountView(
        account=account, provider=provider, latest=snapshot, last_poll_ok_at=observed_at
    )


def volume(
    volume_id: str,
    *,
    detached_since: datetime | None,
    account: str = ACCOUNT,
    provider: str = "runpod",
    size_gb: float | None = 100.0,
    usd_per_hour: float | None = 0.01,
    first_seen: datetime = T0,
    observed_at: datetime = T0,
) -> VolumeView:
    snapshot = VolumeSnapshot(
        provider=provider,
        account=account,
        volume_id=volume_id,
        name=f"vol-{volume_id}",
        observed_at=observed_at,
        size_gb=size_gb,
        usd_per_hour=usd_per_hour,
        attached=detached_since is None,
    )
    return VolumeView(latest=snapshot, first_seen=first_seen, detached_since=detached_since)


def ssh_key(key_id: str, public_key: str, *, account: str = ACCOUNT) -> SshKeyRecord:
    return SshKeyRecord(
        provider=PROVIDER,
        account=account,
        key_id=key_id,
        name=f"key-{key_id}",
        public_key=public_key,
    )


def fleet(
    now: datetime,
    *instances: InstanceView,
    accounts: Iterable[AccountView] = (),
    volumes: Iterable[VolumeView] = (),
    ssh_keys: Iterable[SshKeyRecord] = (),
) -> FleetView:
    return FleetView(
        now=now,
        instances={view.latest.ref.key: view for view in instances},
        accounts={view.account: view for view in accounts},
        volumes=tuple(volumes),
        ssh_keys=tuple(ssh_keys),
    )
