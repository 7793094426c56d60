"""RunPod client (GraphQL, ``POST https://api.runpod.io/graphql``; docs/providers.md, "RunPod").

Every call is ``POST /graphql`` with ``Authorization: Bearer <key>`` and a JSON body
``{"query": "<text>"}`` (no variables: the ids are checked and written inline, the way the
official SDK does). The texts are the module constants below. RunPod answers GraphQL failures
with HTTP 200 and an ``errors`` array; internal errors are retried, "not found" on terminate is
success. ``observe`` makes two calls: the pods query and the account query (balance, network
volumes and keys together).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Collection
from dataclasses import replace
from datetime import datetime
from typing import Any, TypeVar

from watchdog_gpu.capabilities import CAPABILITIES
from watchdog_gpu.errors import NotFoundError, PermanentError, ProviderError
from watchdog_gpu.model import (
    AccountObservation,
    AccountSnapshot,
    InstanceSnapshot,
    SshKeyRecord,
    VolumeSnapshot,
)
from watchdog_gpu.providers.base import BaseProvider
from watchdog_gpu.providers.parsing import runpod as parse

GRAPHQL_PATH = "/graphql"

# Only what the watchdog reads. The official SDK's own pods query (runpod 1.12.0,
# api/queries/pods.py) asks for id, name, desiredStatus, podType, lastStatusChange, costPerHr,
# gpuCount, volumeInGb, containerDiskInGb, runtime.ports and machine.gpuDisplayName among others;
# the OPTIONAL_POD_FIELDS beyond those come from RunPod's GraphQL guide and schema transcription
# (adjustedCostPerHr, runtime.uptimeInSeconds, runtime.gpus) or from the REST API's Pod
# (networkVolumeId, endpointId), and no official source shows the last two on the GraphQL Pod.
# A field the API rejects is dropped alone, for the life of the process (docs/providers.md,
# "RunPod queries").
OPTIONAL_POD_FIELDS = (
    "adjustedCostPerHr",
    "networkVolumeId",
    "endpointId",
    "runtime.uptimeInSeconds",
    "runtime.gpus",
)

# Where each optional field sits: (GraphQL type, field name) as a validation error names it.
_FIELD_TYPES = {
    ("Pod", "adjustedCostPerHr"): "adjustedCostPerHr",
    ("Pod", "networkVolumeId"): "networkVolumeId",
    ("Pod", "endpointId"): "endpointId",
    ("PodRuntime", "uptimeInSeconds"): "runtime.uptimeInSeconds",
    ("PodRuntime", "gpus"): "runtime.gpus",
    ("PodRuntimeGpus", "gpuUtilPercent"): "runtime.gpus",
}
# "Cannot query field "x" on type "Pod"." (graphql-js), the quotes possibly escaped.
_UNKNOWN_FIELD = re.compile(r'Cannot query field \\?"(\w+)\\?" on type \\?"(\w+)\\?"')

# What an HTTP 400 says when the document, not the request, was refused.
_VALIDATION_WORDS = re.compile(r"Cannot query field|GRAPHQL_VALIDATION_FAILED|validation", re.I)


def pods_query(optional: Collection[str] = OPTIONAL_POD_FIELDS) -> str:
    """The pods query: the SDK's fields we read plus the ``optional`` fields named."""
    top = " ".join(field for field in ("adjustedCostPerHr",) if field in optional)
    volumes = " ".join(field for field in ("networkVolumeId", "endpointId") if field in optional)
    runtime = ["ports { ip isIpPublic privatePort publicPort type }"]
    if "runtime.uptimeInSeconds" in optional:
        runtime.insert(0, "uptimeInSeconds")
    if "runtime.gpus" in optional:
        runtime.append("gpus { id gpuUtilPercent }")
    runtime_text = "\n        ".join(runtime)
    return f"""query Pods {{
  myself {{
    pods {{
      id name desiredStatus podType lastStatusChange costPerHr{" " + top if top else ""}
      gpuCount volumeInGb containerDiskInGb{" " + volumes if volumes else ""}
      machine {{ gpuDisplayName }}
      runtime {{
        {runtime_text}
      }}
    }}
  }}
}}"""


PODS_QUERY = pods_query()
SDK_PODS_QUERY = pods_query(())

# The official SDK's user query asks for pubKey and networkVolumes (api/queries/user.py);
# runpodctl's `user` command for clientBalance, currentSpendPerHr and spendLimit.
ACCOUNT_QUERY = """query Account {
  myself {
    clientBalance currentSpendPerHr spendLimit
    pubKey
    networkVolumes { id name size dataCenterId }
  }
}"""

STOP_MUTATION = 'mutation { podStop(input: {podId: "%s"}) { id desiredStatus lastStatusChange } }'
TERMINATE_MUTATION = 'mutation { podTerminate(input: {podId: "%s"}) }'


T = TypeVar("T")

logger = logging.getLogger(__name__)


