"""The RunPod GraphQL dialect (``docs/providers.md``, "RunPod") over the simulated world.

Served: the REST v2 and v1 APIs (:mod:`watchdog_gpu.sim.servers.runpod_rest`) and
``POST /graphql`` with ``{"query": …, "variables": {…}}`` (header
``Authorization: Bearer <key>`` or the ``?api_key=`` query parameter the GraphQL docs show).

Queries: ``myself { id email clientBalance currentSpendPerHr spendLimit notify* pubKey
networkVolumes {…} pods {…} }`` and ``pod(input: {podId})`` (``null`` when the pod is gone).
Mutations: ``podStop``, ``podResume``, ``podBidResume`` (→ the pod), ``podTerminate`` (a Void
scalar: ``null``; an unknown/gone pod gives the error "pod not found to terminate"),
``updateUserSettings(input: {pubKey})`` and ``deleteNetworkVolume(input: {id})``.

Errors as RunPod sends them: a bad key → HTTP 401; a document that does not parse or asks for a
field the schema lacks → HTTP 400 with ``errors`` (HTTP 200 for an account in "strict" mode,
whose ``Pod`` lacks the fields no official source shows: ``STRICT_SCHEMA``); an operation error →
HTTP 200 with ``errors`` and ``data`` holding ``null`` for that field. A serverless worker's pod
shows its ``endpointId``.

State mapping: starting → ``RUNNING`` with ``runtime: null``; running → ``RUNNING`` with a runtime
(per-GPU ``gpuUtilPercent`` from the script); paused (spot interruption) and stopped → ``EXITED``;
a pending terminate → ``TERMINATED``; gone → absent.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from watchdog_gpu.sim import graphql
from watchdog_gpu.sim.faults import FaultSettings
from watchdog_gpu.sim.graphql import GraphQLError, ObjectType, Selection
from watchdog_gpu.sim.http import SimRequest, SimResponse, json_response
from watchdog_gpu.sim.records import (
    InstanceView,
    InvalidRequestError,
    SimError,
    UnknownInstanceError,
)
from watchdog_gpu.sim.servers.base import Dialect
from watchdog_gpu.sim.servers.runpod_rest import RunpodRestV1, RunpodRestV2
from watchdog_gpu.sim.world import SimulatedWorld

_SCALARS = None

SCHEMA: Mapping[str, ObjectType] = {
    "Query": ObjectType("Query", {"myself": "User", "pod": "Pod"}),
    "Mutation": ObjectType(
        "Mutation",
        {
            "podStop": "Pod",
            "podResume": "Pod",
            "podBidResume": "Pod",
            "podTerminate": _SCALARS,
            "updateUserSettings": "User",
            "deleteNetworkVolume": _SCALARS,
        },
    ),
    "User": ObjectType(
        "User",
        dict.fromkeys(
            [
                "id",
                "email",
                "clientBalance",
                "currentSpendPerHr",
                "spendLimit",
                "notifyLowBalance",
                "notifyPodsStale",
                "notifyPodsGeneral",
                "pubKey",
            ]
        )
        | {"networkVolumes": "NetworkVolume", "pods": "Pod"},
    ),
    "NetworkVolume": ObjectType(
        "NetworkVolume",
        dict.fromkeys(["id", "name", "size", "dataCenterId"]) | {"dataCenter": "DataCenter"},
    ),
    "DataCenter": ObjectType("DataCenter", dict.fromkeys(["id", "name"])),
    "Pod": ObjectType(
        "Pod",
        dict.fromkeys(
            [
                "id",
                "name",
                "desiredStatus",
                "podType",
                "lastStatusChange",
                "imageName",
                "costPerHr",
                "adjustedCostPerHr",
                # In no official source's Pod (REST's Pod has both): the simulator accepts
                # them, except for an account in "strict" mode (STRICT_SCHEMA).
                "networkVolumeId",
                "endpointId",
                "lowestBidPriceToResume",
                "costMultiplier",
                "gpuCount",
                "vcpuCount",
                "memoryInGb",
                "volumeInGb",
                "containerDiskInGb",
                "volumeMountPath",
                "volumeEncrypted",
                "machineId",
                "locked",
                "uptimeSeconds",
                "ports",
                "port",
                "templateId",
                "dockerArgs",
                "dockerId",
                "env",
                "containerRegistryAuthId",
                "version",
                "gpuPowerLimitPercent",
            ]
        )
        | {"machine": "PodMachineInfo", "runtime": "PodRuntime"},
    ),
    "PodMachineInfo": ObjectType(
        "PodMachineInfo",
        dict.fromkeys(
            [
                "gpuDisplayName",
                "gpuTypeId",
                "location",
                "podHostId",
                "secureCloud",
                "costPerHr",
                "currentPricePerGpu",
                "maintenanceStart",
                "maintenanceEnd",
                "maintenanceNote",
                "maxDownloadSpeedMbps",
                "maxUploadSpeedMbps",
                "supportPublicIp",
                "dataCenterId",
            ]
        ),
    ),
    "PodRuntime": ObjectType(
        "PodRuntime",
        {
            "uptimeInSeconds": None,
            "ports": "PodRuntimePorts",
            "gpus": "PodRuntimeGpus",
            "container": "PodRuntimeContainer",
        },
    ),
    "PodRuntimePorts": ObjectType(
        "PodRuntimePorts", dict.fromkeys(["ip", "isIpPublic", "privatePort", "publicPort", "type"])
    ),
    "PodRuntimeGpus": ObjectType(
        "PodRuntimeGpus", dict.fromkeys(["id", "gpuUtilPercent", "memoryUtilPercent"])
    ),
    "PodRuntimeContainer": ObjectType(
        "PodRuntimeContainer", dict.fromkeys(["cpuPercent", "memoryPercent"])
    ),
}

# What an account in "strict" mode serves: no Pod field beyond those an official source shows.
_UNDOCUMENTED_POD_FIELDS = frozenset({"networkVolumeId", "endpointId"})
STRICT_SCHEMA: Mapping[str, ObjectType] = {
    **SCHEMA,
    "Pod": ObjectType(
        "Pod",
        {
            name: kind
            for name, kind in SCHEMA["Pod"].fields.items()
            if name not in _UNDOCUMENTED_POD_FIELDS
        },
    ),
}

_JS_DATE = "%a %b %d %Y %H:%M:%S GMT+0000 (Coordinated Universal Time)"


class RunpodDialect(Dialect):
    """GraphQL at ``/graphql``; the REST v2 (``/v2/…``) and v1 (``/v1/…``) APIs beside it
    (:mod:`watchdog_gpu.sim.servers.runpod_rest`), each with its own error shapes."""

    provider = "runpod"

    def __init__(self, world: SimulatedWorld, faults: FaultSettings | None = None) -> None:
        super().__init__(world, faults)
        self._rest = {"/v2/": RunpodRestV2(world, faults), "/v1/": RunpodRestV1(world, faults)}

    def register_routes(self) -> None:
        self.router.add("POST", "/graphql", self.graphql)

    def handle(self, request: SimRequest) -> SimResponse:
        for prefix, rest in self._rest.items():
            if request.path.startswith(prefix):
                return rest.handle(request)
        return super().handle(request)

    # ------------------------------------------------------------ errors
    def unauthorized(self, *, key_given: bool) -> SimResponse:
        return json_response(401, {"errors": [{"message": "Unauthorized"}]})

    def not_found(self, message: str) -> SimResponse:
        return json_response(404, {"errors": [{"message": message}]})

    def bad_request(self, message: str) -> SimResponse:
        return json_response(400, {"errors": [_validation_entry(message)]})

    def server_error(self) -> SimResponse:
        return json_response(
            500,
            {
                "errors": [
                    {
                        "message": "Something went wrong. Please try again later or contact "
                        "support.",
                        "extensions": {"code": "INTERNAL_SERVER_ERROR"},
                    }
                ],
                "data": None,
            },
        )

    def rate_limited(self, retry_after_seconds: int) -> SimResponse:
        return json_response(
            429,
            {"errors": [{"message": "Too Many Requests", "extensions": {"code": "RATE_LIMITED"}}]},
        )

    # ------------------------------------------------------------ GraphQL
    def graphql(self, account: str, request: SimRequest) -> SimResponse:
        query, variables = _query_and_variables(request)
        strict = self.world.api_mode(account) == "strict"
        try:
            operation = graphql.parse(query)
            root = "Mutation" if operation.kind == "mutation" else "Query"
            graphql.validate(operation.selections, root, STRICT_SCHEMA if strict else SCHEMA)
        except GraphQLError as error:
            if strict:
                return json_response(200, {"errors": [_validation_entry(str(error))]})
            return self.bad_request(str(error))
        data, errors = self._execute(account, operation.selections, root, variables)
        if self.world.api_mode(account) == "partial":
            errors += _partial_gpu_errors(data)
        payload: dict[str, Any] = {"data": data}
        if errors:
            payload = {"errors": errors, "data": data}
        return json_response(200, payload)

    def _execute(
        self,
        account: str,
        selections: tuple[Selection, ...],
        root: str,
        variables: Mapping[str, Any],
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Each top-level field resolved and projected, or ``null`` with its error entry."""
        data: dict[str, Any] = {}
        errors: list[dict[str, Any]] = []
        resolvers = self._mutations() if root == "Mutation" else self._queries()
        for selection in selections:
            if selection.name == "__typename":
                data[selection.key] = root
                continue
            try:
                arguments = graphql.resolve_arguments(selection.arguments, variables)
                value = resolvers[selection.name](account, arguments)
                data[selection.key] = graphql.project(
                    value, selection.selections, SCHEMA[root].fields[selection.name], SCHEMA
                )
            except (SimError, GraphQLError, KeyError, TypeError) as error:
                data[selection.key] = None
                errors.append(_error_entry(selection, _message(selection, error)))
        return data, errors

    def _queries(self) -> dict[str, Callable[[str, Mapping[str, Any]], Any]]:
        return {"myself": self._myself, "pod": self._pod}

    def _mutations(self) -> dict[str, Callable[[str, Mapping[str, Any]], Any]]:
        return {
            "podStop": self._stop,
            "podResume": self._resume,
            "podBidResume": self._resume,
            "podTerminate": self._terminate,
            "updateUserSettings": self._update_user,
            "deleteNetworkVolume": self._delete_volume,
        }

    def _myself(self, account: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
        view = self.world.account_view(account)
        keys = self.world.ssh_keys(account)
        return {
            "id": f"user_sim{self.world.account_names().index(account):04d}",
            "email": f"{account}@example.com",
            "clientBalance": view.balance_usd,
            "currentSpendPerHr": view.spend_usd_per_hour,
            "spendLimit": view.spend_limit_usd_per_hour,
            "notifyLowBalance": True,
            "notifyPodsStale": True,
            "notifyPodsGeneral": True,
            "pubKey": "\n".join(key.public_key for key in keys),
            "networkVolumes": lambda: [
                {
                    "id": volume.volume_id,
                    "name": volume.name,
                    "size": volume.size_gb,
                    "dataCenterId": "SIM-LO-1",
                    "dataCenter": {"id": "SIM-LO-1", "name": "Simulated loopback"},
                }
                for volume in self.world.volumes(account)
            ],
            "pods": lambda: [self._pod_object(pod) for pod in self.world.list_instances(account)],
        }

    def _pod(self, account: str, arguments: Mapping[str, Any]) -> dict[str, Any] | None:
        pod_id = _pod_id(arguments)
        view = self.world.instance(account, pod_id)
        return None if view is None else self._pod_object(view)

    def _stop(self, account: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
        pod_id = _pod_id(arguments)
        self.world.stop(account, pod_id)
        view = self.world.instance(account, pod_id)
        if view is None:
            raise UnknownInstanceError("pod not found")
        return self._pod_object(view)

    def _resume(self, account: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
        pod_id = _pod_id(arguments)
        self.world.start(account, pod_id)
        view = self.world.instance(account, pod_id)
        if view is None:
            raise UnknownInstanceError("pod not found")
        return self._pod_object(view)

    def _terminate(self, account: str, arguments: Mapping[str, Any]) -> None:
        pod_id = _pod_id(arguments)
        try:
            self.world.destroy(account, pod_id)
        except UnknownInstanceError:
            raise UnknownInstanceError("pod not found to terminate") from None

    def _update_user(self, account: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
        fields = arguments.get("input") or {}
        if "pubKey" in fields:
            keys = [line for line in str(fields["pubKey"]).splitlines() if line.strip()]
            self.world.replace_ssh_keys(account, keys)
        return self._myself(account, {})

    def _delete_volume(self, account: str, arguments: Mapping[str, Any]) -> None:
        volume_id = (arguments.get("input") or {}).get("id")
        self.world.delete_volume(account, str(volume_id))

    def _pod_object(self, view: InstanceView) -> dict[str, Any]:
        now = self.world.now()
        exact = view.provider_state
        if exact is not None:
            status, running = exact.name, exact.runtime and not view.destroying
        else:
            running = view.state == "running" and not view.destroying
            status = "RUNNING" if view.state in ("starting", "running") else "EXITED"
        if view.destroying:
            status = "TERMINATED"
        since = view.state_since.strftime(_JS_DATE)
        change = {
            "RUNNING": f"Rented by User: {since}",
            "EXITED": (
                f"Spot pod interrupted: {since}"
                if view.state == "paused"
                else f"Exited by User: {since}"
            ),
            "TERMINATED": f"Terminated by User: {since}",
        }.get(status, f"{status.capitalize()}: {since}")
        host_id = f"{view.instance_id}-{0x64410000 + view.ordinal:x}"
        return {
            "id": view.instance_id,
            "name": view.name,
            "desiredStatus": status,  # a scripted provider state's name included
            "podType": "INTERRUPTABLE" if view.interruptible else "RESERVED",
            "lastStatusChange": change,
            "imageName": "runpod/pytorch:2.4.0-py3.11-cuda12.4.1-devel-ubuntu22.04",
            "costPerHr": view.compute_usd_per_hour,
            "adjustedCostPerHr": round(
                view.compute_usd_per_hour * (1 - view.savings_plan_discount), 6
            ),
            "networkVolumeId": view.network_volume,
            "endpointId": view.serverless_endpoint,
            "lowestBidPriceToResume": (
                round(view.compute_usd_per_hour * 1.1, 4) if view.interruptible else None
            ),
            "costMultiplier": 1,
            "gpuCount": view.gpu_count,
            "vcpuCount": 8 * view.gpu_count,
            "memoryInGb": 62 * view.gpu_count,
            "volumeInGb": view.disk_gb,
            "containerDiskInGb": 0,  # the world bills only the pod volume (disk_gb)
            "volumeMountPath": "/workspace",
            "volumeEncrypted": False,
            "machineId": f"sim{view.ordinal:09d}",
            "locked": False,
            "uptimeSeconds": 0,
            "ports": "8888/http,22/tcp",
            "port": None,
            "templateId": None,
            "dockerArgs": "",
            "dockerId": None,
            "env": [],
            "containerRegistryAuthId": None,
            "version": 0,
            "gpuPowerLimitPercent": 100,
            "machine": {
                "gpuDisplayName": view.gpu_name,
                "gpuTypeId": f"NVIDIA {view.gpu_name}",
                "location": "SIM",
                "podHostId": host_id,
                "secureCloud": True,
                "costPerHr": view.compute_usd_per_hour,
                "currentPricePerGpu": round(view.compute_usd_per_hour / view.gpu_count, 4),
                "maintenanceStart": None,
                "maintenanceEnd": None,
                "maintenanceNote": None,
                "maxDownloadSpeedMbps": 1000,
                "maxUploadSpeedMbps": 1000,
                "supportPublicIp": True,
                "dataCenterId": "SIM-LO-1",
            },
            "runtime": _runtime(view, now) if running else None,
        }


def _runtime(view: InstanceView, now: Any) -> dict[str, Any]:
    started = view.started_at or view.state_since
    gpus = [
        {
            "id": f"GPU-{view.ordinal:08x}-0000-4000-8000-{reading.index:012x}",
            # MIG GPUs report no utilisation; RunPod's API would have nothing to show either.
            "gpuUtilPercent": None if view.gpu.mig else reading.sm,
            "memoryUtilPercent": None if view.gpu.mig else reading.mem,
        }
        for reading in view.gpu.gpus
    ]
    return {
        "uptimeInSeconds": int((now - started).total_seconds()),
        "ports": [
            {
                "ip": view.ssh_host,
                "isIpPublic": True,
                "privatePort": 22,
                "publicPort": view.ssh_port,
                "type": "tcp",
            }
        ],
        "gpus": gpus,
        "container": {"cpuPercent": 10, "memoryPercent": 20},
    }


def _partial_gpu_errors(data: dict[str, Any]) -> list[dict[str, Any]]:
    """An account in "partial" mode: every pod's ``runtime.gpus`` fails to resolve, as a field
    resolver error does on RunPod (``null`` there, an error entry with its path)."""
    myself = data.get("myself")
    pods = myself.get("pods") if isinstance(myself, dict) else None
    errors = []
    for index, pod in enumerate(pods if isinstance(pods, list) else []):
        runtime = pod.get("runtime") if isinstance(pod, dict) else None
        if isinstance(runtime, dict) and "gpus" in runtime:
            runtime["gpus"] = None
            errors.append(
                {
                    "message": "Something went wrong. Please try again later or contact support.",
                    "path": ["myself", "pods", index, "runtime", "gpus"],
                    "extensions": {"code": "INTERNAL_SERVER_ERROR"},
                }
            )
    return errors


def _query_and_variables(request: SimRequest) -> tuple[str, Mapping[str, Any]]:
    """The body's ``query`` text and ``variables`` (400 through the dialect when malformed)."""
    body = request.json()
    if not isinstance(body, dict) or not isinstance(body.get("query"), str):
        raise InvalidRequestError("Must provide query string.")
    variables = body.get("variables") or {}
    if not isinstance(variables, dict):
        raise InvalidRequestError("variables must be an object")
    return body["query"], variables


def _validation_entry(message: str) -> dict[str, Any]:
    return {"message": message, "extensions": {"code": "GRAPHQL_VALIDATION_FAILED"}}


def _pod_id(arguments: Mapping[str, Any]) -> str:
    fields = arguments.get("input")
    if not isinstance(fields, dict) or not isinstance(fields.get("podId"), str):
        raise GraphQLError("input.podId (String!) is required")
    return str(fields["podId"])


def _message(selection: Selection, error: Exception) -> str:
    if isinstance(error, UnknownInstanceError) and selection.name != "podTerminate":
        return "pod not found"
    return str(error) or type(error).__name__


def _error_entry(selection: Selection, message: str) -> dict[str, Any]:
    return {"message": message, "path": [selection.key], "extensions": {"code": "RUNPOD"}}
