"""Lambda Cloud payloads into the normalised model (pure).

Facts used, with their sources in ``docs/providers.md`` ("Lambda"): success is
``{"data": ...}``; an instance bills "the moment you launch an instance and the instance passes
health checks" until terminate, whatever it does (no stop, no spot) — so ``booting`` bills no
compute yet; the price is the instance's own ``instance_type.price_cents_per_hour``; local disk
is part of that price, so instance storage bills nothing extra; filesystems bill per GiB used per
month in one-hour increments, a month being **720 hours** ("1,000 GiB continuously for a full
month (720 hours)" at $0.20 is $200.00), for as long as they exist; the docs' example rate,
$0.20/GiB/month, is the one we know; there is no balance endpoint.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from watchdog_gpu.model import (
    AccountSnapshot,
    InstanceSnapshot,
    InstanceState,
    SshKeyRecord,
    VolumeSnapshot,
)
from watchdog_gpu.providers.parsing.common import (
    StateTable,
    as_list,
    as_object,
    broken_payload,
    describe,
    get_bool,
    get_id,
    get_int,
    get_money,
    get_str,
    monthly_gb_rate_to_hourly,
    parse_iso_datetime,
)

PROVIDER = "lambda"

# Lambda's console shows `ssh ubuntu@<ip>` for its Ubuntu images; the API does not name a user.
SSH_USER = "ubuntu"
SSH_PORT = 22

# The billing page's example rate ("might not reflect current pricing"), per GiB used per month.
FILESYSTEM_USD_PER_GIB_MONTH = 0.20
# Lambda prices a filesystem month as 720 hours (its billing page: 1,000 GiB for a month is $200).
LAMBDA_HOURS_PER_MONTH = 720.0
_GIB = 1024**3

LAMBDA_STATES = StateTable(
    PROVIDER,
    {
        "booting": InstanceState.STARTING,
        "active": InstanceState.RUNNING,
        # "unhealthy" failed Lambda's health checks: not up (SkyPilot treats it so), yet it
        # exists until terminate. As UNKNOWN no rule judges its GPUs (a probe reading idle must
        # not terminate it and wipe its local disk) and the unobserved rule alerts on it
        # (docs/providers.md, "Lambda").
        "unhealthy": InstanceState.UNKNOWN,
        # Terminate ends billing; "terminating" is the answer to our own terminate call.
        "terminating": InstanceState.GONE,
        "terminated": InstanceState.GONE,
        # "preempted" is in the enum but undocumented (no spot product): UNKNOWN by fallback.
    },
)


def parse_instances(
    payload: object, *, account: str, now: datetime
) -> tuple[InstanceSnapshot, ...]:
    """Parse ``GET /instances`` (``{"data": [...]}``). Raises ``PermanentError`` when the list
    or an instance id is unreadable."""
    rows = as_list(_data(payload, "instance list"))
    if rows is None:
        raise broken_payload(PROVIDER, "instance list", "'data' is not an array")
    return tuple(parse_instance(row, account=account, now=now) for row in rows)


def parse_instance(row: object, *, account: str, now: datetime) -> InstanceSnapshot:
    """One instance object; only an unreadable ``id`` is fatal (``PermanentError``)."""
    fields = as_object(row)
    if fields is None:
        raise broken_payload(PROVIDER, "instance", f"row is {describe(row)}")
    instance_id = get_id(fields, "id")
    if instance_id is None:
        raise broken_payload(PROVIDER, "instance", "row without a usable 'id'")
    status = fields.get("status")
    state = LAMBDA_STATES.lookup(status)
    instance_type = as_object(fields.get("instance_type")) or {}
    specs = as_object(instance_type.get("specs")) or {}
    cents = get_money(instance_type, "price_cents_per_hour")
    ip = get_str(fields, "ip")
    return InstanceSnapshot(
        provider=PROVIDER,
        account=account,
        instance_id=instance_id,
        name=get_str(fields, "name") or "",
        state=state,
        raw_state=status.strip()[:80] if isinstance(status, str) else describe(status),
        observed_at=now,
        interruptible=False,
        compute_usd_per_hour=_compute_usd_per_hour(status, cents),
        storage_usd_per_hour=0.0,
        disk_gb=get_money(specs, "storage_gib"),
        gpu_name=get_str(instance_type, "gpu_description"),
        gpu_count=get_int(specs, "gpus"),
        ssh_host=ip,
        ssh_port=SSH_PORT if ip else None,
        ssh_user=SSH_USER if ip else None,
        labels=_tags(fields.get("tags")),
    )


def _compute_usd_per_hour(status: object, cents: float | None) -> float | None:
    """The compute rate billed now: nothing while booting (billing begins once the instance
    passes its health checks), else the type's price."""
    if isinstance(status, str) and status.strip().lower() == "booting":
        return 0.0
    return round(cents / 100, 6) if cents is not None else None


