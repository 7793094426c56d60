"""Lambda Cloud client (REST, ``https://cloud.lambda.ai/api/v1``; docs/providers.md, "Lambda").

Calls (``Authorization: Bearer <key>``; paths are relative to the ``/api/v1`` base URL):

- ``GET /instances``, ``GET /file-systems``, ``GET /ssh-keys``;
- ``POST /instance-operations/terminate`` with ``{"instance_ids": ["<id>"]}``; a 404
  ``global/object-does-not-exist`` is success (already gone).

Lambda has no stop (billing ends only at terminate) and no balance endpoint: ``get_account``
makes no call and reports everything unknown.
"""

from __future__ import annotations

import logging
from datetime import datetime

from watchdog_gpu.capabilities import CAPABILITIES
from watchdog_gpu.errors import NotFoundError, PermanentError
from watchdog_gpu.model import AccountSnapshot, InstanceSnapshot, SshKeyRecord, VolumeSnapshot
from watchdog_gpu.providers.base import BaseProvider
from watchdog_gpu.providers.parsing import lambda_cloud as parse

logger = logging.getLogger(__name__)

_GONE_CODE = "global/object-does-not-exist"


class LambdaProvider(BaseProvider):
    """One Lambda Cloud account."""

    name = "lambda"
    capabilities = CAPABILITIES["lambda"]
    supports_stop = CAPABILITIES["lambda"].can_stop

    def list_instances(self, now: datetime) -> tuple[InstanceSnapshot, ...]:
        return self.http.request_json(
            "GET",
            "/instances",
            check=lambda payload: parse.parse_instances(payload, account=self.account, now=now),
        )

    def get_account(self, now: datetime) -> AccountSnapshot:
        """No call: Lambda is postpaid and exposes no balance, spend or limit."""
        return parse.parse_account(account=self.account, now=now)

    def list_volumes(self, now: datetime) -> tuple[VolumeSnapshot, ...]:
        return self.http.request_json(
            "GET",
            "/file-systems",
            check=lambda payload: parse.parse_file_systems(payload, account=self.account, now=now),
        )

    def list_ssh_keys(self) -> tuple[SshKeyRecord, ...]:
        return self.http.request_json(
            "GET",
            "/ssh-keys",
            check=lambda payload: parse.parse_ssh_keys(payload, account=self.account),
        )

    def destroy(self, instance_id: str) -> None:
        """Terminate; ``global/object-does-not-exist`` is success. A 404 without that code (a
        wrong ``api_url``) is a ``PermanentError``: it must never pass for a kill."""
        if not CAPABILITIES["lambda"].accepts_instance_id(instance_id):
            raise PermanentError(f"lambda: {instance_id[:40]!r} is not a Lambda instance id")
        try:
            self.http.request_json(
                "POST",
                "/instance-operations/terminate",
                body={"instance_ids": [instance_id]},
                check=lambda payload: self._terminate_answer(payload, instance_id),
                accept_status=frozenset({404}),
            )
        except NotFoundError as error:
            raise PermanentError(
                f"{error} (the answer does not say the instance is gone)",
                status_code=error.status_code,
            ) from None

    def stop(self, instance_id: str) -> None:
        raise PermanentError(
            "lambda: instances cannot be stopped, only terminated (billing ends at terminate)"
        )

    def _terminate_answer(self, payload: object, instance_id: str) -> None:
        code = parse.error_code(payload)
        if code == _GONE_CODE:
            return
        if code is not None:
            raise PermanentError(f"lambda: terminate refused: {code}")
        if instance_id not in parse.parse_terminated_ids(payload):
            # Accepted without listing it (already terminated?); the executor's re-listing
            # verifies either way.
            logger.warning(
                "terminate answer does not list the instance provider=lambda account=%s "
                "instance=%s",
                self.account,
                instance_id,
            )
