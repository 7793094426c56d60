"""RunPod payloads into the normalised model (pure).

The client speaks GraphQL only (the one API with the balance, ``podType`` and per-GPU
utilisation). States, storage and compute rates, partial GraphQL errors and the SSH endpoint,
each with its source: ``docs/providers.md``, "RunPod" and "SSH endpoints".
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from typing import TypeGuard

from watchdog_gpu.errors import AuthError, NotFoundError, ProviderError, TransientError
from watchdog_gpu.model import (
    AccountSnapshot,
    InstanceSnapshot,
    InstanceState,
    SshKeyRecord,
    VolumeSnapshot,
)
from watchdog_gpu.providers.parsing.common import (
    HOURS_PER_MONTH,
    StateTable,
    as_float,
    as_list,
    as_object,
    as_port,
    broken_payload,
    describe,
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

PROVIDER = "runpod"
SSH_USER = "root"

VOLUME_RUNNING_USD_PER_GB_MONTH = 0.10
VOLUME_STOPPED_USD_PER_GB_MONTH = 0.20  # the doubled rate of a stopped pod's volume
CONTAINER_DISK_USD_PER_GB_MONTH = 0.10  # only while running: the container disk is wiped on stop
NETWORK_VOLUME_USD_PER_GB_MONTH = 0.07
NETWORK_VOLUME_BEYOND_1TB_USD_PER_GB_MONTH = 0.05
_ONE_TB_GB = 1000.0

RUNPOD_STATES = StateTable(
    PROVIDER,
    {
        "CREATED": InstanceState.STARTING,
        "PROVISIONING": InstanceState.STARTING,  # REST v2
        "STARTING": InstanceState.STARTING,  # REST v2
        "RESTARTING": InstanceState.STARTING,
        "RUNNING": InstanceState.RUNNING,
        "EXITED": InstanceState.STOPPED,  # GPU released, volume kept and billed at 2×
        "TERMINATED": InstanceState.GONE,
        # PAUSED and DEAD are in the schema but undocumented; REST v2 ERROR is unrecoverable
        # with unknown billing: all three fall back to UNKNOWN.
    },
)

_INTERRUPTIBLE_POD_TYPES = frozenset({"INTERRUPTABLE"})

_AUTH_CODES = frozenset({"UNAUTHENTICATED", "FORBIDDEN"})
_AUTH_WORDS = ("unauthorized", "not authorized", "authorization")

# ``lastStatusChange`` is free text; only "Rented by User: " followed by a JavaScript
# ``Date.toString()`` is attested ("Rented by User: Thu Aug 20 2026 03:29:12 GMT+0000
# (Coordinated Universal Time)"). Any other wording is left unread (docs/providers.md, "RunPod").
_RENTED_BY_USER = re.compile(
    r"Rented by User: (?P<weekday>[A-Z][a-z]{2}) (?P<month>[A-Z][a-z]{2}) (?P<day>[0-9]{2}) "
    r"(?P<year>[0-9]{4}) (?P<hour>[0-9]{2}):(?P<minute>[0-9]{2}):(?P<second>[0-9]{2}) "
    r"GMT(?P<sign>[+-])(?P<offset_hours>[0-9]{2})(?P<offset_minutes>[0-5][0-9])"
    r"(?: \([^()]*\))?"
)
_JS_WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_JS_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")

# Where a pod's fields sit in a ``myself { pods { ... } }`` answer: errors under this path with
# a pod index and a field name are partial (that pod's field is unknown).
_PODS_PATH = ("myself", "pods")


def graphql_data(payload: object, operation: str) -> Mapping[str, object]:
    """The ``data`` object of a GraphQL answer.

    RunPod answers GraphQL failures with HTTP 200 and an ``errors`` array, so ``errors`` is read
    before ``data``. Raises the ``ProviderError`` that :func:`graphql_error` picks, or
    ``PermanentError`` when the answer is not a GraphQL response at all.
    """
    envelope = _envelope(payload, operation)
    error = graphql_error(envelope, operation)
    if error is not None:
        raise error
    data = as_object(envelope.get("data"))
    if data is None:
        raise broken_payload(PROVIDER, operation, f"'data' is {describe(envelope.get('data'))}")
    return data


def partial_field_errors(
    payload: object, operation: str, list_path: tuple[str, ...]
) -> dict[int, frozenset[str]]:
    """The fields each item of the list at ``list_path`` could not resolve, by item index
    (``{2: {"runtime.gpus"}}`` for an error with path ``myself.pods.2.runtime.gpus``).

    Raises the error of :func:`graphql_error` when any error lies elsewhere (on the list
    itself, on an item as a whole, or without a path): that is not a partial answer.
    """
    envelope = _envelope(payload, operation)
    unreadable: dict[int, set[str]] = {}
    for entry in as_list(envelope.get("errors")) or []:
        located = _item_field(entry, list_path)
        if located is None:
            raise _whole_answer_error(envelope, operation)
        index, field = located
        unreadable.setdefault(index, set()).add(field)
    return {index: frozenset(fields) for index, fields in unreadable.items()}


def _item_field(entry: object, list_path: tuple[str, ...]) -> tuple[int, str] | None:
    """(item index, dotted field) of an error on one field of one item of the list at
    ``list_path``; ``None`` when the error lies anywhere else. An error on an item's ``id``
    is on the item as a whole."""
    path = as_list((as_object(entry) or {}).get("path")) or []
    depth = len(list_path)
    if tuple(path[:depth]) != list_path:
        return None
    index, *rest = path[depth:] or [None]
    names = [part for part in rest if isinstance(part, str)]
    if not _is_index(index) or not names or names[0] == "id":
        return None
    return index, ".".join(names)


def _is_index(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def graphql_error(envelope: Mapping[str, object], operation: str) -> ProviderError | None:
    """The typed error for a GraphQL ``errors`` array, or ``None`` when there is none.

    "not found" → ``NotFoundError`` (terminate of a gone pod: "pod not found to terminate");
    authorization failures → ``AuthError``; ``INTERNAL_SERVER_ERROR`` / "try again later" →
    ``TransientError`` (retried); anything else → ``PermanentError``.
    """
    errors = as_list(envelope.get("errors"))
    if not errors:
        if envelope.get("errors") not in (None, []):
            return broken_payload(PROVIDER, operation, "'errors' is not an array")
        return None
    entries = [as_object(entry) or {} for entry in errors]
    text = "; ".join(get_str(fields, "message") or "(no message)" for fields in entries)
    codes = {code for fields in entries if (code := _error_code(fields))}
    kind = _error_kind(text.lower(), codes)
    if kind is None:
        return broken_payload(PROVIDER, operation, f"GraphQL error: {text}")
    return kind(f"{PROVIDER}: {operation}: GraphQL error: {text}"[:300])


def _error_kind(lowered: str, codes: set[str]) -> type[ProviderError] | None:
    """The retry class of GraphQL errors from their lower-cased messages and codes (``None``:
    permanent)."""
    if "not found" in lowered or "NOT_FOUND" in codes:
        return NotFoundError
    if codes & _AUTH_CODES or any(word in lowered for word in _AUTH_WORDS):
        return AuthError
    if "INTERNAL_SERVER_ERROR" in codes or "try again later" in lowered:
        return TransientError
    return None


def _error_code(fields: Mapping[str, object]) -> str:
    """An error's upper-cased ``extensions.code`` ("" when it has none)."""
    return (get_str(as_object(fields.get("extensions")) or {}, "code") or "").upper()