def parse_account(*, account: str, now: datetime) -> AccountSnapshot:
    """Lambda is postpaid and has no balance, spend or limit endpoint: everything unknown."""
    return AccountSnapshot(provider=PROVIDER, account=account, observed_at=now)


def parse_file_systems(
    payload: object, *, account: str, now: datetime
) -> tuple[VolumeSnapshot, ...]:
    """Parse ``GET /file-systems``. Size is ``bytes_used`` in GB; the rate bills per GiB used."""
    items = as_list(_data(payload, "file system list"))
    if items is None:
        raise broken_payload(PROVIDER, "file system list", "'data' is not an array")
    volumes = []
    for item in items:
        fields = as_object(item)
        volume_id = get_id(fields, "id") if fields is not None else None
        if fields is None or volume_id is None:
            raise broken_payload(PROVIDER, "file system", "entry without a usable 'id'")
        used = get_money(fields, "bytes_used")
        volumes.append(
            VolumeSnapshot(
                provider=PROVIDER,
                account=account,
                volume_id=volume_id,
                name=get_str(fields, "name") or "",
                observed_at=now,
                size_gb=round(used / 1e9, 3) if used is not None else None,
                usd_per_hour=(
                    monthly_gb_rate_to_hourly(
                        used / _GIB, FILESYSTEM_USD_PER_GIB_MONTH, LAMBDA_HOURS_PER_MONTH
                    )
                    if used is not None
                    else None
                ),
                attached=get_bool(fields, "is_in_use"),
                created_at=parse_iso_datetime(fields.get("created")),
            )
        )
    return tuple(volumes)


def parse_ssh_keys(payload: object, *, account: str) -> tuple[SshKeyRecord, ...]:
    """Parse ``GET /ssh-keys`` (``{"data": [{id, name, public_key}]}``)."""
    items = as_list(_data(payload, "ssh key list"))
    if items is None:
        raise broken_payload(PROVIDER, "ssh key list", "'data' is not an array")
    records = []
    for item in items:
        fields = as_object(item)
        if fields is None:
            raise broken_payload(PROVIDER, "ssh key", f"entry is {describe(item)}")
        public_key = fields.get("public_key")
        records.append(
            SshKeyRecord(
                provider=PROVIDER,
                account=account,
                key_id=get_id(fields, "id") or "",
                name=get_str(fields, "name") or "",
                public_key=public_key.strip() if isinstance(public_key, str) else "",
            )
        )
    return tuple(records)


def parse_terminated_ids(payload: object) -> tuple[str, ...]:
    """The ids in a ``POST /instance-operations/terminate`` answer's ``terminated_instances``."""
    data = as_object(_data(payload, "terminate"))
    rows = as_list(data.get("terminated_instances")) if data is not None else None
    if rows is None:
        raise broken_payload(PROVIDER, "terminate", "no 'terminated_instances' array")
    return tuple(
        instance_id
        for row in rows
        if (fields := as_object(row)) is not None and (instance_id := get_id(fields, "id"))
    )


def error_code(payload: object) -> str | None:
    """The ``error.code`` of a Lambda error envelope (``global/object-does-not-exist`` …)."""
    envelope = as_object(payload)
    error = as_object(envelope.get("error")) if envelope is not None else None
    return get_str(error, "code") if error is not None else None


def _data(payload: object, what: str) -> object:
    envelope = as_object(payload)
    if envelope is None or "data" not in envelope:
        raise broken_payload(PROVIDER, what, f"got {describe(payload)} without 'data'")
    return envelope["data"]


def _tags(value: object) -> Mapping[str, str]:
    tags = {}
    for entry in as_list(value) or []:
        fields = as_object(entry)
        if fields is None:
            continue
        key, tag_value = fields.get("key"), fields.get("value")
        if isinstance(key, str) and key and isinstance(tag_value, str):
            tags[key] = tag_value
    return tags
