"""The Vast.ai REST dialect (``docs/providers.md``, "Vast.ai") over the simulated world.

Served (every path with or without its trailing slash, under ``/api/v0`` unless noted):

- ``GET /instances`` (legacy list, ``?owner=me`` ignored) and ``GET /api/v1/instances``
  (paginated: ``limit``, ``after_token``, ``order_by``, ``select_cols``, ``select_filters``);
- ``GET /instances/filters``; ``GET /instances/{id}`` → ``{"instances": row | null}``;
- ``PUT /instances/{id}`` with ``{"state": "stopped" | "running"}`` and/or ``{"label": …}``;
  ``PUT /instances`` with ``{"ids": [...], "state": …}``;
- ``DELETE /instances/{id}``; ``DELETE /instances`` with ``{"instance_ids": [...]}``;
- ``GET /users/current`` (echoes the caller's ``api_key`` like the real API does);
- ``GET/POST /ssh``, ``DELETE /ssh/{id}``; ``GET /volumes``, ``DELETE /volumes`` ``{"id"}``.

Auth: ``Authorization: Bearer <key>`` (or the legacy ``?api_key=``). No key → 403 "This action
requires login."; an unknown key → 401 "Invalid user key" (``error_403_no_auth.json`` /
``error_401_invalid_key.json``).

Instance rows (and the state mapping) are rendered by :mod:`watchdog_gpu.sim.servers.vast_rows`.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from operator import ge, gt, le, lt
from typing import Any

from watchdog_gpu.sim.http import SimRequest, SimResponse, json_response
from watchdog_gpu.sim.records import (
    InvalidRequestError,
    UnknownInstanceError,
)
from watchdog_gpu.sim.servers.base import Dialect
from watchdog_gpu.sim.servers.vast_rows import instance_row

# Computed columns the v1 list refuses to filter on (docs/providers.md, "Sources").
_COMPUTED = frozenset({"dph_total", "num_gpus", "duration", "uptime_mins", "instance", "search"})
_ORDERINGS: dict[str, Callable[[Any, Any], Any]] = {
    "gt": gt,
    "gte": ge,
    "lt": lt,
    "lte": le,
}
_OPERATORS = ("eq", "neq", "in", "notin", *_ORDERINGS)
_MAX_LIMIT = 25


class VastDialect(Dialect):
    provider = "vast"

    def register_routes(self) -> None:
        add = self.router.add
        add("GET", "/api/v0/instances", self.list_v0)
        add("GET", "/api/v1/instances", self.list_v1)
        add("GET", "/api/v0/instances/filters", self.filters)
        add("GET", "/api/v0/instances/{instance_id}", self.show)
        add("PUT", "/api/v0/instances/{instance_id}", self.manage)
        add("PUT", "/api/v0/instances", self.manage_many)
        add("DELETE", "/api/v0/instances/{instance_id}", self.destroy)
        add("DELETE", "/api/v0/instances", self.destroy_many)
        add("GET", "/api/v0/users/current", self.current_user)
        add("GET", "/api/v0/ssh", self.list_keys)
        add("POST", "/api/v0/ssh", self.create_key)
        add("DELETE", "/api/v0/ssh/{key_id}", self.delete_key)
        add("GET", "/api/v0/volumes", self.list_volumes)
        add("DELETE", "/api/v0/volumes", self.delete_volume)

    # ------------------------------------------------------------ errors
    def unauthorized(self, *, key_given: bool) -> SimResponse:
        if key_given:
            return _error(401, "auth_error", "Invalid user key")
        return _error(403, "auth_error", "This action requires login.")

    def not_found(self, message: str) -> SimResponse:
        return _error(404, "not_found", message)

    def bad_request(self, message: str) -> SimResponse:
        return _error(400, "invalid_args", message)

    def server_error(self) -> SimResponse:
        return _error(500, "server_error", "Internal Server Error")

    def rate_limited(self, retry_after_seconds: int) -> SimResponse:
        return _error(
            429, "rate_limit_exceeded", "API requests too frequent endpoint threshold=1.0"
        )

    # ------------------------------------------------------------ instances
    def list_v0(self, account: str, request: SimRequest) -> SimResponse:
        rows = self._rows(account)
        return json_response(200, {"instances_found": len(rows), "instances": rows})

    def list_v1(self, account: str, request: SimRequest) -> SimResponse:
        rows = self._rows(account)
        query = _ListQuery.from_request(request)
        known = set(rows[0]) if rows else set(_row_columns())
        try:
            rows = _filtered(rows, query.filters, known)
            _sort(rows, query.order_by, known)
        except _RejectedQuery as error:
            return _error(400, "invalid_request", str(error))
        limit = _limit(request.query_value("limit"))
        offset = _token_offset(request.query_value("after_token"))
        if offset is None:
            return _error(400, "invalid_token", "after_token is not a valid token")
        page = rows[offset : offset + limit]
        return json_response(
            200,
            {
                "success": True,
                "instances_found": len(page),
                "total_instances": len(rows),
                "label_counts": _label_counts(rows),
                "next_token": self._next_token(account, rows, page, offset + limit),
                "instances": _selected(page, query.columns),
            },
        )

    def _next_token(
        self, account: str, rows: list[dict[str, Any]], page: list[dict[str, Any]], end: int
    ) -> str | None:
        """The token of the page after ``page`` (which ends at ``end``). The last page's token
        is null; an account in "partial" mode gets "" (which the official client also takes as
        the end)."""
        if end < len(rows) and page:
            return _token(page[-1]["id"], end)
        return "" if self.world.api_mode(account) == "partial" else None

    def filters(self, account: str, request: SimRequest) -> SimResponse:
        combos = {
            (row["actual_status"], row["verification"], row["gpu_name"])
            for row in self._rows(account)
        }
        return json_response(
            200,
            {
                "filters": [
                    {"actual_status": status, "verification": verification, "gpu_name": gpu}
                    for status, verification, gpu in sorted(combos, key=str)
                ]
            },
        )

    def show(self, account: str, request: SimRequest, instance_id: str) -> SimResponse:
        view = self.world.instance(account, instance_id) if instance_id.isdigit() else None
        row = instance_row(view, self.world.now()) if view is not None else None
        return json_response(200, {"instances": row})

    def manage(self, account: str, request: SimRequest, instance_id: str) -> SimResponse:
        body = _object_body(request)
        if self.world.instance(account, instance_id) is None:
            return _no_such_instance(instance_id)
        if "label" in body:
            self.world.set_label(account, instance_id, str(body["label"])[:1024])
        if "state" in body:
            self._set_state(account, instance_id, body["state"])
        return json_response(200, {"success": True})

    def manage_many(self, account: str, request: SimRequest) -> SimResponse:
        body = _object_body(request)
        ids = body.get("ids")
        if not isinstance(ids, list) or "state" not in body:
            raise InvalidRequestError("expected {'ids': [...], 'state': ...}")
        for item in ids:
            if self.world.instance(account, str(item)) is not None:
                self._set_state(account, str(item), body["state"])
        return json_response(200, {"success": True})

    def destroy(self, account: str, request: SimRequest, instance_id: str) -> SimResponse:
        if self.world.instance(account, instance_id) is None:
            return _no_such_instance(instance_id)
        self.world.destroy(account, instance_id)
        return json_response(200, {"success": True})

    def destroy_many(self, account: str, request: SimRequest) -> SimResponse:
        ids = _object_body(request).get("instance_ids")
        if not isinstance(ids, list):
            raise InvalidRequestError("expected {'instance_ids': [...]}")
        for item in ids:
            if self.world.instance(account, str(item)) is not None:
                self.world.destroy(account, str(item))
        return json_response(200, {"success": True})

    def _set_state(self, account: str, instance_id: str, state: object) -> None:
        if state == "stopped":
            self.world.stop(account, instance_id)
        elif state == "running":
            self.world.start(account, instance_id)
        else:
            raise InvalidRequestError(f"state must be 'running' or 'stopped', not {state!r}")

    def _rows(self, account: str) -> list[dict[str, Any]]:
        now = self.world.now()
        return [instance_row(view, now) for view in self.world.list_instances(account)]

    # ------------------------------------------------------------ account
    def current_user(self, account: str, request: SimRequest) -> SimResponse:
        view = self.world.account_view(account)
        keys = self.world.ssh_keys(account)
        user_id = 410000 + self.world.account_names().index(account)
        return json_response(
            200,
            {
                "id": user_id,
                "username": account,
                "user": account,
                "fullname": account,
                "email": f"{account}@example.com",
                "email_verified": True,
                "created_at": int(self.world.origin.timestamp()) - 86400 * 90,
                "key_id": 98000 + user_id % 1000,
                "sid": f"sim{user_id:x}",
                # The real API echoes the caller's key here (docs/providers.md, "Sources"): clients
                # must scrub it, so the simulator does the same to keep them honest.
                "api_key": self.api_key(request),
                "credit": view.balance_usd,
                "balance": 0.0,
                "total_spend": -view.total_spend_usd,
                "balance_threshold": 0.0,
                "balance_threshold_enabled": False,
                "autobill_threshold": 0.0,
                "autobill_amount": 0.0,
                "can_pay": False,
                "has_billing": False,
                "last4": None,
                "billing_creditonly": 1,
                "got_signup_credit": 1,
                "has_rented": True,
                "ssh_key": keys[0].public_key if keys else "",
                "host_only": False,
            },
        )

    def list_keys(self, account: str, request: SimRequest) -> SimResponse:
        user_id = 410000 + self.world.account_names().index(account)
        return json_response(
            200,
            [
                {
                    "id": int(key.key_id),
                    "user_id": user_id,
                    "key": key.public_key,
                    "created_at": _iso(key.created_at),
                    "deleted_at": None,
                }
                for key in self.world.ssh_keys(account)
            ],
        )

    def create_key(self, account: str, request: SimRequest) -> SimResponse:
        public_key = _object_body(request).get("ssh_key")
        if not isinstance(public_key, str) or not public_key.strip():
            return _error(400, "no_ssh_key", "No ssh key provided")
        key = self.world.add_ssh_key(account, public_key.strip())
        user_id = 410000 + self.world.account_names().index(account)
        return json_response(
            200,
            {
                "success": True,
                "key": {
                    "id": int(key.key_id),
                    "user_id": user_id,
                    "public_key": key.public_key,
                    "created_at": _iso(key.created_at),
                    "deleted_at": None,
                },
            },
        )

    def delete_key(self, account: str, request: SimRequest, key_id: str) -> SimResponse:
        self.world.delete_ssh_key(account, key_id)
        return json_response(200, {"success": True})

    def list_volumes(self, account: str, request: SimRequest) -> SimResponse:
        volumes = []
        for volume in self.world.volumes(account):
            volumes.append(
                {
                    "id": int(volume.volume_id),
                    "label": volume.name,
                    "status": "running" if volume.attached else "stopped",
                    "disk_space": volume.size_gb,
                    "storage_cost": volume.storage_usd_per_gb_month,
                    "storage_total_cost": volume.usd_per_hour,
                    "start_date": volume.created_at.timestamp(),
                    "public_ipaddr": "127.0.0.1",
                    "verification": "verified",
                    "instances": [],
                }
            )
        return json_response(200, {"volumes": volumes})

    def delete_volume(self, account: str, request: SimRequest) -> SimResponse:
        volume_id = _object_body(request).get("id")
        try:
            self.world.delete_volume(account, str(volume_id))
        except UnknownInstanceError:
            return _error(404, "no_such_volume", f"Volume {volume_id} does not exist.")
        return json_response(200, {"success": True})


@dataclass(frozen=True, slots=True)
class _ListQuery:
    """The v1 list's ``select_filters``, ``order_by`` and ``select_cols``."""

    filters: dict[str, Any]
    order_by: list[Any]
    columns: Any

    @classmethod
    def from_request(cls, request: SimRequest) -> _ListQuery:
        filters = _json_param(request, "select_filters", {})
        order_by = _json_param(request, "order_by", [{"col": "id", "dir": "asc"}])
        columns = _json_param(request, "select_cols", ["*"])
        if not isinstance(filters, dict) or not isinstance(order_by, list):
            raise InvalidRequestError("select_filters must be an object and order_by a list")
        return cls(filters, order_by, columns)


