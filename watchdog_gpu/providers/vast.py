"""Vast.ai client (REST, ``https://console.vast.ai``; docs/providers.md, "Vast.ai").

Calls (all with ``Authorization: Bearer <key>``; the base URL is the API root, paths carry
``/api/v0`` or ``/api/v1``):

- ``GET /api/v1/instances/?limit=25&order_by=[{"col":"id","dir":"asc"}][&after_token=T]``,
  following ``next_token`` until it is null or empty (as the official client does); when v1
  answers 404 (not served), the unpaginated ``GET /api/v0/instances/`` instead.
- ``GET /api/v0/users/current/`` (echoes the API key: scrubbed before anything sees it).
- ``GET /api/v0/volumes?owner=me&type=all_volume``.
- ``GET /api/v0/ssh/``.
- ``DELETE /api/v0/instances/{id}/`` with body ``{}``: ``{"success": true}``, or
  ``no_such_instance``/``not_found`` (HTTP 200 or 404) = already gone = success.
- ``PUT /api/v0/instances/{id}/`` with body ``{"state": "stopped"}``.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime

from watchdog_gpu.capabilities import CAPABILITIES
from watchdog_gpu.errors import NotFoundError, PermanentError
from watchdog_gpu.model import AccountSnapshot, InstanceSnapshot, SshKeyRecord, VolumeSnapshot
from watchdog_gpu.providers.base import BaseProvider
from watchdog_gpu.providers.parsing import vast as parse

logger = logging.getLogger(__name__)

PAGE_LIMIT = 25  # the v1 maximum
MAX_PAGES = 400  # 10,000 instances: beyond that a paging loop is a bug, not an account
_ORDER_BY_ID = json.dumps([{"col": "id", "dir": "asc"}], separators=(",", ":"))


class VastProvider(BaseProvider):
    """One Vast.ai account."""

    name = "vast"
    capabilities = CAPABILITIES["vast"]
    supports_stop = CAPABILITIES["vast"].can_stop

    def list_instances(self, now: datetime) -> tuple[InstanceSnapshot, ...]:
        """Every instance, all v1 pages (or the v0 list where v1 is not served)."""
        try:
            return self._list_v1(now)
        except NotFoundError:
            logger.info(
                "paginated instance list not served, using v0 provider=vast account=%s",
                self.account,
            )
        return self.http.request_json(
            "GET",
            "/api/v0/instances/",
            check=lambda payload: parse.parse_instances(payload, account=self.account, now=now),
        )

    def _list_v1(self, now: datetime) -> tuple[InstanceSnapshot, ...]:
        by_id: dict[str, InstanceSnapshot] = {}
        token: str | None = None
        seen_tokens: set[str] = set()
        for _ in range(MAX_PAGES):
            params = {"limit": str(PAGE_LIMIT), "order_by": _ORDER_BY_ID}
            if token is not None:
                params["after_token"] = token
            page, token = self.http.request_json(
                "GET",
                "/api/v1/instances/",
                params=params,
                check=lambda payload: parse.parse_instances_page(
                    payload, account=self.account, now=now
                ),
            )
            # An instance can move between pages while we page; the later row is the fresher.
            by_id.update((snapshot.instance_id, snapshot) for snapshot in page)
            if token is None:
                return tuple(by_id.values())
            if token in seen_tokens:
                raise PermanentError("vast: instance pages repeat a next_token (paging loop)")
            seen_tokens.add(token)
        raise PermanentError(f"vast: instance listing exceeds {MAX_PAGES} pages")

    def get_account(self, now: datetime) -> AccountSnapshot:
        return self.http.request_json(
            "GET",
            "/api/v0/users/current/",
            check=lambda payload: parse.parse_account(payload, account=self.account, now=now),
        )

    def list_volumes(self, now: datetime) -> tuple[VolumeSnapshot, ...]:
        return self.http.request_json(
            "GET",
            "/api/v0/volumes",
            params={"owner": "me", "type": "all_volume"},
            check=lambda payload: parse.parse_volumes(payload, account=self.account, now=now),
        )

    def list_ssh_keys(self) -> tuple[SshKeyRecord, ...]:
        return self.http.request_json(
            "GET",
            "/api/v0/ssh/",
            check=lambda payload: parse.parse_ssh_keys(payload, account=self.account),
        )

    def destroy(self, instance_id: str) -> None:
        """Destroy an instance; "no such instance" (HTTP 200 or 404) is success. A 404 that
        does not say so (an HTML page from a wrong ``api_url``) is a ``PermanentError``: a
        misconfigured URL must never pass for a kill."""
        path = f"/api/v0/instances/{_checked_id(instance_id)}/"
        try:
            self.http.request_json(
                "DELETE", path, body={}, check=_destroy_answer, accept_status=frozenset({404})
            )
        except NotFoundError as error:
            raise PermanentError(
                f"{error} (the answer does not say the instance is gone)",
                status_code=error.status_code,
            ) from None

    def stop(self, instance_id: str) -> None:
        """Stop an instance (GPU released, disk kept and billed). Raises ``NotFoundError``
        when it does not exist."""
        path = f"/api/v0/instances/{_checked_id(instance_id)}/"
        self.http.request_json("PUT", path, body={"state": "stopped"}, check=_stop_answer)


def _destroy_answer(payload: object) -> None:
    if parse.is_already_gone(payload):
        return
    _require_success(payload, "destroy")


def _stop_answer(payload: object) -> None:
    _require_success(payload, "stop")


def _require_success(payload: object, operation: str) -> None:
    failure = parse.failure_of(payload)
    if failure is not None:
        raise PermanentError(f"vast: {operation} refused: {failure[0]}: {failure[1]}"[:300])
    # Success is spelled out ({"success": true}); anything else — including a 404 page from a
    # proxy that happens to be JSON — is not taken for one.
    if not (isinstance(payload, dict) and payload.get("success") is True):
        raise PermanentError(f"vast: {operation}: the answer does not report success")


def _checked_id(instance_id: str) -> str:
    # Ids go into the URL path: only Vast's numeric ids, so no id can reach another endpoint.
    if not CAPABILITIES["vast"].accepts_instance_id(instance_id):
        raise PermanentError(f"vast: {instance_id[:40]!r} is not a Vast instance id")
    return instance_id
