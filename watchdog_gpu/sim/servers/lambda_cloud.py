"""The Lambda Cloud REST dialect (``docs/providers.md``, "Lambda") over the simulated world.

Served under ``/api/v1`` (the prefix is optional, so a base URL with or without it works):
``GET /instances``, ``GET /instances/{id}``, ``POST /instances/{id}`` (rename),
``POST /instance-operations/terminate`` and ``/restart`` (``{"instance_ids": [...]}``),
``GET /instance-types``, ``GET/POST /ssh-keys``, ``DELETE /ssh-keys/{id}``, ``GET /file-systems``,
``DELETE /filesystems/{id}``. There is no stop: Lambda cannot stop an instance.

Auth: ``Authorization: Bearer <key>``, or HTTP Basic with the key as the user name (``curl
--user KEY:``) or as the bare credential. A missing or unknown key → 401
``global/invalid-api-key``. Envelope ``{"data": …}``; errors ``{"error": {"code", "message"}}``.

State mapping: starting → ``booting``; running → ``active``; paused → ``preempted``; a pending
terminate → ``terminating``; gone → absent (404 ``global/object-does-not-exist`` for one id).
"""

from __future__ import annotations

import re
from typing import Any

from watchdog_gpu.sim.http import SimRequest, SimResponse, json_response
from watchdog_gpu.sim.records import InstanceView, InvalidRequestError, UnknownInstanceError
from watchdog_gpu.sim.servers.base import Dialect, basic_auth_key

_PREFIX = "/api/v1"
_STATUS = {"starting": "booting", "running": "active", "paused": "preempted"}


class LambdaDialect(Dialect):
    provider = "lambda"

    def register_routes(self) -> None:
        add = self.router.add
        add("GET", "/instances", self.list_instances)
        add("GET", "/instances/{instance_id}", self.show)
        add("POST", "/instances/{instance_id}", self.rename)
        add("POST", "/instance-operations/terminate", self.terminate)
        add("POST", "/instance-operations/restart", self.restart)
        add("GET", "/instance-types", self.instance_types)
        add("GET", "/ssh-keys", self.list_keys)
        add("POST", "/ssh-keys", self.create_key)
        add("DELETE", "/ssh-keys/{key_id}", self.delete_key)
        add("GET", "/file-systems", self.file_systems)
        add("DELETE", "/filesystems/{volume_id}", self.delete_file_system)

    def route_path(self, path: str) -> str:
        return path.removeprefix(_PREFIX) or "/"

    def api_key(self, request: SimRequest) -> str | None:
        basic = basic_auth_key(request.header("authorization"))
        return basic if basic is not None else super().api_key(request)

    # ------------------------------------------------------------ errors
    def unauthorized(self, *, key_given: bool) -> SimResponse:
        return _error(
            401,
            "global/invalid-api-key",
            "API key was invalid, expired, or deleted.",
            "Check your API key or create a new one, then try again.",
        )

    def not_found(self, message: str) -> SimResponse:
        return _error(404, "global/object-does-not-exist", "Specified instance does not exist.")

    def bad_request(self, message: str) -> SimResponse:
        return _error(400, "global/invalid-parameters", f"Invalid request data. {message}".strip())

    def server_error(self) -> SimResponse:
        return _error(500, "global/unknown", "An unknown error occurred.")

    def rate_limited(self, retry_after_seconds: int) -> SimResponse:
        return _error(429, "global/too-many-requests", "Too many requests.")

    # ------------------------------------------------------------ instances
    def list_instances(self, account: str, request: SimRequest) -> SimResponse:
        views = self.world.list_instances(account)
        return json_response(200, {"data": [instance_object(view) for view in views]})

    def show(self, account: str, request: SimRequest, instance_id: str) -> SimResponse:
        view = self._view(account, instance_id)
        return json_response(200, {"data": instance_object(view)})

    def rename(self, account: str, request: SimRequest, instance_id: str) -> SimResponse:
        body = request.json()
        self._view(account, instance_id)
        if not isinstance(body, dict) or not isinstance(body.get("name"), str):
            raise InvalidRequestError("expected {'name': '...'}")
        self.world.set_label(account, instance_id, body["name"][:64])
        return json_response(200, {"data": instance_object(self._view(account, instance_id))})

    def terminate(self, account: str, request: SimRequest) -> SimResponse:
        ids = _instance_ids(request)
        views = [self._view(account, instance_id) for instance_id in ids]
        for view in views:
            self.world.destroy(account, view.instance_id)
        terminated = [instance_object(self._view(account, view.instance_id)) for view in views]
        return json_response(200, {"data": {"terminated_instances": terminated}})

    def restart(self, account: str, request: SimRequest) -> SimResponse:
        views = [self._view(account, instance_id) for instance_id in _instance_ids(request)]
        return json_response(
            200, {"data": {"restarted_instances": [instance_object(view) for view in views]}}
        )

    def instance_types(self, account: str, request: SimRequest) -> SimResponse:
        types: dict[str, Any] = {}
        for instance in self.world.scenario.account(account).instances:
            name = _type_name(instance.gpu_name, instance.gpu_count)
            types[name] = {
                "instance_type": _instance_type(
                    instance.gpu_name, instance.gpu_count, instance.compute_usd_per_hour
                ),
                "regions_with_capacity_available": [_REGION],
            }
        return json_response(200, {"data": types})

    # ------------------------------------------------------------ keys, file systems
    def list_keys(self, account: str, request: SimRequest) -> SimResponse:
        keys = self.world.ssh_keys(account)
        return json_response(
            200,
            {
                "data": [
                    {"id": key.key_id, "name": key.name or key.key_id, "public_key": key.public_key}
                    for key in keys
                ]
            },
        )

    def create_key(self, account: str, request: SimRequest) -> SimResponse:
        body = request.json()
        if not isinstance(body, dict) or not isinstance(body.get("name"), str):
            raise InvalidRequestError("expected {'name': '...', 'public_key': '...'}")
        public_key = body.get("public_key")
        if not isinstance(public_key, str) or not public_key.strip():
            raise InvalidRequestError("the simulator does not generate key pairs")
        key = self.world.add_ssh_key(account, public_key.strip(), body["name"])
        return json_response(
            200, {"data": {"id": key.key_id, "name": key.name, "public_key": key.public_key}}
        )

    def delete_key(self, account: str, request: SimRequest, key_id: str) -> SimResponse:
        self.world.delete_ssh_key(account, key_id)
        return json_response(200, {"data": {}})

    def file_systems(self, account: str, request: SimRequest) -> SimResponse:
        data = [
            {
                "id": volume.volume_id,
                "name": volume.name,
                "mount_point": f"/lambda/nfs/{volume.name}",
                "created": volume.created_at.strftime("%Y-%m-%dT%H:%M:%S.000Z"),
                "created_by": {
                    "id": "sim-user",
                    "email": f"{account}@example.com",
                    "status": "active",
                },
                "is_in_use": volume.attached,
                "region": _REGION,
                "bytes_used": int(volume.size_gb * 2**30),
            }
            for volume in self.world.volumes(account)
        ]
        return json_response(200, {"data": data})

    def delete_file_system(self, account: str, request: SimRequest, volume_id: str) -> SimResponse:
        for volume in self.world.volumes(account):
            if volume.volume_id == volume_id and volume.attached:
                return _error(400, "global/invalid-parameters", "The filesystem is in use.")
        try:
            self.world.delete_volume(account, volume_id)
        except UnknownInstanceError:
            return _error(404, "global/not-found", "The requested resource was not found.")
        return json_response(200, {"data": {"deleted_ids": [volume_id]}})

    def _view(self, account: str, instance_id: str) -> InstanceView:
        view = self.world.instance(account, instance_id)
        if view is None:
            raise UnknownInstanceError(instance_id)
        return view