class _RejectedQuery(Exception):
    """A filter or sort column the v1 list refuses (answered 400 ``invalid_request``)."""


def _filtered(
    rows: list[dict[str, Any]], filters: dict[str, Any], known: set[str]
) -> list[dict[str, Any]]:
    for column, condition in filters.items():
        if column in _COMPUTED or column not in known:
            raise _RejectedQuery(f"Error in query parameters: {column} is not a valid search key")
        rows = [row for row in rows if _matches(row.get(column), condition)]
    return rows


def _sort(rows: list[dict[str, Any]], order_by: list[Any], known: set[str]) -> None:
    """Sort ``rows`` in place by each ``order_by`` entry, then by id."""
    for entry in reversed([*order_by, {"col": "id", "dir": "asc"}]):
        column = entry.get("col") if isinstance(entry, dict) else None
        if column not in known:
            raise _RejectedQuery(f"{column} is not a valid order_by column")
        descending = str(entry.get("dir", "asc")).lower() == "desc"
        rows.sort(key=_column_key(str(column)), reverse=descending)


def _label_counts(rows: list[dict[str, Any]]) -> dict[str, int]:
    labels: dict[str, int] = {}
    for row in rows:
        label = row.get("label") or ""
        labels[label] = labels.get(label, 0) + 1
    return labels


