"""Vast.ai payloads into the normalised model (pure).

State comes from ``actual_status`` refined by ``intended_status``, ``is_bid`` and the bid against
``min_bid`` (:func:`vast_state`): a bid instance is paused (outbid) only when its bid is known to
lose, never on a guess. Compute $/h is what the contract bills in its current state, never an
offer price. The state table, billing formulas and SSH endpoint, each with its source:
``docs/providers.md``, "Vast.ai" and "SSH endpoints".
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
    as_port,
    broken_payload,
    describe,
    epoch_to_datetime,
    get_bool,
    get_float,
    get_id,
    get_int,
    get_money,
    get_str,
    key_comment,
    monthly_gb_rate_to_hourly,
    seconds_before,
)

PROVIDER = "vast"

# Vast's storage figures are $/GB/month over 720 hours: 10 GB × 0.149333 / 720 = 0.0020741 and
# 10.08 × 0.15 / 720 = 0.0021 in its OpenAPI examples (docs/providers.md, "Vast.ai billing").
VAST_HOURS_PER_MONTH = 720.0

SSH_USER = "root"

VAST_STATES = StateTable(
    PROVIDER,
    {
        "null": InstanceState.STARTING,  # actual_status null: being provisioned
        "created": InstanceState.STARTING,
        "loading": InstanceState.STARTING,  # image pull; GPU not billed yet
        "scheduling": InstanceState.STARTING,  # waiting for its GPU after a start/resume
        "rebooting": InstanceState.STARTING,
        "running": InstanceState.RUNNING,
        "frozen": InstanceState.RUNNING,  # memory kept, GPU still billed
        "stopped": InstanceState.STOPPED,
        "exited": InstanceState.STOPPED,  # container died; running while cur_state = running
        # "unknown" (no heartbeat) and "offline" (host disconnected) fall back to UNKNOWN.
    },
)

# Container states in which Vast does not bill the GPU yet ("GPU charges begin when status
# reaches running"); rebooting keeps its GPU and is counted as billing it.
_GPU_NOT_BILLED_YET = frozenset({"null", "created", "loading", "scheduling"})


def parse_instances(
    payload: object, *, account: str, now: datetime
) -> tuple[InstanceSnapshot, ...]:
    """Parse ``GET /api/v0/instances/`` (``{"instances_found", "instances": [...]}``).

    Raises ``PermanentError`` when the envelope or a row's identity is unreadable: a listing
    with a row silently dropped would make that instance look destroyed.
    """
    rows = _rows(payload, "instance list")
    return tuple(parse_instance(row, account=account, now=now) for row in rows)


def parse_instances_page(
    payload: object, *, account: str, now: datetime
) -> tuple[tuple[InstanceSnapshot, ...], str | None]:
    """Parse one page of ``GET /api/v1/instances/``: its instances and the ``next_token``
    (``None`` on the last page: a null or empty-string token). Raises ``PermanentError`` like
    :func:`parse_instances`."""
    envelope = as_object(payload)
    rows = _rows(payload, "instance page")
    assert envelope is not None  # _rows checked it
    token = envelope.get("next_token")
    if token is not None and not isinstance(token, str):
        raise broken_payload(PROVIDER, "instance page", f"next_token is {describe(token)}")
    instances = tuple(parse_instance(row, account=account, now=now) for row in rows)
    # The official client pages "until next_token is empty": "" ends paging like null.
    return instances, token or None


def parse_instance(row: object, *, account: str, now: datetime) -> InstanceSnapshot:
    """One instance row. Only a missing/unreadable ``id`` is fatal (``PermanentError``); any
    other odd field becomes ``None`` or an ``unknown`` state."""
    fields = as_object(row)
    if fields is None:
        raise broken_payload(PROVIDER, "instance", f"row is {describe(row)}")
    instance_id = get_id(fields, "id")
    if instance_id is None:
        raise broken_payload(PROVIDER, "instance", "row without a usable 'id'")
    interruptible = get_bool(fields, "is_bid") is True
    state, raw_state = _state(fields, interruptible=interruptible)
    storage = _storage_usd_per_hour(fields)
    ssh_host, ssh_port = _ssh_endpoint(fields)
    uptime_minutes = get_float(fields, "uptime_mins")
    return InstanceSnapshot(
        provider=PROVIDER,
        account=account,
        instance_id=instance_id,
        name=get_str(fields, "label") or "",
        state=state,
        raw_state=raw_state,
        observed_at=now,
        interruptible=interruptible,
        compute_usd_per_hour=_compute_usd_per_hour(fields, storage, state),
        storage_usd_per_hour=storage,
        disk_gb=get_money(fields, "disk_space"),
        gpu_name=get_str(fields, "gpu_name"),
        gpu_count=get_int(fields, "num_gpus"),
        ssh_host=ssh_host,
        ssh_port=ssh_port,
        ssh_user=SSH_USER if ssh_host else None,
        created_at=epoch_to_datetime(fields.get("start_date")),
        started_at=(
            seconds_before(now, uptime_minutes * 60) if uptime_minutes is not None else None
        ),
        # Vast's gpu_util is one figure per instance and reads 0.0 when the host misses a report
        # (docs/providers.md, "Capabilities"): it is not a per-GPU signal we can trust, so it is not
        # used.
        provider_gpu_util_percent=None,
        public_ports=_public_ports(fields.get("ports")),
    )


def parse_account(payload: object, *, account: str, now: datetime) -> AccountSnapshot:
    """Parse ``GET /api/v0/users/current/``. The balance is ``credit`` (remaining prepaid $,
    may be negative); Vast reports no spend rate and no spend limit. Auto-pay is on when an
    auto top-up amount is set and a payment method can pay."""
    fields = as_object(payload)
    if fields is None:
        raise broken_payload(PROVIDER, "account", f"got {describe(payload)}")
    return AccountSnapshot(
        provider=PROVIDER,
        account=account,
        observed_at=now,
        balance_usd=get_float(fields, "credit"),
        spend_usd_per_hour=None,
        spend_limit_usd_per_hour=None,
        autopay_enabled=_autopay(fields),
    )


def parse_volumes(payload: object, *, account: str, now: datetime) -> tuple[VolumeSnapshot, ...]:
    """Parse ``GET /api/v0/volumes`` (``{"volumes": [...]}``, a bare array is accepted too)."""
    envelope = as_object(payload)
    items = as_list(envelope.get("volumes")) if envelope is not None else as_list(payload)
    if items is None:
        raise broken_payload(PROVIDER, "volume list", f"got {describe(payload)}")
    volumes = []
    for item in items:
        fields = as_object(item)
        volume_id = get_id(fields, "id") if fields is not None else None
        if fields is None or volume_id is None:
            raise broken_payload(PROVIDER, "volume", "entry without a usable 'id'")
        attached_to = as_list(fields.get("instances"))
        volumes.append(
            VolumeSnapshot(
                provider=PROVIDER,
                account=account,
                volume_id=volume_id,
                name=get_str(fields, "label") or get_str(fields, "name") or "",
                observed_at=now,
                size_gb=get_money(fields, "disk_space"),
                usd_per_hour=_storage_usd_per_hour(fields),
                attached=bool(attached_to) if attached_to is not None else None,
                created_at=epoch_to_datetime(fields.get("start_date")),
            )
        )
    return tuple(volumes)


def parse_ssh_keys(payload: object, *, account: str) -> tuple[SshKeyRecord, ...]:
    """Parse ``GET /api/v0/ssh/``: a bare array (documented) or a ``{"ssh_keys": [...]}``
    envelope (seen in a CLI test); the key text may be named ``key``, ``public_key`` or
    ``ssh_key`` (docs/providers.md, "Sources"). Deleted keys are left out."""
    envelope = as_object(payload)
    items = as_list(envelope.get("ssh_keys")) if envelope is not None else as_list(payload)
    if items is None:
        raise broken_payload(PROVIDER, "ssh key list", f"got {describe(payload)}")
    records = []
    for item in items:
        fields = as_object(item)
        if fields is None:
            raise broken_payload(PROVIDER, "ssh key", f"entry is {describe(item)}")
        record = parse_ssh_key(fields, account=account)
        if record is not None and fields.get("deleted_at") is None:
            records.append(record)
    return tuple(records)


def parse_ssh_key(fields: Mapping[str, object], *, account: str) -> SshKeyRecord | None:
    """One key object (also the ``key`` of ``POST /api/v0/ssh/``'s answer); ``None`` when it
    carries no key text at all."""
    text = next(
        (
            value
            for name in ("key", "public_key", "ssh_key")
            if isinstance(value := fields.get(name), str)
        ),
        None,
    )
    if text is None:
        return None
    key_id = get_id(fields, "id") or ""
    return SshKeyRecord(
        provider=PROVIDER,
        account=account,
        key_id=key_id,
        name=key_comment(text) or key_id,
        public_key=text.strip(),
    )


def failure_of(payload: object) -> tuple[str, str] | None:
    """``(error code, message)`` when a 2xx answer says ``"success": false`` (Vast reports some
    failures with HTTP 200), else ``None``."""
    fields = as_object(payload)
    if fields is None or fields.get("success") is not False:
        return None
    code = get_str(fields, "error") or "unknown_error"
    message = get_str(fields, "msg") or get_str(fields, "message") or code
    return code, message


def is_already_gone(payload: object) -> bool:
    """Whether a destroy answer says the instance did not exist (``no_such_instance`` /
    ``not_found``): for destroy that is success."""
    failure = failure_of(payload)
    return failure is not None and failure[0] in {"no_such_instance", "not_found"}


def _rows(payload: object, what: str) -> list[object]:
    envelope = as_object(payload)
    if envelope is None:
        raise broken_payload(PROVIDER, what, f"got {describe(payload)}")
    failure = failure_of(envelope)
    if failure is not None:
        raise broken_payload(PROVIDER, what, f"success=false: {failure[0]}: {failure[1]}")
    rows = as_list(envelope.get("instances"))
    if rows is None:
        raise broken_payload(
            PROVIDER, what, f"'instances' is {describe(envelope.get('instances'))}"
        )
    return rows


def _state(fields: Mapping[str, object], *, interruptible: bool) -> tuple[InstanceState, str]:
    actual = fields.get("actual_status")
    key = "null" if actual is None else actual
    intended = get_str(fields, "intended_status")
    contract = get_str(fields, "cur_state")
    outbid = _outbid(fields)
    state = vast_state(
        key, intended=intended, interruptible=interruptible, outbid=outbid, contract=contract
    )
    unloading = _unloading(fields)
    if unloading:
        # Destroyed: Vast lists the row until the contract is unloaded (≈ 30 s), as Lambda lists
        # "terminating". Gone, so a destroy is verified and never sent twice.
        state = InstanceState.GONE
    raw = actual.strip() if isinstance(actual, str) else str(key)
    notes = _raw_state_notes(
        raw,
        exited=str(key).strip().lower() == "exited",
        intended=intended,
        contract=contract,
        unloading=unloading,
        outbid=bool(interruptible and outbid),
    )
    if notes:
        raw = f"{raw} ({', '.join(notes)})"
    return state, raw[:80]


def _outbid(fields: Mapping[str, object]) -> bool | None:
    """Whether the bid is below the current minimum, unless Vast parked the instance for a
    fault (its ``status_msg`` an error): then the bid is not why it is off its GPU."""
    outbid = _bid_below_minimum(fields)
    if outbid and status_message_is_error(get_str(fields, "status_msg")):
        return None
    return outbid


def _raw_state_notes(
    raw: str,
    *,
    exited: bool,
    intended: str | None,
    contract: str | None,
    unloading: bool,
    outbid: bool,
) -> list[str]:
    """What the raw state shown beside ``actual_status`` adds: the status Vast intends, the
    contract's state of an exited container, an unloading contract, a losing bid."""
    notes = ["unloading"] if unloading else []
    if intended and intended != raw:
        notes.append(f"intended {intended}")
    if exited and contract and contract != raw:
        notes.append(f"contract {contract}")
    if outbid:
        notes.append("bid < min_bid")
    return notes


def _unloading(fields: Mapping[str, object]) -> bool:
    """Whether the contract is being unloaded: ``cur_state``/``next_state`` ``"unloaded"`` is
    what a destroy leaves (docs/providers.md, "Vast.ai states")."""
    return any(
        (get_str(fields, name) or "").strip().lower() == "unloaded"
        for name in ("cur_state", "next_state")
    )


def vast_state(
    actual: object,
    *,
    intended: str | None,
    interruptible: bool,
    outbid: bool | None,
    contract: str | None = None,
) -> InstanceState:
    """Our state for a Vast row (docs/providers.md, "Vast.ai states").

    ``actual`` is ``actual_status`` (``"null"`` for a null), ``intended`` the
    ``intended_status``, ``contract`` the ``cur_state`` (whether the contract holds its GPU),
    ``outbid`` whether the bid (``dph_base``) is below ``min_bid`` (``None`` when either is
    missing, or when ``status_msg`` reports an error). Only a bid instance whose user still
    wants it running, that is held off its GPU and whose bid is known to lose is paused; an
    ``exited`` container whose contract still runs bills its GPU and is running.
    """
    state = VAST_STATES.lookup(actual)
    status = str(actual).strip().lower()
    if status == "exited" and contract is not None and contract.strip().lower() == "running":
        return InstanceState.RUNNING
    if not interruptible or intended != "running" or outbid is not True:
        return state
    held_off = (state is InstanceState.STOPPED and status == "stopped") or status == "scheduling"
    return InstanceState.PAUSED if held_off else state


# What the official client takes for an error in ``status_msg`` (vastai 1.9.1,
# vastai/cli/commands/machines.py, the self-test's instance poll).
_ERROR_TOKENS = (
    "error",
    "failed",
    "failure",
    "exception",
    "traceback",
    "oci runtime",
    "permission denied",
)


def status_message_is_error(message: str | None) -> bool:
    """Whether a ``status_msg`` reports an error (a host fault, a container that failed)."""
    lowered = (message or "").lower()
    return any(token in lowered for token in _ERROR_TOKENS)


def _bid_below_minimum(fields: Mapping[str, object]) -> bool | None:
    bid = get_money(fields, "dph_base")
    minimum = get_money(fields, "min_bid")
    if bid is None or minimum is None:
        return None
    return bid < minimum


def _storage_usd_per_hour(fields: Mapping[str, object]) -> float | None:
    billed = get_money(fields, "storage_total_cost")
    if billed is not None:
        return billed
    size = get_money(fields, "disk_space")
    rate = get_money(fields, "storage_cost")
    if size is None or rate is None:
        return None
    return monthly_gb_rate_to_hourly(size, rate, VAST_HOURS_PER_MONTH)


def _compute_usd_per_hour(
    fields: Mapping[str, object], storage: float | None, state: InstanceState
) -> float | None:
    """The contract's compute rate, ``dph_total − storage_total_cost`` — and $0 for an
    instance that is starting but not GPU-billed yet (created, loading, scheduling, null):
    starting instances bill their compute rate, and these do not. (Paused and stopped ones keep
    the contract's rate for humans; their state bills none of it.)"""
    actual = fields.get("actual_status")
    key = "null" if actual is None else actual
    if (
        state is InstanceState.STARTING
        and isinstance(key, str)
        and key.strip().lower() in _GPU_NOT_BILLED_YET
    ):
        return 0.0
    total = get_money(fields, "dph_total")
    listed: float | None
    if total is not None and storage is not None and total >= storage:
        listed = round(total - storage, 7)
    else:
        listed = get_money(fields, "dph_base")
    discount = _charged_discount(fields)
    if listed is None or discount is None:
        return listed
    return round(max(0.0, listed - discount), 7)


def _charged_discount(fields: Mapping[str, object]) -> float | None:
    """What Vast takes off the listed rate of this contract — a reserved (prepaid) instance's
    discount: ``instance.totalHour − instance.discountedTotalPerHour`` (the "as currently
    charged" pricing; the official client shows ``discounted_dph_total`` as a reserved rental's
    $/hr). None when Vast reports no discount (an on-demand or bid contract: the two are
    equal). The discount is on the compute price: storage bills its listed rate."""
    charged = as_object(fields.get("instance"))
    if charged is None:
        return None
    listed = get_money(charged, "totalHour")
    discounted = get_money(charged, "discountedTotalPerHour")
    if listed is None or discounted is None or discounted >= listed:
        return None
    return listed - discounted


def _ssh_endpoint(fields: Mapping[str, object]) -> tuple[str | None, int | None]:
    host = get_str(fields, "ssh_host")
    port = as_port(fields.get("ssh_port"))
    if host and port:
        return host, port
    direct_host = get_str(fields, "public_ipaddr")
    direct_port = _host_port(fields.get("ports"), "22/tcp")
    if direct_host and direct_port:
        return direct_host, direct_port
    return None, None


def _bindings(ports: object, spec: str) -> list[Mapping[str, object]]:
    mapping = as_object(ports)
    if mapping is None:
        return []
    entries = as_list(mapping.get(spec)) or []
    return [binding for entry in entries if (binding := as_object(entry)) is not None]


def _host_port(ports: object, spec: str) -> int | None:
    for binding in _bindings(ports, spec):
        port = as_port(binding.get("HostPort"))
        if port:
            return port
    return None


def _public_ports(ports: object) -> tuple[int, ...]:
    """Container ports Docker publishes on every interface (``"8080/tcp": [{"HostIp":
    "0.0.0.0", ...}]``): reachable from the internet through the host's public address."""
    mapping = as_object(ports)
    if mapping is None:
        return ()
    published = set()
    for spec in mapping:
        container_port = as_port(spec.split("/", 1)[0])
        if container_port is None:
            continue
        for binding in _bindings(mapping, spec):
            host_ip = binding.get("HostIp")
            if host_ip in (None, "", "0.0.0.0", "::"):  # noqa: S104 - reading, not binding
                published.add(container_port)
    return tuple(sorted(published))


def _autopay(fields: Mapping[str, object]) -> bool | None:
    amount = get_money(fields, "autobill_amount")
    can_pay = get_bool(fields, "can_pay")
    has_billing = get_bool(fields, "has_billing")
    if amount is None or (can_pay is None and has_billing is None):
        return None
    return amount > 0 and bool(can_pay or has_billing)