def _envelope(payload: object, operation: str) -> Mapping[str, object]:
    envelope = as_object(payload)
    if envelope is None:
        raise broken_payload(PROVIDER, operation, f"got {describe(payload)}")
    return envelope


def _whole_answer_error(envelope: Mapping[str, object], operation: str) -> ProviderError:
    """The error of an answer whose ``errors`` array is known to hold an entry."""
    error = graphql_error(envelope, operation)
    assert error is not None  # errors is a non-empty array
    return error


def parse_pods(payload: object, *, account: str, now: datetime) -> tuple[InstanceSnapshot, ...]:
    """Parse ``query { myself { pods { ... } } }``. Raises ``PermanentError`` when the list or a
    pod's id is unreadable (a silently dropped pod would look terminated). Partial errors inside
    a pod's fields leave those fields unknown (see the module docstring)."""
    unreadable = partial_field_errors(payload, "pods", _PODS_PATH)
    envelope = as_object(payload) or {}
    myself = as_object((as_object(envelope.get("data")) or {}).get("myself"))
    if myself is None:
        raise broken_payload(PROVIDER, "pods", "'myself' is missing or not an object")
    pods = as_list(myself.get("pods"))
    if pods is None:
        raise broken_payload(PROVIDER, "pods", f"'pods' is {describe(myself.get('pods'))}")
    return tuple(
        parse_pod(pod, account=account, now=now, unreadable=unreadable.get(index, frozenset()))
        for index, pod in enumerate(pods)
    )


