"""Fault injection on a simulated account's API.

Each account has an API mode, scripted with ``api = ...`` account events or set by tests: ``ok``,
``error500``, ``ratelimit``, ``timeout``, ``malformed`` (handled, but the body cut in half),
``revoked``, ``partial`` and ``strict`` (RunPod). What each does: ``docs/scenario-format.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from watchdog_gpu.sim.http import SimResponse
from watchdog_gpu.sim.scenario import ApiMode

DEFAULT_STALL_SECONDS = 30.0


@dataclass(frozen=True, slots=True)
class FaultSettings:
    """How faults behave. Tests shorten ``stall_seconds`` to stay fast."""

    stall_seconds: float = DEFAULT_STALL_SECONDS
    retry_after_seconds: int = 1


class FaultBodies(Protocol):
    """What a dialect answers when a fault is injected."""

    def server_error(self) -> SimResponse: ...

    def rate_limited(self, retry_after_seconds: int) -> SimResponse: ...

    def unauthorized(self, *, key_given: bool) -> SimResponse: ...


def apply_fault(
    mode: ApiMode,
    dialect: FaultBodies,
    handle: Callable[[], SimResponse],
    settings: FaultSettings,
) -> SimResponse:
    """The response for a request on an account in ``mode``; ``handle`` serves it normally."""
    if mode == "error500":
        return dialect.server_error()
    if mode == "ratelimit":
        response = dialect.rate_limited(settings.retry_after_seconds)
        return response.with_header("Retry-After", str(settings.retry_after_seconds))
    if mode == "timeout":
        return SimResponse(status=0, body=b"", stall_seconds=settings.stall_seconds)
    if mode == "malformed":
        return truncate(handle())
    if mode == "revoked":
        return dialect.unauthorized(key_given=True)
    return handle()  # "ok"; "partial" and "strict" are shaped by the dialect


def truncate(response: SimResponse) -> SimResponse:
    """``response`` with a body that is no longer valid JSON (half of it; never empty)."""
    body = response.body
    if not body:
        return SimResponse(status=200, body=b'{"data": ', content_type="application/json")
    return SimResponse(
        status=response.status if response.status != 204 else 200,
        body=body[: max(1, len(body) // 2)],
        content_type=response.content_type,
        headers=response.headers,
    )