def _selected(page: list[dict[str, Any]], columns: Any) -> list[dict[str, Any]]:
    """``page`` cut to ``select_cols`` (all columns for ``["*"]``)."""
    if columns == ["*"] or not isinstance(columns, list):
        return page
    return [{column: row.get(column) for column in columns} for row in page]


def _row_columns() -> list[str]:
    return ["id", "label", "actual_status", "gpu_name", "verification"]


def _matches(value: object, condition: object) -> bool:
    if not isinstance(condition, dict):
        return value == condition
    for operator, operand in condition.items():
        if operator not in _OPERATORS:
            raise InvalidRequestError(f"unknown filter operator {operator!r}")
        if not _compare(operator, value, operand):
            return False
    return True


def _compare(operator: str, value: Any, operand: Any) -> bool:
    if operator == "eq":
        return bool(value == operand)
    if operator == "neq":
        return bool(value != operand)
    if operator in ("in", "notin"):
        if not isinstance(operand, list):
            raise InvalidRequestError(f"'{operator}' needs a list")
        return (value in operand) == (operator == "in")
    if value is None or operand is None:
        return False
    try:
        return bool(_ORDERINGS[operator](value, operand))
    except TypeError:
        raise InvalidRequestError(f"cannot compare {value!r} with {operand!r}") from None