def pod_network_volumes(payload: object) -> dict[str, str | None] | None:
    """Each pod's ``networkVolumeId`` (``None``: the pod has none) from a pods answer; ``None``
    when any pod's field could not be read or was not asked for (attachment unknown)."""
    try:
        unreadable = partial_field_errors(payload, "pods", _PODS_PATH)
    except ProviderError:
        return None
    attached: dict[str, str | None] = {}
    for index, pod in enumerate(_listed_pods(payload)):
        fields = as_object(pod) or {}
        pod_id = get_id(fields, "id")
        if pod_id is None or not _volume_readable(fields, unreadable.get(index, frozenset())):
            return None
        attached[pod_id] = get_str(fields, "networkVolumeId")
    return attached


def _volume_readable(fields: Mapping[str, object], unreadable: frozenset[str]) -> bool:
    """Whether a pod's ``networkVolumeId`` was asked for and read (its null means "none")."""
    return "networkVolumeId" in fields and "networkVolumeId" not in unreadable


def pod_endpoints(payload: object) -> frozenset[str]:
    """The ids of the pods in a pods answer that belong to a serverless endpoint (a non-empty
    ``endpointId``); empty when the field was not read."""
    workers = set()
    for pod in _listed_pods(payload):
        fields = as_object(pod) or {}
        pod_id = get_id(fields, "id")
        if pod_id is not None and get_str(fields, "endpointId"):
            workers.add(pod_id)
    return frozenset(workers)


def _listed_pods(payload: object) -> list[object]:
    """The pods of a pods answer already checked by :func:`parse_pods` (empty when absent)."""
    envelope = as_object(payload) or {}
    myself = as_object((as_object(envelope.get("data")) or {}).get("myself")) or {}
    return as_list(myself.get("pods")) or []


def validation_errors(payload: object) -> list[str]:
    """The messages of the validation errors in a GraphQL answer (errors without a ``path``
    that say the document cannot run: ``GRAPHQL_VALIDATION_FAILED``, "Cannot query field");
    empty when there are none. Some servers answer these with HTTP 200."""
    envelope = as_object(payload) or {}
    entries = [as_object(entry) or {} for entry in as_list(envelope.get("errors")) or []]
    return [
        get_str(fields, "message") or ""
        for fields in entries
        if not fields.get("path") and _is_validation_error(fields)
    ]


def _is_validation_error(fields: Mapping[str, object]) -> bool:
    message = get_str(fields, "message") or ""
    return _error_code(fields) == "GRAPHQL_VALIDATION_FAILED" or message.startswith(
        "Cannot query field"
    )


def attach_network_volumes(
    volumes: tuple[VolumeSnapshot, ...],
    pods: Mapping[str, str | None] | None,
    instances: tuple[InstanceSnapshot, ...],
) -> tuple[VolumeSnapshot, ...]:
    """Volumes with ``attached`` read from the pods' ``networkVolumeId``: attached when a pod
    that is running or starting names it; detached when every pod was read and none that names
    it runs — a volume under stopped or terminated pods bills on its own, whatever those pods
    may do later; unknown (``None``) when the pods' volume fields could not be read, or when
    the only pods naming it are in a state we do not know."""
    if pods is None:
        return volumes
    states = {instance.instance_id: instance.state for instance in instances}
    used: set[str] = set()
    maybe: set[str] = set()
    for pod_id, volume in pods.items():
        state = states.get(pod_id)
        if not volume or state is None:
            continue
        if state in VOLUME_USING_STATES:
            used.add(volume)
        elif state is InstanceState.UNKNOWN:
            maybe.add(volume)
    return tuple(
        replace(volume, attached=_attached(volume.volume_id, used, maybe)) for volume in volumes
    )


# A pod uses its network volume while it runs or starts; stopped (EXITED) or gone, it does not.
VOLUME_USING_STATES = frozenset({InstanceState.RUNNING, InstanceState.STARTING})


def _attached(volume_id: str, used: set[str], maybe: set[str]) -> bool | None:
    if volume_id in used:
        return True
    return None if volume_id in maybe else False


