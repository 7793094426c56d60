"""RunPod's REST APIs, served beside GraphQL on the same server (``docs/providers.md``,
"RunPod queries").

REST v2 (``/v2``, RFC 9457 ``application/problem+json`` errors): ``GET /v2/pods`` →
``{"pods": [...]}``, ``GET /v2/pods/{id}``, ``POST /v2/pods/{id}/action`` with ``{"action":
"start" | "stop" | "restart" | "terminate"}`` → the pod, ``DELETE /v2/pods/{id}`` → 204,
``GET /v2/network-volumes``, ``GET /v2/account/ssh-keys`` → ``{"keys": [...]}``.

REST v1 (``/v1``, deprecated by RunPod; errors ``{"message": …}``): ``GET /v1/pods`` (a bare
array), ``GET /v1/pods/{id}``, ``POST /v1/pods/{id}/stop`` and ``/start``, ``DELETE
/v1/pods/{id}`` → 204, ``GET /v1/networkvolumes``.

Status: v2 ``status`` is the actual state (starting → ``STARTING``, running → ``RUNNING``, paused
and stopped → ``EXITED``, a pending terminate → ``TERMINATED``), with ``cost`` 0.0 unless it bills
compute; v1 ``desiredStatus`` as GraphQL.
"""

from __future__ import annotations

from typing import Any

from watchdog_gpu.sim.http import SimRequest, SimResponse, empty_response, json_response
from watchdog_gpu.sim.records import InstanceView, InvalidRequestError, UnknownInstanceError
from watchdog_gpu.sim.servers.base import Dialect

_PROBLEM = "application/problem+json"


def _iso(view: InstanceView, attribute: str) -> str | None:
    moment = getattr(view, attribute)
    return None if moment is None else moment.strftime("%Y-%m-%dT%H:%M:%SZ")


_V2_STATUS = {"CREATED": "PROVISIONING", "RESTARTING": "STARTING", "DEAD": "ERROR"}


class RunpodRestV2(Dialect):
    provider = "runpod"

    def register_routes(self) -> None:
        add = self.router.add
        add("GET", "/v2/pods", self.list_pods)
        add("GET", "/v2/pods/{pod_id}", self.show)
        add("POST", "/v2/pods/{pod_id}/action", self.action)
        add("DELETE", "/v2/pods/{pod_id}", self.terminate)
        add("GET", "/v2/network-volumes", self.network_volumes)
        add("GET", "/v2/account/ssh-keys", self.ssh_keys)

    def unauthorized(self, *, key_given: bool) -> SimResponse:
        return _problem(401, "Unauthorized", "A valid API key is required.")

    def not_found(self, message: str) -> SimResponse:
        return _problem(404, "Not Found", "The requested Pod does not exist.")

    def bad_request(self, message: str) -> SimResponse:
        return _problem(422, "Unprocessable Entity", message)

    def server_error(self) -> SimResponse:
        return _problem(500, "Internal Server Error", "Something went wrong.")

    def rate_limited(self, retry_after_seconds: int) -> SimResponse:
        return _problem(429, "Too Many Requests", "rate limit exceeded for the minute window")

    def list_pods(self, account: str, request: SimRequest) -> SimResponse:
        pods = [self.pod(view) for view in self.world.list_instances(account)]
        return json_response(200, {"pods": pods})

    def show(self, account: str, request: SimRequest, pod_id: str) -> SimResponse:
        return json_response(200, self.pod(self._view(account, pod_id)))

    def action(self, account: str, request: SimRequest, pod_id: str) -> SimResponse:
        body = request.json()
        action = body.get("action") if isinstance(body, dict) else None
        self._view(account, pod_id)
        if action == "stop":
            self.world.stop(account, pod_id)
        elif action == "start":
            self.world.start(account, pod_id)
        elif action == "terminate":
            self.world.destroy(account, pod_id)
        elif action != "restart":
            raise InvalidRequestError("action must be start, stop, restart or terminate")
        return json_response(200, self.pod(self._view(account, pod_id)))

    def terminate(self, account: str, request: SimRequest, pod_id: str) -> SimResponse:
        self._view(account, pod_id)
        self.world.destroy(account, pod_id)
        return empty_response(204)

    def network_volumes(self, account: str, request: SimRequest) -> SimResponse:
        volumes = [
            {"id": v.volume_id, "name": v.name, "size": v.size_gb, "dataCenterId": "SIM-LO-1"}
            for v in self.world.volumes(account)
        ]
        return json_response(200, {"networkVolumes": volumes})

    def ssh_keys(self, account: str, request: SimRequest) -> SimResponse:
        return json_response(
            200, {"keys": [key.public_key for key in self.world.ssh_keys(account)]}
        )

    def _view(self, account: str, pod_id: str) -> InstanceView:
        view = self.world.instance(account, pod_id)
        if view is None:
            raise UnknownInstanceError(pod_id)
        return view

    def pod(self, view: InstanceView) -> dict[str, Any]:
        status = {
            "starting": "STARTING",
            "running": "RUNNING",
            "paused": "EXITED",
            "stopped": "EXITED",
        }[view.state]
        if view.provider_state is not None:
            # v2's finer actual status for each GraphQL desiredStatus.
            status = _V2_STATUS.get(view.provider_state.name, status)
        if view.destroying:
            status = "TERMINATED"
        running = status == "RUNNING"
        actions = {
            "STARTING": ["stop", "terminate"],
            "RUNNING": ["stop", "restart", "terminate"],
            "EXITED": ["start", "terminate"],
            "TERMINATED": [],
        }.get(status, ["terminate"])
        now = self.world.now()
        return {
            "id": view.instance_id,
            "name": view.name,
            "image": "runpod/pytorch:2.4.0-py3.11-cuda12.4.1-devel-ubuntu22.04",
            "status": status,
            "actions": actions,
            "mounts": {"persistent": {"size": view.disk_gb, "path": "/workspace"}},
            "gpu": {"id": f"NVIDIA {view.gpu_name}", "count": view.gpu_count},
            "cloud": "SECURE",
            "dataCenterId": "SIM-LO-1",
            "ssh": (
                {"direct": {"host": view.ssh_host, "port": view.ssh_port, "username": "root"}}
                if running
                else None
            ),
            "cost": view.compute_usd_per_hour if status in ("STARTING", "RUNNING") else 0.0,
            "locked": False,
            "runtime": (
                {
                    "uptime": int((now - (view.started_at or view.state_since)).total_seconds()),
                    "ports": [
                        {"private": 22, "public": view.ssh_port, "type": "tcp", "ip": view.ssh_host}
                    ],
                }
                if running
                else None
            ),
            "createdAt": _iso(view, "created_at"),
            "startedAt": _iso(view, "started_at"),
        }