def _column_key(column: str) -> Callable[[dict[str, Any]], tuple[int, str, float]]:
    return lambda row: _sort_key(row.get(column))


def _sort_key(value: object) -> tuple[int, str, float]:
    if value is None:
        return (0, "", 0.0)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return (1, "", float(value))
    return (2, str(value), 0.0)


def _json_param(request: SimRequest, name: str, default: Any) -> Any:
    raw = request.query_value(name)
    if raw is None or raw == "":
        return default
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        raise InvalidRequestError(f"{name} is not valid JSON") from None


def _limit(raw: str | None) -> int:
    if raw is None:
        return _MAX_LIMIT
    try:
        value = int(json.loads(raw))
    except (ValueError, TypeError):
        raise InvalidRequestError("limit must be an integer") from None
    # Values <= 0 are treated as 5, values above the maximum are capped (docs/providers.md,
    # "Sources").
    return 5 if value <= 0 else min(value, _MAX_LIMIT)


def _token(last_id: int, offset: int) -> str:
    payload = {"values": {"id": last_id}, "offset": offset}
    return base64.b64encode(json.dumps(payload).encode()).decode()


def _token_offset(raw: str | None) -> int | None:
    if raw is None or raw == "":
        return 0
    try:
        payload = json.loads(base64.b64decode(raw, validate=True))
        offset = payload["offset"]
    except (binascii.Error, ValueError, KeyError, TypeError):
        return None
    return offset if isinstance(offset, int) and offset >= 0 else None


def _object_body(request: SimRequest) -> dict[str, Any]:
    body = request.json()
    if not isinstance(body, dict):
        raise InvalidRequestError("the body must be a JSON object")
    return body


def _no_such_instance(instance_id: str) -> SimResponse:
    return _error(404, "no_such_instance", f"Instance {instance_id} does not exist.")


def _error(status: int, code: str, message: str) -> SimResponse:
    return json_response(status, {"success": False, "error": code, "msg": message})


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