def parse_pod(
    pod: object, *, account: str, now: datetime, unreadable: frozenset[str] = frozenset()
) -> InstanceSnapshot:
    """One GraphQL ``Pod``. Only an unreadable ``id`` is fatal (``PermanentError``).

    ``unreadable`` names the fields a partial error left ``null`` (dotted: ``runtime.gpus``):
    their values are unknown, not absent — an unreadable ``runtime`` does not mean the
    container is down.
    """
    fields = _pod_fields(pod)
    pod_id = get_id(fields, "id")
    if pod_id is None:
        raise broken_payload(PROVIDER, "pod", "pod without a usable 'id'")
    runtime = as_object(fields.get("runtime"))
    desired = fields.get("desiredStatus")
    interruptible = get_str(fields, "podType") in _INTERRUPTIBLE_POD_TYPES
    runtime_up = runtime is not None or "runtime" in unreadable
    state = _state(desired, runtime_up=runtime_up)
    raw_state = _raw_state(desired)
    if state is InstanceState.STARTING and raw_state == "RUNNING":
        raw_state = "RUNNING (runtime not up)"
    machine = as_object(fields.get("machine")) or {}
    ports = as_list(runtime.get("ports")) if runtime is not None else None
    ssh_host, ssh_port = _ssh_from_runtime_ports(ports)
    volume_gb = get_money(fields, "volumeInGb")
    container_gb = get_money(fields, "containerDiskInGb")
    return InstanceSnapshot(
        provider=PROVIDER,
        account=account,
        instance_id=pod_id,
        name=get_str(fields, "name") or "",
        state=state,
        raw_state=raw_state,
        observed_at=now,
        interruptible=interruptible,
        compute_usd_per_hour=pod_compute_usd_per_hour(fields),
        storage_usd_per_hour=pod_storage_usd_per_hour(state, volume_gb, container_gb),
        disk_gb=_billed_disk_gb(state, volume_gb, container_gb),
        gpu_name=get_str(machine, "gpuDisplayName"),
        gpu_count=get_int(fields, "gpuCount"),
        ssh_host=ssh_host,
        ssh_port=ssh_port,
        ssh_user=SSH_USER if ssh_host else None,
        started_at=(
            seconds_before(now, get_float(runtime, "uptimeInSeconds")) if runtime else None
        ),
        rented_at=rented_by_user_at(fields.get("lastStatusChange")),
        provider_gpu_util_percent=_gpu_utilisation(runtime),
        public_ports=_public_ports_from_runtime(ports),
        unreadable=tuple(sorted(unreadable)),
    )


def rented_by_user_at(text: object) -> datetime | None:
    """The instant of a ``lastStatusChange`` that reads exactly "Rented by User: <JS date with
    a GMT offset>", in UTC; ``None`` for anything else (another wording, a date that does not
    exist or whose weekday disagrees with it, a non-string)."""
    if not isinstance(text, str):
        return None
    found = _RENTED_BY_USER.fullmatch(text)
    if found is None or found["month"] not in _JS_MONTHS or found["weekday"] not in _JS_WEEKDAYS:
        return None
    sign = 1 if found["sign"] == "+" else -1
    offset = timedelta(hours=int(found["offset_hours"]), minutes=int(found["offset_minutes"]))
    try:
        local = datetime(
            int(found["year"]),
            _JS_MONTHS.index(found["month"]) + 1,
            int(found["day"]),
            int(found["hour"]),
            int(found["minute"]),
            int(found["second"]),
            tzinfo=timezone(sign * offset),
        )
    except ValueError:  # Feb 30, hour 24, an offset of a day or more
        return None
    if _JS_WEEKDAYS[local.weekday()] != found["weekday"]:
        return None
    return local.astimezone(UTC)


def pod_compute_usd_per_hour(fields: Mapping[str, object]) -> float | None:
    """``adjustedCostPerHr`` (the rate after Savings Plans) when read, else ``costPerHr``."""
    adjusted = get_money(fields, "adjustedCostPerHr")
    return adjusted if adjusted is not None else get_money(fields, "costPerHr")