class RunpodRestV1(Dialect):
    provider = "runpod"

    def register_routes(self) -> None:
        add = self.router.add
        add("GET", "/v1/pods", self.list_pods)
        add("GET", "/v1/pods/{pod_id}", self.show)
        add("POST", "/v1/pods/{pod_id}/stop", self.stop)
        add("POST", "/v1/pods/{pod_id}/start", self.start)
        add("DELETE", "/v1/pods/{pod_id}", self.terminate)
        add("GET", "/v1/networkvolumes", self.network_volumes)

    def unauthorized(self, *, key_given: bool) -> SimResponse:
        return json_response(401, {"message": "Unauthorized"})

    def not_found(self, message: str) -> SimResponse:
        return json_response(404, {"message": "Pod not found"})

    def bad_request(self, message: str) -> SimResponse:
        return json_response(400, {"message": message})

    def server_error(self) -> SimResponse:
        return json_response(500, {"message": "Internal Server Error"})

    def rate_limited(self, retry_after_seconds: int) -> SimResponse:
        return json_response(429, {"message": "Too Many Requests"})

    def list_pods(self, account: str, request: SimRequest) -> SimResponse:
        # Serverless workers are listed only with includeWorkers=true (RunPod's REST docs).
        workers = request.query_value("includeWorkers") == "true"
        return json_response(
            200,
            [
                self.pod(view)
                for view in self.world.list_instances(account)
                if workers or view.serverless_endpoint is None
            ],
        )

    def show(self, account: str, request: SimRequest, pod_id: str) -> SimResponse:
        return json_response(200, self.pod(self._view(account, pod_id)))

    def stop(self, account: str, request: SimRequest, pod_id: str) -> SimResponse:
        self._view(account, pod_id)
        self.world.stop(account, pod_id)
        return json_response(200, self.pod(self._view(account, pod_id)))

    def start(self, account: str, request: SimRequest, pod_id: str) -> SimResponse:
        self._view(account, pod_id)
        self.world.start(account, pod_id)
        return json_response(200, self.pod(self._view(account, pod_id)))

    def terminate(self, account: str, request: SimRequest, pod_id: str) -> SimResponse:
        self._view(account, pod_id)
        self.world.destroy(account, pod_id)
        return empty_response(204)

    def network_volumes(self, account: str, request: SimRequest) -> SimResponse:
        return json_response(
            200,
            [
                {"id": v.volume_id, "name": v.name, "size": v.size_gb, "dataCenterId": "SIM-LO-1"}
                for v in self.world.volumes(account)
            ],
        )

    def _view(self, account: str, pod_id: str) -> InstanceView:
        view = self.world.instance(account, pod_id)
        if view is None:
            raise UnknownInstanceError(pod_id)
        return view

    def pod(self, view: InstanceView) -> dict[str, Any]:
        status = "RUNNING" if view.state in ("starting", "running") else "EXITED"
        if view.provider_state is not None:
            status = view.provider_state.name
        if view.destroying:
            status = "TERMINATED"
        running = view.state == "running" and not view.destroying
        return {
            "id": view.instance_id,
            "name": view.name,
            "image": "runpod/pytorch:2.4.0-py3.11-cuda12.4.1-devel-ubuntu22.04",
            "desiredStatus": status,  # a scripted provider state's name included
            "costPerHr": view.compute_usd_per_hour,
            "adjustedCostPerHr": round(
                view.compute_usd_per_hour * (1 - view.savings_plan_discount), 6
            ),
            "interruptible": view.interruptible,
            "locked": False,
            "machineId": f"sim{view.ordinal:09d}",
            "gpu": {
                "id": f"NVIDIA {view.gpu_name}",
                "count": view.gpu_count,
                "displayName": view.gpu_name,
            },
            "vcpuCount": 8 * view.gpu_count,
            "memoryInGb": 62 * view.gpu_count,
            "containerDiskInGb": 0,
            "volumeInGb": view.disk_gb,
            "volumeMountPath": "/workspace",
            "volumeEncrypted": False,
            "ports": ["8888/http", "22/tcp"],
            "portMappings": {"22": view.ssh_port} if running else {},
            "publicIp": view.ssh_host if running else None,
            "env": {},
            "lastStartedAt": _iso(view, "started_at"),
            "templateId": None,
            "endpointId": view.serverless_endpoint,
            "networkVolumeId": None,
            "machine": {
                "gpuTypeId": f"NVIDIA {view.gpu_name}",
                "dataCenterId": "SIM-LO-1",
                "location": "SIM",
                "secureCloud": True,
            },
        }


def _problem(status: int, title: str, detail: str) -> SimResponse:
    return json_response(
        status, {"title": title, "status": status, "detail": detail}, content_type=_PROBLEM
    )
