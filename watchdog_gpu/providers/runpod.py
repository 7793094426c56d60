"""RunPod client (GraphQL, ``POST https://api.runpod.io/graphql``; docs/providers/runpod.md).

Every call is ``POST /graphql`` with ``Authorization: Bearer <key>`` and a JSON body
``{"query": "<text>"}`` (no variables: the ids are checked and written inline, the way the
official SDK does). The texts are the module constants below. RunPod answers GraphQL failures
with HTTP 200 and an ``errors`` array; internal errors are retried, "not found" on terminate is
success. ``observe`` makes two calls: the pods query and the account query (balance, network
volumes and keys together).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime
from typing import TypeVar

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

PODS_QUERY = """query Pods {
  myself {
    pods {
      id name desiredStatus podType lastStatusChange
      imageName costPerHr adjustedCostPerHr lowestBidPriceToResume
      gpuCount vcpuCount memoryInGb volumeInGb containerDiskInGb volumeMountPath
      machineId locked uptimeSeconds ports templateId
      machine {
        gpuDisplayName gpuTypeId location podHostId secureCloud costPerHr currentPricePerGpu
      }
      runtime {
        uptimeInSeconds
        ports { ip isIpPublic privatePort publicPort type }
        gpus { id gpuUtilPercent memoryUtilPercent }
        container { cpuPercent memoryPercent }
      }
    }
  }
}"""

ACCOUNT_QUERY = """query Account {
  myself {
    id email
    clientBalance currentSpendPerHr spendLimit
    notifyLowBalance notifyPodsStale notifyPodsGeneral
    pubKey
    networkVolumes { id name size dataCenterId }
  }
}"""

STOP_MUTATION = 'mutation { podStop(input: {podId: "%s"}) { id desiredStatus lastStatusChange } }'
TERMINATE_MUTATION = 'mutation { podTerminate(input: {podId: "%s"}) }'

_POD_ID = re.compile(r"^[A-Za-z0-9]{1,64}$")

T = TypeVar("T")


class RunPodProvider(BaseProvider):
    """One RunPod account."""

    name = "runpod"
    supports_stop = True

    def list_instances(self, now: datetime) -> tuple[InstanceSnapshot, ...]:
        return self._graphql(
            PODS_QUERY,
            lambda payload: parse.parse_pods(payload, account=self.account, now=now),
        )

    def get_account(self, now: datetime) -> AccountSnapshot:
        return self._graphql(
            ACCOUNT_QUERY,
            lambda payload: parse.parse_account(payload, account=self.account, now=now),
        )

    def list_volumes(self, now: datetime) -> tuple[VolumeSnapshot, ...]:
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
        of those three that cannot be read is named in ``problems``."""
        instances = self.list_instances(now)
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
            volumes=volumes or (),
            ssh_keys=ssh_keys or (),
            problems=problems,
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


def _checked_id(instance_id: str) -> str:
    # Ids are written into the GraphQL text: only RunPod's alphanumeric ids, so nothing can
    # close the string and change the operation.
    if not _POD_ID.match(instance_id):
        raise PermanentError(f"runpod: {instance_id[:40]!r} is not a RunPod pod id")
    return instance_id