def pod_storage_usd_per_hour(
    state: InstanceState, volume_gb: float | None, container_gb: float | None
) -> float | None:
    """What a pod's own disks bill per hour in ``state``: volume + container disk while it is
    up, the volume at the doubled rate while it is stopped or paused, nothing once terminated."""
    if state is InstanceState.GONE:
        return 0.0
    if state in (InstanceState.STOPPED, InstanceState.PAUSED):
        if volume_gb is None:
            return None
        return monthly_gb_rate_to_hourly(
            volume_gb, VOLUME_STOPPED_USD_PER_GB_MONTH, HOURS_PER_MONTH
        )
    if state in (InstanceState.RUNNING, InstanceState.STARTING):
        if volume_gb is None or container_gb is None:
            return None
        return round(
            monthly_gb_rate_to_hourly(volume_gb, VOLUME_RUNNING_USD_PER_GB_MONTH, HOURS_PER_MONTH)
            + monthly_gb_rate_to_hourly(
                container_gb, CONTAINER_DISK_USD_PER_GB_MONTH, HOURS_PER_MONTH
            ),
            9,
        )
    return None


def network_volume_usd_per_hour(size_gb: float) -> float:
    """A network volume's $/h: $0.07/GB/month for the first TB, $0.05 beyond
    (docs/providers.md, "RunPod billing")."""
    first = min(size_gb, _ONE_TB_GB)
    beyond = max(size_gb - _ONE_TB_GB, 0.0)
    return round(
        monthly_gb_rate_to_hourly(first, NETWORK_VOLUME_USD_PER_GB_MONTH, HOURS_PER_MONTH)
        + monthly_gb_rate_to_hourly(
            beyond, NETWORK_VOLUME_BEYOND_1TB_USD_PER_GB_MONTH, HOURS_PER_MONTH
        ),
        9,
    )


def parse_account(payload: object, *, account: str, now: datetime) -> AccountSnapshot:
    """Parse ``myself { clientBalance currentSpendPerHr spendLimit ... }``. RunPod's
    ``spendLimit`` is in $/h (default 80); the API says nothing about auto-pay. A partial error
    on one of these fields leaves it unknown."""
    myself = _myself(payload, "account")
    return AccountSnapshot(
        provider=PROVIDER,
        account=account,
        observed_at=now,
        balance_usd=get_float(myself, "clientBalance"),
        spend_usd_per_hour=get_money(myself, "currentSpendPerHr"),
        spend_limit_usd_per_hour=get_money(myself, "spendLimit"),
        autopay_enabled=None,
    )


def parse_network_volumes(
    payload: object, *, account: str, now: datetime
) -> tuple[VolumeSnapshot, ...]:
    """Parse ``myself { networkVolumes { id name size dataCenterId } }`` (size in GB). The
    account query does not say whether a pod uses a volume: ``attached`` is ``None`` until
    :func:`attach_network_volumes` reads it from the pods."""
    myself = _myself(payload, "network volumes", frozenset({"networkVolumes"}))
    return _network_volumes(myself.get("networkVolumes"), account=account, now=now)


def parse_ssh_keys(payload: object, *, account: str) -> tuple[SshKeyRecord, ...]:
    """Parse ``myself { pubKey }``: every account key in one newline-separated string. RunPod
    keys have no ids, so each gets a stable one derived from its text."""
    myself = _myself(payload, "ssh keys", frozenset({"pubKey"}))
    text = myself.get("pubKey")
    if text is None:
        return ()
    if not isinstance(text, str):
        raise broken_payload(PROVIDER, "ssh keys", f"'pubKey' is {describe(text)}")
    records = []
    for line in text.replace("\\n", "\n").splitlines():
        public_key = line.strip()
        if not public_key:
            continue
        key_id = hashlib.sha256(public_key.encode()).hexdigest()[:12]
        records.append(
            SshKeyRecord(
                provider=PROVIDER,
                account=account,
                key_id=key_id,
                name=key_comment(public_key) or key_id,
                public_key=public_key,
            )
        )
    return tuple(records)


def parse_mutation(payload: object, operation: str) -> object:
    """The result of a mutation (``podStop``, ``podTerminate`` …) after checking ``errors``.
    ``podTerminate`` returns Void: ``null`` without ``errors`` is success."""
    data = graphql_data(payload, operation)
    if operation not in data:
        raise broken_payload(PROVIDER, operation, f"'data' has no '{operation}'")
    return data[operation]