class RunPodProvider(BaseProvider):
    """One RunPod account."""

    name = "runpod"
    capabilities = CAPABILITIES["runpod"]
    supports_stop = CAPABILITIES["runpod"].can_stop

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The optional pod fields this account's API accepts (a rejected one is dropped alone).
        self._pod_fields: tuple[str, ...] = OPTIONAL_POD_FIELDS
        self._reported_unreadable: set[str] = set()

    def list_instances(self, now: datetime) -> tuple[InstanceSnapshot, ...]:
        """The account's pods, serverless workers left out: they belong to their endpoint,
        which RunPod scales, and are never ours to judge, stop or terminate (the REST API hides
        them unless ``includeWorkers=true``; ``myself.pods`` is not documented to)."""
        pods, _, workers = self._read_pods(now)
        return _without_workers(pods, workers)

    def get_account(self, now: datetime) -> AccountSnapshot:
        return self._graphql(
            ACCOUNT_QUERY,
            lambda payload: parse.parse_account(payload, account=self.account, now=now),
        )

    def list_volumes(self, now: datetime) -> tuple[VolumeSnapshot, ...]:
        """The network volumes alone (``attached`` unknown: :meth:`observe` reads it from the
        pods it lists anyway)."""
        return self._graphql(
            ACCOUNT_QUERY,
            lambda payload: parse.parse_network_volumes(payload, account=self.account, now=now),
        )

    def list_ssh_keys(self) -> tuple[SshKeyRecord, ...]:
        return self._graphql(
            ACCOUNT_QUERY, lambda payload: parse.parse_ssh_keys(payload, account=self.account)
        )

    def observe(self, now: datetime) -> AccountObservation:
        """Pods (required), then one account query for balance, network volumes and keys; each
        of those three that cannot be read is named in ``problems``. Volume attachment comes
        from the pods' ``networkVolumeId``."""
        listed, attachments, workers = self._read_pods(now)
        instances = _without_workers(listed, workers)
        problems: dict[str, str] = {}
        payload = self._secondary(
            "account", problems, lambda: self._graphql(ACCOUNT_QUERY, lambda payload: payload)
        )
        if "account" in problems:  # one query feeds all three parts
            problems.update(volumes=problems["account"], ssh_keys=problems["account"])
            return AccountObservation(
                account=AccountSnapshot(self.name, self.account, now),
                instances=instances,
                problems=problems,
            )
        account = self._secondary(
            "account", problems, lambda: parse.parse_account(payload, account=self.account, now=now)
        )
        volumes = self._secondary(
            "volumes",
            problems,
            lambda: parse.parse_network_volumes(payload, account=self.account, now=now),
        )
        ssh_keys = self._secondary(
            "ssh_keys", problems, lambda: parse.parse_ssh_keys(payload, account=self.account)
        )
        return AccountObservation(
            account=account or AccountSnapshot(self.name, self.account, now),
            instances=instances,
            # A volume a serverless worker mounts is in use all the same.
            volumes=parse.attach_network_volumes(volumes or (), attachments, listed),
            ssh_keys=ssh_keys or (),
            problems=problems,
        )

    def _read_pods(
        self, now: datetime
    ) -> tuple[tuple[InstanceSnapshot, ...], dict[str, str | None] | None, frozenset[str]]:
        """The pods (serverless workers among them), each pod's network volume (``None``:
        unknown) and the ids of the pods that are serverless workers. A query with an optional
        field the API rejects (a validation error, with HTTP 400 or with HTTP 200 and
        ``errors``) is asked again without that field alone, unknown from then on."""
        payload = self._accepted_pods_answer()
        dropped = tuple(field for field in OPTIONAL_POD_FIELDS if field not in self._pod_fields)
        pods = parse.parse_pods(payload, account=self.account, now=now)
        if dropped:
            pods = tuple(
                replace(pod, unreadable=tuple(sorted({*pod.unreadable, *dropped}))) for pod in pods
            )
        self._log_unreadable(pods)
        return pods, parse.pod_network_volumes(payload), parse.pod_endpoints(payload)

    def _accepted_pods_answer(self) -> object:
        """The first pods answer the API accepts. A validation error drops the optional fields
        it names and asks again; one that names none of ours is narrowed down by asking without
        each remaining optional field in turn, then without all of them. The account keeps the
        fields of the query that passed; an error that is not a refused document is raised."""
        fields = self._pod_fields
        try:
            return self._graphql(pods_query(fields), _pods_payload)
        except PermanentError as error:
            rejected = _rejected_fields(error)
            if rejected is None or not fields:
                raise
            first_error = error
        answer, fields = self._ask_without_named(fields, rejected)
        if answer is None:
            answer = self._ask_without_each(fields)
        if answer is None:
            raise first_error
        return answer

    def _ask_without_named(
        self, fields: tuple[str, ...], rejected: frozenset[str]
    ) -> tuple[object | None, tuple[str, ...]]:
        """Asks without the fields the refusal named, again while refusals name more (a
        truncated message may name only some). Returns the accepted answer (``None``: refused
        still) and the fields left."""
        while named := tuple(field for field in fields if field in rejected):
            fields = tuple(field for field in fields if field not in named)
            answer, rejected = self._attempt(fields)
            if answer is not None:
                return answer, fields
        return None, fields

    def _ask_without_each(self, fields: tuple[str, ...]) -> object | None:
        """Asks without each of ``fields`` in turn, then without all of them (``None``: every
        query refused)."""
        for candidate in [*((field,) for field in fields), fields]:
            answer, _ = self._attempt(tuple(field for field in fields if field not in candidate))
            if answer is not None:
                return answer
        return None

    def _attempt(self, fields: tuple[str, ...]) -> tuple[object | None, frozenset[str]]:
        """The answer with the optional ``fields``, or ``None`` and the fields a refusal of the
        document named; any other error is raised. An accepted answer is never ``None``: it is a
        checked GraphQL object."""
        try:
            return self._accept_fields(fields), frozenset()
        except PermanentError as error:
            rejected = _rejected_fields(error)
            if rejected is None:
                raise
            return None, rejected

    def _accept_fields(self, fields: tuple[str, ...]) -> object:
        """The pods answer with the optional ``fields``; when it passes, they are the account's
        from now on (logged once, with what was lost)."""
        payload = self._graphql(pods_query(fields), _pods_payload)
        logger.warning(
            "pods query refused a field, asking without it provider=%s account=%s "
            "unknown_fields=%s",
            self.name,
            self.account,
            ",".join(field for field in self._pod_fields if field not in fields),
        )
        self._pod_fields = fields
        return payload

    def _log_unreadable(self, instances: tuple[InstanceSnapshot, ...]) -> None:
        """One warning per field per account for the life of the process (not one per poll)."""
        for field in sorted({field for pod in instances for field in pod.unreadable}):
            if field not in self._reported_unreadable:
                self._reported_unreadable.add(field)
                logger.warning(
                    "pod field unreadable, treated as unknown provider=%s account=%s field=%s",
                    self.name,
                    self.account,
                    field,
                )

    def destroy(self, instance_id: str) -> None:
        """``podTerminate``; "pod not found to terminate" is success. An HTTP 404 means the
        GraphQL endpoint is missing (a wrong ``api_url``), not the pod: ``PermanentError``."""
        mutation = TERMINATE_MUTATION % _checked_id(instance_id)
        try:
            self._graphql(mutation, lambda payload: parse.parse_mutation(payload, "podTerminate"))
        except NotFoundError as error:
            if error.status_code == 404:
                raise PermanentError(str(error), status_code=404) from None
            return  # the GraphQL error said the pod does not exist

    def stop(self, instance_id: str) -> None:
        """``podStop``: the pod goes to EXITED; its volume keeps billing at the doubled rate.
        Raises ``NotFoundError`` when the pod does not exist."""
        mutation = STOP_MUTATION % _checked_id(instance_id)
        self._graphql(mutation, lambda payload: parse.parse_mutation(payload, "podStop"))

    def _graphql(self, query: str, check: Callable[[object], T]) -> T:
        return self.http.request_json("POST", GRAPHQL_PATH, body={"query": query}, check=check)


