"""RunPod client (GraphQL, ``POST https://api.runpod.io/graphql``; docs/providers/runpod.md).

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
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Any, TypeVar

from watchdog_gpu.capabilities import CAPABILITIES
from watchdog_gpu.errors import NotFoundError, PermanentError
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
# api/queries/pods.py) asks for id, name, desiredStatus, podType, costPerHr, gpuCount,
# volumeInGb, containerDiskInGb, runtime.ports and machine.gpuDisplayName among others; the
# fields beyond those (OPTIONAL_POD_FIELDS) come from RunPod's GraphQL guide and schema. Should
# the API reject one of them, the client falls back to SDK_PODS_QUERY and those fields are
# unknown (docs/providers.md, "RunPod queries").
PODS_QUERY = """query Pods {
  myself {
    pods {
      id name desiredStatus podType costPerHr adjustedCostPerHr
      gpuCount volumeInGb containerDiskInGb networkVolumeId
      machine { gpuDisplayName }
      runtime {
        uptimeInSeconds
        ports { ip isIpPublic privatePort publicPort type }
        gpus { id gpuUtilPercent }
      }
    }
  }
}"""

SDK_PODS_QUERY = """query Pods {
  myself {
    pods {
      id name desiredStatus podType costPerHr
      gpuCount volumeInGb containerDiskInGb
      machine { gpuDisplayName }
      runtime { ports { ip isIpPublic privatePort publicPort type } }
    }
  }
}"""

OPTIONAL_POD_FIELDS = (
    "adjustedCostPerHr",
    "networkVolumeId",
    "runtime.uptimeInSeconds",
    "runtime.gpus",
)

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

_POD_ID = re.compile(r"^[A-Za-z0-9]{1,64}$")

T = TypeVar("T")

logger = logging.getLogger(__name__)


class RunPodProvider(BaseProvider):
    """One RunPod account."""

    name = "runpod"
    capabilities = CAPABILITIES["runpod"]
    supports_stop = CAPABILITIES["runpod"].can_stop

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._pods_query = PODS_QUERY
        self._reported_unreadable: set[str] = set()

    def list_instances(self, now: datetime) -> tuple[InstanceSnapshot, ...]:
        return self._read_pods(now)[0]

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
        instances, attachments = self._read_pods(now)
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
            volumes=parse.attach_network_volumes(volumes or (), attachments, instances),
            ssh_keys=ssh_keys or (),
            problems=problems,
        )

    def _read_pods(
        self, now: datetime
    ) -> tuple[tuple[InstanceSnapshot, ...], dict[str, str | None] | None]:
        """The pods and each pod's network volume (``None``: unknown). A query the API rejects
        (HTTP 400: a field it does not know) is retried once with the SDK's own fields, which
        this account keeps using."""
        try:
            payload = self._graphql(self._pods_query, _pods_payload)
        except PermanentError as error:
            if not _rejects_optional_field(error) or self._pods_query == SDK_PODS_QUERY:
                raise
            logger.warning(
                "pods query rejected, falling back to the SDK's fields provider=%s account=%s "
                "unknown_fields=%s",
                self.name,
                self.account,
                ",".join(OPTIONAL_POD_FIELDS),
            )
            self._pods_query = SDK_PODS_QUERY
            payload = self._graphql(self._pods_query, _pods_payload)
        instances = parse.parse_pods(payload, account=self.account, now=now)
        if self._pods_query == SDK_PODS_QUERY:
            instances = tuple(
                replace(pod, unreadable=tuple(sorted({*pod.unreadable, *OPTIONAL_POD_FIELDS})))
                for pod in instances
            )
        self._log_unreadable(instances)
        return instances, parse.pod_network_volumes(payload)

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


def _rejects_optional_field(error: PermanentError) -> bool:
    """Whether a GraphQL validation error (HTTP 400) names one of the optional pod fields."""
    leaves = {field.rsplit(".", 1)[-1] for field in OPTIONAL_POD_FIELDS}
    return error.status_code == 400 and any(leaf in str(error) for leaf in leaves)


def _pods_payload(payload: object) -> object:
    """Checks a pods answer (raising what a whole-listing failure raises) and keeps it whole,
    so the pods and their network volumes are read from one answer."""
    parse.partial_field_errors(payload, "pods", ("myself", "pods"))
    return payload


def _checked_id(instance_id: str) -> str:
    # Ids are written into the GraphQL text: only RunPod's alphanumeric ids, so nothing can
    # close the string and change the operation.
    if not _POD_ID.match(instance_id):
        raise PermanentError(f"runpod: {instance_id[:40]!r} is not a RunPod pod id")
    return instance_id