def _myself(
    payload: object,
    operation: str,
    needs: frozenset[str] = frozenset(),
) -> Mapping[str, object]:
    """``data.myself`` of an answer, degraded per field: an error on a ``myself`` field this
    part does not need leaves that field ``null`` (unknown, and the part keeps the rest); one
    on a field it ``needs``, on ``myself`` itself or without a path raises the error of
    :func:`graphql_error`."""
    envelope = _envelope(payload, operation)
    for entry in as_list(envelope.get("errors")) or []:
        field = _myself_field(entry)
        if field is None or field in needs:
            raise _whole_answer_error(envelope, operation)
    data = as_object(envelope.get("data"))
    if data is None:
        error = graphql_error(envelope, operation)
        if error is not None:
            raise error
        raise broken_payload(PROVIDER, operation, f"'data' is {describe(envelope.get('data'))}")
    myself = as_object(data.get("myself"))
    if myself is None:
        raise broken_payload(PROVIDER, operation, "'myself' is missing or not an object")
    return myself


def _myself_field(entry: object) -> str | None:
    """The ``myself`` field a GraphQL error lies on (``None``: elsewhere, or no path)."""
    path = as_list((as_object(entry) or {}).get("path")) or []
    if len(path) < 2 or path[0] != "myself" or not isinstance(path[1], str):
        return None
    return path[1]


def _pod_fields(pod: object) -> Mapping[str, object]:
    fields = as_object(pod)
    if fields is None:
        raise broken_payload(PROVIDER, "pod", f"pod is {describe(pod)}")
    return fields


def _state(raw: object, *, runtime_up: bool) -> InstanceState:
    """The table's state; ``RUNNING`` without a runtime is starting. Whether the pod is a spot
    pod changes nothing: an EXITED spot pod is stopped (interrupted and user-stopped look the
    same, docs/providers.md)."""
    state = RUNPOD_STATES.lookup(raw)
    if state is InstanceState.RUNNING and not runtime_up:
        return InstanceState.STARTING
    return state


def _raw_state(raw: object) -> str:
    return raw.strip()[:80] if isinstance(raw, str) else describe(raw)


def _billed_disk_gb(
    state: InstanceState, volume_gb: float | None, container_gb: float | None
) -> float | None:
    if state in (InstanceState.STOPPED, InstanceState.PAUSED):
        return volume_gb
    if volume_gb is None or container_gb is None:
        return None
    return volume_gb + container_gb


def _network_volumes(items: object, *, account: str, now: datetime) -> tuple[VolumeSnapshot, ...]:
    entries = as_list(items)
    if entries is None:
        raise broken_payload(PROVIDER, "network volumes", f"got {describe(items)}")
    volumes = []
    for entry in entries:
        fields = as_object(entry)
        volume_id = get_id(fields, "id") if fields is not None else None
        if fields is None or volume_id is None:
            raise broken_payload(PROVIDER, "network volume", "entry without a usable 'id'")
        size = get_money(fields, "size")
        volumes.append(
            VolumeSnapshot(
                provider=PROVIDER,
                account=account,
                volume_id=volume_id,
                name=get_str(fields, "name") or "",
                observed_at=now,
                size_gb=size,
                usd_per_hour=network_volume_usd_per_hour(size) if size is not None else None,
                attached=None,
            )
        )
    return tuple(volumes)


def _gpu_utilisation(runtime: Mapping[str, object] | None) -> tuple[float | None, ...] | None:
    gpus = as_list(runtime.get("gpus")) if runtime is not None else None
    if not gpus:
        return None
    values: list[float | None] = []
    for gpu in gpus:
        value = as_float((as_object(gpu) or {}).get("gpuUtilPercent"))
        values.append(value if value is not None and 0 <= value <= 100 else None)
    return tuple(values)


def _runtime_port_entries(ports: list[object] | None) -> list[Mapping[str, object]]:
    return [entry for item in ports or [] if (entry := as_object(item)) is not None]


def _ssh_from_runtime_ports(ports: list[object] | None) -> tuple[str | None, int | None]:
    for entry in _runtime_port_entries(ports):
        if (
            as_port(entry.get("privatePort")) == 22
            and get_bool(entry, "isIpPublic") is True
            and get_str(entry, "type") in (None, "tcp")
        ):
            host, port = get_str(entry, "ip"), as_port(entry.get("publicPort"))
            if host and port:
                return host, port
    return None, None


def _public_ports_from_runtime(ports: list[object] | None) -> tuple[int, ...]:
    """Container ports reachable from the internet: those mapped on a public IP, and every
    ``http`` port (RunPod serves those through its public HTTPS proxy)."""
    published = set()
    for entry in _runtime_port_entries(ports):
        private = as_port(entry.get("privatePort"))
        if private is None:
            continue
        if get_bool(entry, "isIpPublic") is True or get_str(entry, "type") == "http":
            published.add(private)
    return tuple(sorted(published))