def _without_workers(
    pods: tuple[InstanceSnapshot, ...], workers: frozenset[str]
) -> tuple[InstanceSnapshot, ...]:
    if not workers:
        return pods
    return tuple(pod for pod in pods if pod.instance_id not in workers)


class _ValidationError(PermanentError):
    """A GraphQL document the API refused to run (HTTP 200 with validation ``errors``)."""


def _rejected_fields(error: ProviderError) -> frozenset[str] | None:
    """The optional pod fields a validation error names (empty: it names none of ours);
    ``None`` when ``error`` is not a validation error (HTTP 400, or 200 with a validation
    error) at all."""
    if not isinstance(error, _ValidationError) and not (
        error.status_code == 400 and _VALIDATION_WORDS.search(str(error))
    ):
        return None
    named = {
        _FIELD_TYPES[(type_name, field)]
        for field, type_name in _UNKNOWN_FIELD.findall(str(error))
        if (type_name, field) in _FIELD_TYPES
    }
    return frozenset(named)


def _pods_payload(payload: object) -> object:
    """Checks a pods answer (raising what a whole-listing failure raises) and keeps it whole,
    so the pods and their network volumes are read from one answer. A validation error
    answered with HTTP 200 raises :class:`_ValidationError` naming its fields."""
    validation = parse.validation_errors(payload)
    if validation:
        raise _ValidationError(f"runpod: pods: query rejected: {'; '.join(validation)}"[:600])
    parse.partial_field_errors(payload, "pods", ("myself", "pods"))
    return payload


def _checked_id(instance_id: str) -> str:
    # Ids are written into the GraphQL text: only RunPod's alphanumeric ids, so nothing can
    # close the string and change the operation.
    if not CAPABILITIES["runpod"].accepts_instance_id(instance_id):
        raise PermanentError(f"runpod: {instance_id[:40]!r} is not a RunPod pod id")
    return instance_id