_REGION = {"name": "us-sim-1", "description": "Simulated loopback"}


def instance_object(view: InstanceView) -> dict[str, Any]:
    """A Lambda instance object for ``view``."""
    status = view.provider_state.name if view.provider_state is not None else _STATUS[view.state]
    if view.destroying:
        status = "terminating"
    booted = status not in ("booting",)
    unavailable = {"available": False, "reason_code": "vm-has-not-launched"}
    if view.destroying:
        unavailable = {"available": False, "reason_code": "vm-is-terminating"}
    action = {"available": True} if booted and not view.destroying else unavailable
    data: dict[str, Any] = {
        "id": view.instance_id,
        "name": view.label or view.name,
        "status": status,
        "ssh_key_names": ["sim-key"],
        "file_system_names": [],
        "region": _REGION,
        "instance_type": _instance_type(view.gpu_name, view.gpu_count, view.compute_usd_per_hour),
        "hostname": view.ssh_host.replace(".", "-"),
        "is_reserved": False,
        "actions": {
            "migrate": action,
            "rebuild": action,
            "restart": action,
            "cold_reboot": action,
            "terminate": {"available": not view.destroying} if not view.destroying else unavailable,
        },
        "tags": [],
        "firewall_rulesets": [],
    }
    if booted:
        data["ip"] = view.ssh_host
        data["private_ip"] = "10.0.2.100"
    return data


def _instance_type(gpu_name: str, gpu_count: int, usd_per_hour: float) -> dict[str, Any]:
    return {
        "name": _type_name(gpu_name, gpu_count),
        "description": f"{gpu_count}x {gpu_name}",
        "gpu_description": gpu_name,
        "price_cents_per_hour": round(usd_per_hour * 100),
        "specs": {
            "vcpus": 26 * gpu_count,
            "memory_gib": 200 * gpu_count,
            "storage_gib": 1024 * gpu_count,
            "gpus": gpu_count,
        },
    }


def _type_name(gpu_name: str, gpu_count: int) -> str:
    slug = re.sub(r"[^a-z0-9]+", "_", gpu_name.lower()).strip("_")
    return f"gpu_{gpu_count}x_{slug}"


def _instance_ids(request: SimRequest) -> list[str]:
    body = request.json()
    ids = body.get("instance_ids") if isinstance(body, dict) else None
    if not isinstance(ids, list) or not ids or not all(isinstance(item, str) for item in ids):
        raise InvalidRequestError("expected {'instance_ids': ['...']}")
    return ids


def _error(status: int, code: str, message: str, suggestion: str | None = None) -> SimResponse:
    error: dict[str, str] = {"code": code, "message": message}
    if suggestion:
        error["suggestion"] = suggestion
    return json_response(status, {"error": error})
